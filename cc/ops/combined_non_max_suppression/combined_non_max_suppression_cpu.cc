// CombinedNonMaxSuppression on the CPU, in three parallel phases:
//   1. candidates: one pass over each image's scores, a block of classes per task (reading
//      scores row by row, where a loop per class would stride through the whole array once per
//      class), collecting the boxes above score_threshold of every class;
//   2. NMS per (image, class), from a heap of the class's candidates (only as many are popped
//      as it takes to keep max_output_size_per_class boxes);
//   3. per image, the kept boxes of all classes merged by score into the outputs.
// Each task writes only its own lists, in an order independent of the partition, so the results
// are the same bits for any thread count.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "common/scratch.h"
#include "ops/combined_non_max_suppression/combined_non_max_suppression.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace opforge {

namespace {

constexpr char kOp[] = "CombinedNonMaxSuppression";

// A candidate is one 64-bit key: its score mapped to an unsigned integer of the same order in
// the high half, and ~index in the low half, so that a greater key is a higher score, or an
// equal score and a lower index: TensorFlow's soft-NMS queue order, a total order (indices
// differ), which integer comparisons sort several times faster than a struct comparator.
// -0 is made +0 first: the two are equal scores.
inline uint64_t Key(float score, int32_t index) {
  uint32_t bits;
  const float canonical = score + 0.0f;
  std::memcpy(&bits, &canonical, sizeof(bits));
  bits = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(bits) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}
// A candidate's score as given (its key folded -0 into +0).
template <typename T>
float InputScore(const CombinedNmsParams& p, const T* scores, int64_t image, int32_t index,
                 int64_t cls) {
  return static_cast<float>(scores[(image * p.num_boxes + index) * p.num_classes + cls]);
}

inline int32_t KeyIndex(uint64_t key) { return static_cast<int32_t>(~static_cast<uint32_t>(key)); }

// Soft-NMS's queue entry: a candidate, its decayed score, and how many kept boxes it has seen.
struct Candidate {
  float score;
  int32_t index;
  int32_t suppress_begin;
};

// The heap order of TensorFlow's soft-NMS queue: the higher score, then the lower index, on top.
// (A function object, so that the std algorithms inline it.)
struct HeapLess {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.score < b.score || (a.score == b.score && a.index > b.index);
  }
};

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

// Sets mask bit c (64 per word) where float(row[c]) > threshold, for c < classes; returns
// whether any is set.
template <typename T>
bool RowMask(const T* row, int64_t classes, float threshold, uint64_t* mask) {
  uint64_t any = 0;
  for (int64_t w = 0; w * 64 < classes; ++w) {
    const int64_t c0 = w * 64;
    const int64_t width = std::min<int64_t>(64, classes - c0);
    uint64_t bits = 0;
    for (int64_t c = 0; c < width; ++c) {
      bits |= static_cast<uint64_t>(static_cast<float>(row[c0 + c]) > threshold) << c;
    }
    mask[w] = bits;
    any |= bits;
  }
  return any != 0;
}

#if defined(__AVX__)
template <>
bool RowMask<float>(const float* row, int64_t classes, float threshold, uint64_t* mask) {
  const __m256 t = _mm256_set1_ps(threshold);
  uint64_t any = 0;
  for (int64_t w = 0; w * 64 < classes; ++w) {
    const int64_t c0 = w * 64;
    const int64_t width = std::min<int64_t>(64, classes - c0);
    uint64_t bits = 0;
    int64_t c = 0;
    for (; c + 8 <= width; c += 8) {
      const __m256 v = _mm256_loadu_ps(row + c0 + c);
      bits |= static_cast<uint64_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, t, _CMP_GT_OQ))) << c;
    }
    for (; c < width; ++c) bits |= static_cast<uint64_t>(row[c0 + c] > threshold) << c;
    mask[w] = bits;
    any |= bits;
  }
  return any != 0;
}
#endif

