// CombinedNonMaxSuppression on the CPU, in three parallel phases:
//   1. candidates: one pass over each image's scores, a block of classes per task (reading
//      scores row by row, where a loop per class would stride through the whole array once per
//      class), collecting the boxes above score_threshold of every class;
//   2. NMS per (image, class), from a heap of the class's candidates (only as many are popped
//      as it takes to keep max_output_size_per_class boxes);
//   3. per image, the kept boxes of all classes merged by score into the outputs.
// Each task writes only its own lists, in an order independent of the partition, so the results
// are the same bits for any thread count.
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace opforge {

namespace {

constexpr char kOp[] = "CombinedNonMaxSuppression";
constexpr int64_t kClassBlock = 16;  // 64 bytes of float scores per row and task

struct Candidate {
  float score;
  int32_t index;
  int32_t suppress_begin;  // soft-NMS: the kept boxes already applied to `score`
};

// The heap order of TensorFlow's soft-NMS queue: the higher score, then the lower index, on top.
inline bool HeapLess(const Candidate& a, const Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.index > b.index);
}

// A box as the IoU sees it: corners sorted, area; plus its coordinates as given.
struct Box {
  float ymin, xmin, ymax, xmax, area;
  float coords[4];
};

// std::min and std::max exactly (their NaN behaviour follows from the argument order).
inline float Min(float a, float b) { return b < a ? b : a; }
inline float Max(float a, float b) { return a < b ? b : a; }

template <typename T>
Box MakeBox(const T* b) {
  Box box;
  for (int k = 0; k < 4; ++k) box.coords[k] = static_cast<float>(b[k]);
  box.ymin = Min(box.coords[0], box.coords[2]);
  box.xmin = Min(box.coords[1], box.coords[3]);
  box.ymax = Max(box.coords[0], box.coords[2]);
  box.xmax = Max(box.coords[1], box.coords[3]);
  box.area = (box.ymax - box.ymin) * (box.xmax - box.xmin);
  return box;
}

// TensorFlow's IoU of a candidate i and a kept box j, operation for operation.
inline float Iou(const Box& i, const Box& j) {
  if (i.area <= 0 || j.area <= 0) return 0.0f;
  const float ymin = Max(i.ymin, j.ymin);
  const float xmin = Max(i.xmin, j.xmin);
  const float ymax = Min(i.ymax, j.ymax);
  const float xmax = Min(i.xmax, j.xmax);
  const float inter = Max(ymax - ymin, 0.0f) * Max(xmax - xmin, 0.0f);
  return inter / (i.area + j.area - inter);
}

struct Kept {
  float score;
  int32_t cls;
  Box box;
};

template <typename T>
void HardNms(const CombinedNmsParams& p, const T* boxes, int64_t image, int64_t cls,
             std::vector<Candidate>* heap, int64_t limit, std::vector<Kept>* kept) {
  const float threshold = p.iou_threshold;
  std::make_heap(heap->begin(), heap->end(), HeapLess);
  auto end = heap->end();
  while (static_cast<int64_t>(kept->size()) < limit && end != heap->begin()) {
    std::pop_heap(heap->begin(), end, HeapLess);
    --end;
    const Candidate next = *end;
    const Box box = MakeBox(boxes + ((image * p.num_boxes + next.index) * p.q +
                                     (p.q > 1 ? cls : 0)) * 4);
    bool keep = true;
    for (auto j = kept->rbegin(); j != kept->rend(); ++j) {
      if (Iou(box, j->box) > threshold) {
        keep = false;
        break;
      }
    }
    if (keep) kept->push_back({next.score, static_cast<int32_t>(cls), box});
  }
}

// tf.image.non_max_suppression_with_scores's loop with soft_nms_sigma > 0.
template <typename T>
void SoftNms(const CombinedNmsParams& p, const T* boxes, int64_t image, int64_t cls,
             std::vector<Candidate>* heap, int64_t limit, std::vector<Kept>* kept) {
  const float scale = -0.5f / p.soft_nms_sigma;
  const float score_threshold = p.score_threshold;
  std::make_heap(heap->begin(), heap->end(), HeapLess);
  auto end = heap->end();
  while (static_cast<int64_t>(kept->size()) < limit && end != heap->begin()) {
    std::pop_heap(heap->begin(), end, HeapLess);
    Candidate next = *(end - 1);
    --end;
    const float original = next.score;
    const Box box = MakeBox(boxes + ((image * p.num_boxes + next.index) * p.q +
                                     (p.q > 1 ? cls : 0)) * 4);
    for (int64_t j = static_cast<int64_t>(kept->size()) - 1; j >= next.suppress_begin; --j) {
      const float sim = Iou(box, (*kept)[static_cast<size_t>(j)].box);
      next.score *= std::exp(scale * sim * sim);
      if (next.score <= score_threshold) break;
    }
    next.suppress_begin = static_cast<int32_t>(kept->size());
    if (next.score == original) {
      kept->push_back({next.score, static_cast<int32_t>(cls), box});
    } else if (next.score > score_threshold) {
      *end = next;
      ++end;
      std::push_heap(heap->begin(), end, HeapLess);
    }
  }
}

inline float Clip(float v) { return Max(Min(v, 1.0f), 0.0f); }

}  // namespace

