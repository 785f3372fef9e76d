// YoloDecode: a YOLO-v3 head's raw output map to boxes and class scores, in one pass.
//
// features is [B, H, W, A*(5+C)] (or [B, H, W, A, 5+C], the same memory); for anchor a the
// channels a*(5+C)+k hold k=0..3: tx, ty, tw, th, k=4: the objectness logit, k=5..: the class
// logits (the Darknet layout). For the cell in column cx, row cy and anchor a:
//   bx = (scale_x_y * sigmoid(tx) - (scale_x_y - 1) / 2 + cx) * stride_x,  stride_x = input_w / W
//   by = (scale_x_y * sigmoid(ty) - (scale_x_y - 1) / 2 + cy) * stride_y,  stride_y = input_h / H
//   bw = exp(tw) * anchor_w,  bh = exp(th) * anchor_h  (as Darknet and yolov3-tf2 write it)
// normalized divides x by input_w and y by input_h. Box n = (cy*W + cx)*A + a of image b gets
// boxes[b, n] in box_format, class_scores[b, n, c] = sigmoid(obj) * sigmoid(class_c),
// scores[b, n] = max_c class_scores[b, n, c] and class_indices[b, n] its argmax (the lowest
// index on ties; a NaN wins, as in NumPy, so a NaN input gives a NaN score for its box only).
// On the CPU every NaN output (forward and gradient) is the positive quiet NaN
// (std::numeric_limits<T>::quiet_NaN(), NumPy's np.nan), whatever NaN or arithmetic made it, so
// its bits are the same for every thread count, ISA and buffer address (x86 keeps the first
// operand's NaN, and the compiler orders operands differently in vector and scalar loops).
//
// Two things bound the boxes, and neither changes a box that the formula above gives finitely:
// - max_log_scale (an attr, +inf by default: off) clamps tw and th first, bw = exp(min(tw,
//   max_log_scale)) * anchor_w, as torchvision's box coder does with log(1000 / 16)
//   (kYoloMaxLogScale: a box at most 62.5 times its anchor). Its gradient is 0 above the bound.
// - Saturation: a box coordinate (after `normalized`, in the output format) beyond the largest
//   finite value M of T (half 65504, bfloat16 ~3.39e38, float FLT_MAX, double DBL_MAX), or
//   infinite because exp overflowed the compute type, is written as +-M, and its gradient is 0
//   there, the derivative of the saturated function clamp(v, -M, M) (the other coordinates of
//   the box keep theirs). So finite features always give finite boxes in every type: exp
//   overflows float at tw = 88.7 and a half output already passes 65504 at tw = 11.1 for a
//   unit anchor. Below M every coordinate is the plain formula's value, rounded once to T.
//   NaN stays NaN; tw = +inf saturates like any overflow.
//
// half and bfloat16 are computed in float, rounded once at the end; float in float; double in
// double.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

// log(1000 / 16): torchvision's clamp of tw, th, the value of max_log_scale that gives the
// bounded boxes of torchvision (and of opforge before max_log_scale existed). As a float attr it
// is rounded to float32, also for double maths.
constexpr double kYoloMaxLogScale = 4.135166556742356;

enum class YoloBoxFormat : int { kXyxy = 0, kYxyx = 1, kCenterXywh = 2 };

struct YoloDecodeParams {
  // Attrs.
  int64_t num_classes = 0;
  std::vector<int64_t> input_size;  // [height, width] of the network input, in pixels
  std::string box_format = "xyxy";
  bool normalized = false;
  float scale_x_y = 1.0f;
  // tw, th are clamped at it before exp; +inf (the default): not clamped.
  float max_log_scale = std::numeric_limits<float>::infinity();
  // From the shapes (ValidateYoloDecode fills them).
  YoloBoxFormat format = YoloBoxFormat::kXyxy;
  int64_t batch = 0, height = 0, width = 0, anchors = 0;

  int64_t boxes_per_image() const { return height * width * anchors; }
  int64_t channels_per_anchor() const { return 5 + num_classes; }
};

// The attrs alone: num_classes >= 1, input_size two positive values, a known box_format, a
// finite scale_x_y >= 1 (what the YOLO-v4 "grid sensitivity" trick uses; 1 is plain YOLO-v3), a
// max_log_scale that is finite or +inf (NaN would make every box NaN, -inf every box empty).
Status ValidateYoloDecodeAttrs(YoloDecodeParams* params);