// The kept boxes of a class as columns, for a scan the compiler vectorises.
struct KeptColumns {
  std::vector<float> ymin, xmin, ymax, xmax, area;
  void Push(const Box& b) {
    ymin.push_back(b.ymin);
    xmin.push_back(b.xmin);
    ymax.push_back(b.ymax);
    xmax.push_back(b.xmax);
    area.push_back(b.area);
  }
  void Clear() {
    ymin.clear();
    xmin.clear();
    ymax.clear();
    xmax.clear();
    area.clear();
  }
};

// Whether any kept box in [begin, end) has IoU > threshold with b: Overlaps, branch-free over a
// block (the same operations, so the same decisions, as TensorFlow's IoU test).
inline bool AnyOverlaps(const Box& b, const KeptColumns& k, size_t begin, size_t end,
                        float threshold) {
  int any = 0;
  for (size_t j = begin; j < end; ++j) {
    const float ymin = Max(b.ymin, k.ymin[j]);
    const float xmin = Max(b.xmin, k.xmin[j]);
    const float ymax = Min(b.ymax, k.ymax[j]);
    const float xmax = Min(b.xmax, k.xmax[j]);
    const float inter = Max(ymax - ymin, 0.0f) * Max(xmax - xmin, 0.0f);
    const float iou = inter / (b.area + k.area[j] - inter);
    any |= static_cast<int>(k.area[j] > 0) & static_cast<int>(inter != 0.0f) &
           static_cast<int>(iou > threshold);
  }
  return any != 0;
}

template <typename T>
void HardNms(const CombinedNmsParams& p, const T* boxes, const T* scores, int64_t image,
             int64_t cls, uint64_t* first, uint64_t* last, int64_t limit, std::vector<Kept>* kept) {
  const float threshold = p.iou_threshold;
  // Blocks of kept boxes, newest first: overlapping boxes have similar scores, so a suppressor
  // is most often among the last kept.
  constexpr size_t kBlock = 16;
  thread_local KeptColumns columns;
  columns.Clear();
  // Candidates in decreasing key order, a chunk at a time: the first `chunk` by nth_element
  // (linear), sorted; usually one chunk of 2 * limit covers every box it takes to keep `limit`.
  const size_t total = static_cast<size_t>(last - first);
  const size_t chunk = static_cast<size_t>(std::max<int64_t>(2 * limit, 64));
  size_t sorted = 0;
  for (size_t at = 0; static_cast<int64_t>(kept->size()) < limit && at < total; ++at) {
    if (at == sorted) {
      const size_t stop = std::min(total, sorted + chunk);
      if (stop < total)
        std::nth_element(first + sorted, first + stop, last, std::greater<uint64_t>());
      std::sort(first + sorted, first + stop, std::greater<uint64_t>());
      sorted = stop;
    }
    const uint64_t key = first[at];
    const int32_t index = KeyIndex(key);
    const Box box =
        MakeBox(boxes + ((image * p.num_boxes + index) * p.q + (p.q > 1 ? cls : 0)) * 4);
    // A box of area <= 0 (or NaN) overlaps nothing (IoU 0, or NaN): it is always kept.
    bool keep = true;
    if (box.area > 0) {
      for (size_t hi = kept->size(); hi > 0 && keep;) {
        const size_t lo = hi > kBlock ? hi - kBlock : 0;
        keep = !AnyOverlaps(box, columns, lo, hi, threshold);
        hi = lo;
      }
    }
    if (keep) {
      // The score as given (the key made -0 into +0).
      kept->push_back({InputScore(p, scores, image, index, cls), static_cast<int32_t>(cls), box});
      columns.Push(box);
    }
  }
}