Status ValidateCombinedNms(const std::vector<int64_t>& boxes, const std::vector<int64_t>& scores,
                           const std::vector<std::vector<int64_t>>& scalars,
                           CombinedNmsParams* params) {
  CombinedNmsParams& p = *params;
  if (boxes.size() != 4 || boxes[3] != 4) {
    return InvalidArgument(kOp, "boxes", "4-D [batch, num_boxes, q, 4]", ShapeString(boxes));
  }
  if (scores.size() != 3) {
    return InvalidArgument(kOp, "scores", "3-D [batch, num_boxes, num_classes]",
                           ShapeString(scores));
  }
  if (scores[0] != boxes[0] || scores[1] != boxes[1]) {
    return InvalidArgument(kOp, "scores",
                           "[batch, num_boxes, num_classes] with the batch and num_boxes of boxes " +
                               ShapeString(boxes),
                           ShapeString(scores));
  }
  if (boxes[2] != 1 && boxes[2] != scores[2]) {
    return InvalidArgument(kOp, "boxes",
                           "[batch, num_boxes, q, 4] with q = 1 or num_classes = " +
                               std::to_string(scores[2]),
                           ShapeString(boxes));
  }
  if (boxes[1] > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument(kOp, "boxes", "at most 2^31 - 1 boxes per image", ShapeString(boxes));
  }
  static const char* const kScalars[] = {"max_output_size_per_class", "max_total_size",
                                         "iou_threshold", "score_threshold", "soft_nms_sigma"};
  for (size_t i = 0; i < scalars.size() && i < 5; ++i) {
    if (!scalars[i].empty()) {
      return InvalidArgument(kOp, kScalars[i], "a scalar (0-D)", ShapeString(scalars[i]));
    }
  }
  p.batch = boxes[0];
  p.num_boxes = boxes[1];
  p.q = boxes[2];
  p.num_classes = scores[2];
  return Status::Ok();
}

Status ValidateCombinedNmsValues(const CombinedNmsParams& p) {
  if (p.max_output_size_per_class <= 0) {
    return InvalidArgument(kOp, "max_output_size_per_class", "positive",
                           p.max_output_size_per_class);
  }
  if (p.max_total_size <= 0) {
    return InvalidArgument(kOp, "max_total_size", "positive", p.max_total_size);
  }
  if (!(p.iou_threshold >= 0.0f && p.iou_threshold <= 1.0f)) {
    return InvalidArgument(kOp, "iou_threshold", "in [0, 1]", p.iou_threshold);
  }
  if (std::isnan(p.score_threshold)) {
    return InvalidArgument(kOp, "score_threshold", "a number (not NaN)", p.score_threshold);
  }
  if (!(p.soft_nms_sigma >= 0.0f) || std::isinf(p.soft_nms_sigma)) {
    return InvalidArgument(kOp, "soft_nms_sigma", "finite and >= 0 (0: hard NMS)",
                           p.soft_nms_sigma);
  }
  return Status::Ok();
}