// The shapes: features [B, H, W, A*(5+C)] or [B, H, W, A, 5+C] with H, W >= 1; anchors [A, 2].
// Fills batch, height, width and anchors.
Status ValidateYoloDecode(const std::vector<int64_t>& features, const std::vector<int64_t>& anchors,
                          YoloDecodeParams* params);

// The gradient's inputs: grad_boxes [B, N, 4], grad_scores [B, N], grad_class_scores [B, N, C]
// for the features and anchors ValidateYoloDecode accepts; each may instead be [0], an output
// without gradient (the kernels get a null pointer and skip its work). TensorFlow's gradient
// machinery passes zeros, not None, for an unused float output, so this saves work only for
// callers of the gradient op itself.
Status ValidateYoloDecodeGrad(const std::vector<int64_t>& grad_boxes,
                              const std::vector<int64_t>& grad_scores,
                              const std::vector<int64_t>& grad_class_scores,
                              const std::vector<int64_t>& features,
                              const std::vector<int64_t>& anchors, YoloDecodeParams* params);

// The anchors' values: [count, 2] (width, height), each finite and positive, else an error that
// names `op` and the first bad row (argument "anchors" gives "anchors[k]"). Host memory.
// YoloDecode, YoloDecodeGrad, YoloPostprocess and YoloTargets check their anchors with it; the
// kernels below do not (they take any values: a NaN anchor gives NaN boxes, an infinite one
// saturated boxes), so an error says where a bad box would have come from.
template <typename T>
Status CheckYoloAnchors(const char* op, const char* argument, const T* anchors, int64_t count);
// The same for untyped anchors of a float dtype (the CUDA paths, which have no Eigen types).
Status CheckYoloAnchors(const char* op, const char* argument, DType dtype, const void* anchors,
                        int64_t count);

// anchors: [A, 2] (width, height) in input pixels. Outputs as above; any may be null (skipped)
// except that scores and class_indices go together.
template <typename T>
void YoloDecodeForward(const YoloDecodeParams& params, const T* features, const T* anchors,
                       T* boxes, T* scores, int32_t* class_indices, T* class_scores,
                       const Parallel& parallel);

// d features from the gradients of boxes, scores and class_scores (each may be null: zero).
// scores passes its gradient to the winning class and the objectness; anchors get none.
template <typename T>
void YoloDecodeBackward(const YoloDecodeParams& params, const T* grad_boxes, const T* grad_scores,
                        const T* grad_class_scores, const T* features, const T* anchors,
                        T* grad_features, const Parallel& parallel);

// YoloDecodeForward's boxes and class_scores for some boxes of one image only: `selected` holds
// `count` ascending box indices n (as above) into image `image` of features; boxes [count, 4]
// and class_scores [count, C] get exactly the values YoloDecodeForward gives those boxes (the
// same code, the same bits). Serial. YoloPostprocess decodes only the boxes whose objectness can
// reach its score threshold with it.
template <typename T>
void YoloDecodeSelected(const YoloDecodeParams& params, const T* features, const T* anchors,
                        int64_t image, const int64_t* selected, int64_t count, T* boxes,
                        T* class_scores);

// CUDA versions (yolo_decode.cu), asynchronous on `stream`. features, outputs and gradients are
// device memory; anchors are host memory (the binding registers the input HostMemory, and checks
// the values there with CheckYoloAnchors on both devices, before any work and without waiting
// for the device). They are copied to `scratch`, device memory of YoloDecodeGpuScratchBytes
// bytes aligned to 8 and usable on `stream`, which the caller provides (TensorFlow owns the
// GPU's memory: allocate_temp).
int64_t YoloDecodeGpuScratchBytes(DType dtype, const YoloDecodeParams& params);
Status YoloDecodeForwardGpu(DType dtype, const YoloDecodeParams& params, const void* features,
                            const void* anchors, void* boxes, void* scores, int32_t* class_indices,
                            void* class_scores, void* scratch, int64_t scratch_bytes, void* stream);
Status YoloDecodeBackwardGpu(DType dtype, const YoloDecodeParams& params, const void* grad_boxes,
                             const void* grad_scores, const void* grad_class_scores,
                             const void* features, const void* anchors, void* grad_features,
                             void* scratch, int64_t scratch_bytes, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_H_