// tf.image.non_max_suppression_with_scores's loop with soft_nms_sigma > 0.
template <typename T>
void SoftNms(const CombinedNmsParams& p, const T* boxes, const T* scores, int64_t image,
             int64_t cls, const uint64_t* keys, const uint64_t* keys_end, int64_t limit,
             std::vector<Kept>* kept) {
  const float scale = -0.5f / p.soft_nms_sigma;
  const float score_threshold = p.score_threshold;
  thread_local std::vector<Candidate> queue;
  queue.clear();
  for (const uint64_t* k = keys; k != keys_end; ++k) {
    queue.push_back({InputScore(p, scores, image, KeyIndex(*k), cls), KeyIndex(*k), 0});
  }
  Candidate* first = queue.data();
  Candidate* last = first + queue.size();
  std::make_heap(first, last, HeapLess());
  Candidate* end = last;
  while (static_cast<int64_t>(kept->size()) < limit && end != first) {
    std::pop_heap(first, end, HeapLess());
    Candidate next = *(end - 1);
    --end;
    const float original = next.score;
    const Box box =
        MakeBox(boxes + ((image * p.num_boxes + next.index) * p.q + (p.q > 1 ? cls : 0)) * 4);
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
      std::push_heap(first, end, HeapLess());
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
    return InvalidArgument(
        kOp, "scores",
        "[batch, num_boxes, num_classes] with the batch and num_boxes of boxes " +
            ShapeString(boxes),
        ShapeString(scores));
  }
  if (boxes[2] != 1 && boxes[2] != scores[2]) {
    return InvalidArgument(
        kOp, "boxes",
        "[batch, num_boxes, q, 4] with q = 1 or num_classes = " + std::to_string(scores[2]),
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
  // The outputs [batch, D, 4] must be shapes TensorFlow can build (TensorShape::AddDim
  // CHECK-fails otherwise): empty boxes [2^62, 0, 1, 4] have such a batch. D < 2^31.
  const int64_t rows = p.max_detections();
  if (rows > 0 && p.batch > std::numeric_limits<int64_t>::max() / (rows * 4)) {
    return InvalidArgument(kOp, "batch",
                           "small enough that the outputs [batch, " + std::to_string(rows) +
                               ", 4] have fewer than 2^63 elements",
                           p.batch);
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
  // No boxes or no classes: no candidates, every row zero. Returning here also skips the
  // per-class bookkeeping below, O(batch * classes) whatever the boxes, which for empty scores
  // such as [8, 0, 2^40] would allocate terabytes (or overflow batch * (classes + 1)).
  if (n == 0 || classes == 0) {
    std::fill(nmsed_boxes, nmsed_boxes + batch * detections * 4, T(0));
    std::fill(nmsed_scores, nmsed_scores + batch * detections, T(0));
    std::fill(nmsed_classes, nmsed_classes + batch * detections, 0.0f);
    std::fill(valid_detections, valid_detections + batch, 0);
    return;
  }
  // 1. Candidates, per image, in one array with a range per class: a count per class (a loop
  // the compiler vectorises), then per row a mask of the classes above the threshold (eight
  // compares per instruction) and a store per set bit.
  const float score_threshold = p.score_threshold;
  // Scratch (common/scratch.h): every slot of a list is written below before it is read, and a
  // list of 1 MB or more (YOLO-v3's 10647 boxes x 80 classes: ~3.4 MB an image at a low
  // threshold) comes back from the pool on the next call instead of as fresh pages the OS
  // zeroes: under XLA, whose thread runs outside TensorFlow's allocator pattern, 92% of the
  // op's page faults were these lists' first writes.
  std::vector<Scratch<uint64_t>> candidates(static_cast<size_t>(batch));
  std::vector<int64_t> offsets(static_cast<size_t>(batch * (classes + 1)));
  parallel.For(batch, static_cast<double>(n * classes), [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> mask(static_cast<size_t>((classes + 63) / 64));
    std::vector<int32_t> counts(static_cast<size_t>(classes));
    std::vector<int64_t> next(static_cast<size_t>(classes));
    for (int64_t image = begin; image < end; ++image) {
      const T* rows = scores + image * n * classes;
      std::fill(counts.begin(), counts.end(), 0);
      const T* row = rows;
      for (int64_t i = 0; i < n; ++i, row += classes) {
        for (int64_t c = 0; c < classes; ++c) {
          counts[static_cast<size_t>(c)] += static_cast<float>(row[c]) > score_threshold;
        }
      }
      int64_t* offset = offsets.data() + image * (classes + 1);
      offset[0] = 0;
      for (int64_t c = 0; c < classes; ++c) {
        offset[c + 1] = offset[c] + counts[static_cast<size_t>(c)];
        next[static_cast<size_t>(c)] = offset[c];
      }
      Scratch<uint64_t>& list = candidates[static_cast<size_t>(image)];
      list.resize(static_cast<size_t>(offset[classes]));
      if (list.empty()) continue;
      row = rows;
      for (int64_t i = 0; i < n; ++i, row += classes) {
        if (!RowMask(row, classes, score_threshold, mask.data())) continue;
        for (size_t w = 0; w < mask.size(); ++w) {
          for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
            const int64_t c = static_cast<int64_t>(w * 64) + __builtin_ctzll(bits);
            list[static_cast<size_t>(next[static_cast<size_t>(c)]++)] =
                Key(static_cast<float>(row[c]), static_cast<int32_t>(i));
          }
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
                   const int64_t image = task / classes, cls = task % classes;
                   const int64_t* offset = offsets.data() + image * (classes + 1);
                   uint64_t* first = candidates[static_cast<size_t>(image)].data() + offset[cls];
                   uint64_t* last = first + (offset[cls + 1] - offset[cls]);
                   if (first == last) continue;
                   std::vector<Kept>* out = &kept[static_cast<size_t>(task)];
                   if (soft) {
                     SoftNms(p, boxes, scores, image, cls, first, last, limit, out);
                     // A negative score rises as it decays, so a box kept later can outscore
                     // one kept before it: order the class by score for the merge (stable:
                     // ties stay in kept order).
                     auto higher = [](const Kept& a, const Kept& b) { return a.score > b.score; };
                     if (!std::is_sorted(out->begin(), out->end(), higher)) {
                       std::stable_sort(out->begin(), out->end(), higher);
                     }
                   } else {
                     HardNms(p, boxes, scores, image, cls, first, last, limit, out);
                   }
                 }
               });

  // 3. Merge per image: each class's kept boxes are in order of non-increasing score (in hard
  // NMS each was the top of its queue when kept; soft-NMS's are sorted above), so the first
  // `detections` of all come from a merge that takes, each time, the highest head (the lowest
  // class on ties).
  parallel.For(batch, 20.0 * static_cast<double>(detections * classes),
               [&](int64_t begin, int64_t end) {
                 std::vector<size_t> head(static_cast<size_t>(classes));
                 for (int64_t image = begin; image < end; ++image) {
                   const std::vector<Kept>* lists = kept.data() + image * classes;
                   std::fill(head.begin(), head.end(), size_t{0});
                   T* out_boxes = nmsed_boxes + image * detections * 4;
                   T* out_scores = nmsed_scores + image * detections;
                   float* out_classes = nmsed_classes + image * detections;
                   int64_t count = 0;
                   for (; count < detections; ++count) {
                     int64_t best = -1;
                     for (int64_t c = 0; c < classes; ++c) {
                       const size_t h = head[static_cast<size_t>(c)];
                       if (h == lists[c].size()) continue;
                       if (best < 0 ||
                           lists[c][h].score > lists[best][head[static_cast<size_t>(best)]].score) {
                         best = c;
                       }
                     }
                     if (best < 0) break;
                     const Kept& k = lists[best][head[static_cast<size_t>(best)]++];
                     for (int j = 0; j < 4; ++j) {
                       const float v = p.clip_boxes ? Clip(k.box.coords[j]) : k.box.coords[j];
                       out_boxes[count * 4 + j] = static_cast<T>(v);
                     }
                     out_scores[count] = static_cast<T>(k.score);
                     out_classes[count] = static_cast<float>(k.cls);
                   }
                   std::fill(out_boxes + count * 4, out_boxes + detections * 4, T(0));
                   std::fill(out_scores + count, out_scores + detections, T(0));
                   std::fill(out_classes + count, out_classes + detections, 0.0f);
                   valid_detections[image] = static_cast<int32_t>(count);
                 }
               });
}

#define OPFORGE_INSTANTIATE_NMS_(T, ...)                                                     \
  template void CombinedNms<T>(const CombinedNmsParams&, const T*, const T*, T*, T*, float*, \
                               int32_t*, const Parallel&);
OPFORGE_NMS_TYPES(OPFORGE_INSTANTIATE_NMS_)
#undef OPFORGE_INSTANTIATE_NMS_

}  // namespace opforge