template <typename T>
void CombinedNms(const CombinedNmsParams& p, const T* boxes, const T* scores, T* nmsed_boxes,
                 T* nmsed_scores, float* nmsed_classes, int32_t* valid_detections,
                 const Parallel& parallel) {
  const int64_t batch = p.batch, n = p.num_boxes, classes = p.num_classes;
  const int64_t detections = p.max_detections();
  const int64_t limit = std::min(p.max_output_size_per_class, n);
  std::vector<std::vector<Candidate>> candidates(static_cast<size_t>(batch * classes));

  // 1. Candidates, a block of classes per task.
  const int64_t blocks = (classes + kClassBlock - 1) / kClassBlock;
  const float score_threshold = p.score_threshold;
  parallel.For(batch * blocks, static_cast<double>(n * kClassBlock), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t image = task / blocks;
      const int64_t c0 = (task % blocks) * kClassBlock;
      const int64_t c1 = std::min(classes, c0 + kClassBlock);
      std::vector<Candidate>* lists = candidates.data() + image * classes;
      const T* row = scores + image * n * classes;
      for (int64_t i = 0; i < n; ++i, row += classes) {
        for (int64_t c = c0; c < c1; ++c) {
          const float s = static_cast<float>(row[c]);
          if (s > score_threshold) lists[c].push_back({s, static_cast<int32_t>(i), 0});
        }
      }
    }
  });

  // 2. NMS per image and class.
  std::vector<std::vector<Kept>> kept(static_cast<size_t>(batch * classes));
  const bool soft = p.soft_nms_sigma > 0.0f;
  parallel.For(batch * classes, 50.0 * static_cast<double>(std::max<int64_t>(limit, 1)) + 2.0 * n,
               [&](int64_t begin, int64_t end) {
                 for (int64_t task = begin; task < end; ++task) {
                   std::vector<Candidate>* heap = &candidates[static_cast<size_t>(task)];
                   std::vector<Kept>* out = &kept[static_cast<size_t>(task)];
                   if (heap->empty()) continue;
                   if (soft) {
                     SoftNms(p, boxes, task / classes, task % classes, heap, limit, out);
                   } else {
                     HardNms(p, boxes, task / classes, task % classes, heap, limit, out);
                   }
                   std::vector<Candidate>().swap(*heap);
                 }
               });

  // 3. Merge per image.
  parallel.For(batch, 20.0 * static_cast<double>(detections + limit * classes),
               [&](int64_t begin, int64_t end) {
                 std::vector<const Kept*> all;
                 for (int64_t image = begin; image < end; ++image) {
                   all.clear();
                   for (int64_t c = 0; c < classes; ++c) {
                     for (const Kept& k : kept[static_cast<size_t>(image * classes + c)]) {
                       all.push_back(&k);
                     }
                   }
                   const int64_t count = std::min<int64_t>(static_cast<int64_t>(all.size()),
                                                           detections);
                   // The first `count` in order of decreasing score; stable: class, then kept
                   // order, on ties.
                   std::stable_sort(all.begin(), all.end(),
                                    [](const Kept* a, const Kept* b) { return a->score > b->score; });
                   T* out_boxes = nmsed_boxes + image * detections * 4;
                   T* out_scores = nmsed_scores + image * detections;
                   float* out_classes = nmsed_classes + image * detections;
                   for (int64_t d = 0; d < count; ++d) {
                     const Kept& k = *all[static_cast<size_t>(d)];
                     for (int j = 0; j < 4; ++j) {
                       const float v = p.clip_boxes ? Clip(k.box.coords[j]) : k.box.coords[j];
                       out_boxes[d * 4 + j] = static_cast<T>(v);
                     }
                     out_scores[d] = static_cast<T>(k.score);
                     out_classes[d] = static_cast<float>(k.cls);
                   }
                   std::fill(out_boxes + count * 4, out_boxes + detections * 4, T(0));
                   std::fill(out_scores + count, out_scores + detections, T(0));
                   std::fill(out_classes + count, out_classes + detections, 0.0f);
                   valid_detections[image] = static_cast<int32_t>(count);
                 }
               });
}

#define OPFORGE_INSTANTIATE_NMS_(T, ...)                                                       \
  template void CombinedNms<T>(const CombinedNmsParams&, const T*, const T*, T*, T*, float*, \
                               int32_t*, const Parallel&);
OPFORGE_NMS_TYPES(OPFORGE_INSTANTIATE_NMS_)
#undef OPFORGE_INSTANTIATE_NMS_

}  // namespace opforge
