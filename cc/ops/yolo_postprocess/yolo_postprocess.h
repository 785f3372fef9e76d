// YoloPostprocess: a YOLO head's raw maps (one per scale) to final detections in one op: what
// YoloDecode on every scale (normalised xyxy boxes), the scales concatenated, then
// CombinedNonMaxSuppression with q = 1 computes, bit for bit, without decoding the boxes that
// cannot be detections.
//
// A box's class scores are sigmoid(obj) * sigmoid(class_c) <= sigmoid(obj), so a box whose
// objectness logit is below logit(score_threshold) has no class above the threshold and is never
// an NMS candidate. The kernel reads the objectness logits only, keeps the boxes at or above a
// bound a little under that logit (the margin covers the rounding of the sigmoid, the product and
// a half or bfloat16 result, so no candidate is ever dropped), decodes those with YoloDecode's own
// code (YoloDecodeSelected: the same bits), and runs the NMS core on them in their original
// order (so ties break on the same box index). In a trained detector almost every box has a low
// objectness: for YOLO-v3 at 416 with 80 classes the unfused path writes and scans 10647 x 80
// class scores per image, this one a few hundred boxes.
//
// CPU only, as CombinedNonMaxSuppression: the NMS is a sequential loop per class.
#ifndef OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_H_
#define OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"
#include "ops/yolo_decode/yolo_decode.h"

// The element types of the feature maps (and of the boxes and scores returned).
#define OPFORGE_YOLO_POSTPROCESS_TYPES(X, ...) \
  X(Eigen::half, __VA_ARGS__)                  \
  X(Eigen::bfloat16, __VA_ARGS__)              \
  X(float, __VA_ARGS__)

namespace opforge {

struct YoloPostprocessParams {
  // Attrs (num_classes, input_size, scale_x_y and max_log_scale as YoloDecode's; box_format is
  // "xyxy" and normalized true, fixed).
  int64_t num_classes = 0;
  std::vector<int64_t> input_size;
  float scale_x_y = 1.0f;
  float max_log_scale = std::numeric_limits<float>::infinity();
  // The NMS: its attrs and scalar inputs; batch, q (1) and num_classes are filled by
  // ValidateYoloPostprocess, num_boxes is each image's number of decoded boxes.
  CombinedNmsParams nms;
  // From the shapes: one YoloDecode per scale, and the batch.
  std::vector<YoloDecodeParams> scales;
  int64_t batch = 0;

  // Boxes per image over all scales (the N of the unfused path).
  int64_t boxes_per_image() const;
};

// The attributes alone (num_classes, input_size, scale_x_y, max_log_scale): YoloDecode's checks,
// with messages that name this op. The shape function, the kernel and the fuzz harness call it.
Status ValidateYoloPostprocessAttrs(const YoloPostprocessParams& params);

// features: one [B, H, W, A*(5+C)] or [B, H, W, A, 5+C] per scale, the same B; anchors: one
// [A, 2] per scale; scalars: the shapes of max_detections_per_class, max_detections,
// iou_threshold, score_threshold, soft_nms_sigma (CombinedNonMaxSuppression's
// max_output_size_per_class and max_total_size, named as YoloPostprocess's messages name them).
// Errors name the scale ("features[1]").
Status ValidateYoloPostprocess(const std::vector<std::vector<int64_t>>& features,
                               const std::vector<std::vector<int64_t>>& anchors,
                               const std::vector<std::vector<int64_t>>& scalars,
                               YoloPostprocessParams* params);

// The scalar values (params.nms), as CombinedNonMaxSuppression checks them.
Status ValidateYoloPostprocessValues(const YoloPostprocessParams& params);

// The lowest objectness logit that can give a class score above score_threshold (see above),
// for T's rounding; -infinity when every box can (score_threshold below 0).
double YoloObjectnessBound(float score_threshold);

// features[s] and anchors[s] per scale. Outputs as CombinedNonMaxSuppression's:
// nmsed_boxes [B, D, 4] (x1, y1, x2, y2) normalised, nmsed_scores [B, D], nmsed_classes [B, D]
// (float32), valid_detections [B]. Parallel over images (and over classes for one image).
template <typename T>
void YoloPostprocess(const YoloPostprocessParams& params, const std::vector<const T*>& features,
                     const std::vector<const T*>& anchors, T* nmsed_boxes, T* nmsed_scores,
                     float* nmsed_classes, int32_t* valid_detections, const Parallel& parallel);

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_POSTPROCESS_YOLO_POSTPROCESS_H_
