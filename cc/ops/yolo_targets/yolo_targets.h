// YoloTargets: ground-truth boxes to YOLO-v3 training targets, one y_true tensor per scale.
//
// boxes [B, M, 4] are normalised (x1, y1, x2, y2); classes [B, M] int32; rows whose four
// coordinates are all zero are padding and skipped. anchors [K, 2] are normalised (w, h).
// Scale s has the anchor indices anchor_masks[s] and a grid of grid_sizes[s] = (gh, gw); its
// y_true is [B, gh, gw, len(anchor_masks[s]), 6], zero except at the assigned cell and anchor,
// which hold (x1, y1, x2, y2, 1, class).
//
// Assignment (yolov3-tf2's transform_targets): the best anchor k over all K by the IoU of
// widths and heights, min(w, aw) * min(h, ah) / (w*h + aw*ah - min(w, aw) * min(h, ah)), the
// lowest k on ties; every scale whose mask holds k (at the first position it appears) gets the
// box; its cell is floor(centre * grid), clamped into the grid, centre = (x1 + x2) / 2. Two
// boxes on the same cell and anchor: the later row wins, always.
//
// A row with NaN or inf, x2 < x1, y2 < y1, a coordinate outside [0, 1] by more than
// kYoloBoxTolerance, a negative class, or (when num_classes >= 0) a class >= num_classes is an
// error naming the image, the row and the value.
#ifndef OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_H_
#define OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {

// How far outside [0, 1] a box coordinate may lie (rounding in a dataset's pixel-to-normalised
// conversion, a box drawn one pixel past the border) before it is an error.
constexpr double kYoloBoxTolerance = 0.01;

// float and double (half/bfloat16 cannot hold class indices beyond 2048/256 exactly).
#define OPFORGE_YOLO_TARGETS_TYPES(X, ...) \
  X(float, __VA_ARGS__)                    \
  X(double, __VA_ARGS__)

struct YoloTargetsParams {
  // Attrs.
  std::vector<int64_t> anchor_masks;       // every scale's anchor indices, one after the other
  std::vector<int64_t> anchors_per_scale;  // how many of them each scale has
  std::vector<int64_t> grid_sizes;         // gh, gw of each scale
  int64_t num_classes = -1;                // -1: classes are only checked to be >= 0
  // From the shapes (ValidateYoloTargets fills them).
  int64_t batch = 0, max_boxes = 0, num_anchors = 0;

  int64_t num_scales() const { return static_cast<int64_t>(anchors_per_scale.size()); }
  // The first index of scale s in anchor_masks.
  int64_t mask_offset(int64_t s) const {
    int64_t o = 0;
    for (int64_t i = 0; i < s; ++i) o += anchors_per_scale[static_cast<size_t>(i)];
    return o;
  }
  // The shape of scale s's y_true.
  std::vector<int64_t> output_shape(int64_t s) const {
    return {batch, grid_sizes[static_cast<size_t>(2 * s)],
            grid_sizes[static_cast<size_t>(2 * s + 1)], anchors_per_scale[static_cast<size_t>(s)],
            6};
  }
};

// The attrs: one or more scales, each with >= 1 anchor index >= 0 and a grid of positive size.
Status ValidateYoloTargetsAttrs(const YoloTargetsParams& params);

// The shapes: boxes [B, M, 4], classes [B, M], anchors [K, 2] with K >= 1 and every mask index
// < K. Fills batch, max_boxes and num_anchors.
Status ValidateYoloTargets(const std::vector<int64_t>& boxes, const std::vector<int64_t>& classes,
                           const std::vector<int64_t>& anchors, YoloTargetsParams* params);

// The values (host memory): anchors finite and positive (CheckYoloAnchors of yolo_decode.h, the
// check YoloDecode runs too; the CUDA path copies the anchors back to run it), then every row of
// boxes and classes as described above. The first bad row (in image, then row order) is
// reported.
template <typename T>
Status CheckYoloTargetsData(const YoloTargetsParams& params, const T* boxes, const int32_t* classes,
                            const T* anchors);

// Writes every scale's y_true (outputs[s], fully overwritten). Parallel over images.
template <typename T>
void YoloTargets(const YoloTargetsParams& params, const T* boxes, const int32_t* classes,
                 const T* anchors, const std::vector<T*>& outputs, const Parallel& parallel);

// CUDA version (yolo_targets.cu): checks the data on the device, reports the first bad row with
// the same message (it waits for the stream to read the check back), then assigns. It needs
// YoloTargetsGpuScratchBytes(params) bytes of device scratch memory, aligned to 8 bytes and
// usable on `stream`, which the caller provides (TensorFlow owns the GPU's memory: the binding
// takes it from allocate_temp).
int64_t YoloTargetsGpuScratchBytes(const YoloTargetsParams& params);
Status YoloTargetsGpu(DType dtype, const YoloTargetsParams& params, const void* boxes,
                      const int32_t* classes, const void* anchors,
                      const std::vector<void*>& outputs, void* scratch, int64_t scratch_bytes,
                      void* stream);

// The message of a bad row (shared by the CPU and CUDA paths). `values` are its four
// coordinates; `cls` its class.
Status YoloTargetsRowError(const YoloTargetsParams& params, int64_t image, int64_t row,
                           const double values[4], int64_t cls);

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_TARGETS_YOLO_TARGETS_H_
