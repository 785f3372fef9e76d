// CombinedNonMaxSuppression: per-class non-maximum suppression over a batch, the classes'
// survivors merged by score: tf.image.combined_non_max_suppression, plus Gaussian soft-NMS.
//
// boxes [B, N, q, 4] (q = 1: one box shared by all classes; q = C: one box per class), given as
// (y1, x1, y2, x2) in either corner order; scores [B, N, C]. For each image and class, the boxes
// with score > score_threshold are taken in order of decreasing score (the lower box index first
// on ties) and
//   - hard NMS (soft_nms_sigma = 0): a box is kept unless its IoU with a kept box of the class
//     is > iou_threshold, as tf.image.combined_non_max_suppression computes it (the same IoU,
//     in float32, bit for bit);
//   - soft-NMS (soft_nms_sigma > 0): tf.image.non_max_suppression_with_scores's Gaussian
//     soft-NMS, step for step: each kept box scales a candidate's score by
//     exp(-0.5 * iou^2 / sigma); a candidate whose score drops to <= score_threshold is dropped,
//     one that dropped goes back into the queue with its new score (iou_threshold plays no part,
//     as in TensorFlow);
// until min(max_output_size_per_class, N) boxes of the class are kept. The kept boxes of all
// classes are merged in order of decreasing (final) score, on ties the lower class and then the
// earlier kept box first, and the first max_detections are returned, where max_detections =
// max_total_size, or with pad_per_class min(max_total_size, max_output_size_per_class * C).
// clip_boxes clips every returned coordinate to [0, 1]. Unused rows are zero;
// valid_detections counts the used ones.
//
// half and bfloat16 are compared in float (the IoU is float32 for every dtype, as TensorFlow's);
// the outputs keep the input's values exactly (scores that soft-NMS decayed are rounded to T).
// CPU only: NMS is a sequential, branchy loop per class, and the CPU kernel is parallel over
// images and classes.
#ifndef OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_H_
#define OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_H_

#include <cstdint>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"

// The element types of boxes and scores.
#define OPFORGE_NMS_TYPES(X, ...) \
  X(Eigen::half, __VA_ARGS__)     \
  X(Eigen::bfloat16, __VA_ARGS__) \
  X(float, __VA_ARGS__)

namespace opforge {

struct CombinedNmsParams {
  // Attrs.
  bool pad_per_class = false;
  bool clip_boxes = true;
  // The scalar inputs.
  int64_t max_output_size_per_class = 0;
  int64_t max_total_size = 0;
  float iou_threshold = 0.5f;
  float score_threshold = 0.0f;
  float soft_nms_sigma = 0.0f;
  // From the shapes (ValidateCombinedNms fills them).
  int64_t batch = 0, num_boxes = 0, q = 1, num_classes = 0;

  // The rows of the outputs per image.
  int64_t max_detections() const {
    if (!pad_per_class) return max_total_size;
    const double per_class_total =
        static_cast<double>(max_output_size_per_class) * static_cast<double>(num_classes);
    return per_class_total < static_cast<double>(max_total_size)
               ? max_output_size_per_class * num_classes
               : max_total_size;
  }
};

// The shapes: boxes [B, N, q, 4] with q = 1 or C; scores [B, N, C]; the five scalars 0-D.
// `scalars` are the shapes of max_output_size_per_class, max_total_size, iou_threshold,
// score_threshold and soft_nms_sigma, in that order.
Status ValidateCombinedNms(const std::vector<int64_t>& boxes, const std::vector<int64_t>& scores,
                           const std::vector<std::vector<int64_t>>& scalars,
                           CombinedNmsParams* params);

// The scalar values: both sizes > 0, iou_threshold in [0, 1], score_threshold not NaN,
// soft_nms_sigma finite and >= 0.
Status ValidateCombinedNmsValues(const CombinedNmsParams& params);

// nmsed_boxes [B, D, 4], nmsed_scores [B, D] (T), nmsed_classes [B, D] (float32),
// valid_detections [B] (int32), D = params.max_detections(). Parallel over images and classes;
// the same bits for any partition.
template <typename T>
void CombinedNms(const CombinedNmsParams& params, const T* boxes, const T* scores, T* nmsed_boxes,
                 T* nmsed_scores, float* nmsed_classes, int32_t* valid_detections,
                 const Parallel& parallel);

}  // namespace opforge

#endif  // OPFORGE_OPS_COMBINED_NON_MAX_SUPPRESSION_COMBINED_NON_MAX_SUPPRESSION_H_
