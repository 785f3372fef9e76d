// CUDA version of YoloTargets: the CPU's per-row maths (yolo_targets_math.h) in three steps on
// the stream.
//
// 1. Check (when max_boxes > 0, as the binding's CPU path checks): one thread per row
//    classifies it, records the smallest bad flat row index with atomicMin and stores the row's
//    best anchor (-1 for padding and bad rows). The host then reads back that index and the
//    anchors, waits for the stream, and reports the first bad anchor or row with the CPU's own
//    message (CheckYoloAnchors, YoloTargetsRowError): the same error on both devices.
// 2. Every output is zeroed (cudaMemsetAsync).
// 3. Assign, one kernel per scale, one thread per row: a row whose best anchor is in the
//    scale's mask writes its six values only if no later row of its image has the same best
//    anchor (so the same slot) and the same cell. Each (cell, slot) is thus written by exactly
//    the row the CPU's sequential loop leaves there, the last one: no atomics, deterministic,
//    and the CPU's bits. The scan is O(max_boxes) per row, fine for the ~100 boxes of a batch.
//
// The masks (a host vector in params) are copied to the device into the scratch memory the
// caller provides (YoloTargetsGpuScratchBytes; the binding takes it from TensorFlow's allocator),
// so there is no limit on the number of scales or mask entries.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/cuda_util.cuh"
#include "ops/yolo_targets/yolo_targets.h"
#include "ops/yolo_targets/yolo_targets_math.h"

namespace opforge {
namespace {

constexpr char kOp[] = "YoloTargets";
constexpr long long kNoBadRow = std::numeric_limits<long long>::max();

Status CudaFailure(const char* what, cudaError_t err) {
  return Status::Internal(std::string(kOp) + ": " + what + " failed: " + cudaGetErrorString(err));
}

#define OPFORGE_YOLO_CUDA_(expr)                                            \
  do {                                                                      \
    const cudaError_t opforge_err = (expr);                                 \
    if (opforge_err != cudaSuccess) return CudaFailure(#expr, opforge_err); \
  } while (0)

template <typename T>
__device__ inline void LoadRow(const T* boxes, int64_t r, T b[4]) {
  for (int k = 0; k < 4; ++k) b[k] = boxes[4 * r + k];
}

// best[r]: the best anchor of row r, or -1 when it is padding or bad; *first_bad: the smallest
// bad row.
template <typename T>
__global__ void CheckKernel(int64_t rows, int64_t num_classes, int64_t num_anchors, const T* boxes,
                            const int32_t* classes, const T* anchors, long long* first_bad,
                            int64_t* best) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T b[4];
    LoadRow(boxes, r, b);
    const int kind = yolo_targets::ClassifyRow(b, classes[r], num_classes);
    if (kind == yolo_targets::kRowBad) atomicMin(first_bad, static_cast<long long>(r));
    best[r] = kind == yolo_targets::kRowOk ? yolo_targets::BestAnchor(b, anchors, num_anchors)
                                           : int64_t{-1};
  }
}

// One scale: its mask (count entries, device memory), grid and output.
template <typename T>
struct ScaleArgs {
  const int64_t* mask;
  int64_t count, gh, gw;
  T* out;
};

template <typename T>
__global__ void AssignKernel(int64_t rows, int64_t max_boxes, ScaleArgs<T> sc, const T* boxes,
                             const int32_t* classes, const int64_t* best) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = best[r];
    if (k < 0) continue;
    int64_t slot = -1;
    for (int64_t j = 0; j < sc.count && slot < 0; ++j) {
      if (sc.mask[j] == k) slot = j;
    }
    if (slot < 0) continue;
    T b[4];
    LoadRow(boxes, r, b);
    const int64_t cx = yolo_targets::Cell(b[0], b[2], sc.gw);
    const int64_t cy = yolo_targets::Cell(b[1], b[3], sc.gh);
    // A later row of the same image with the same best anchor lands in the same slot; in the
    // same cell it overwrites this row on the CPU, so it writes instead.
    const int64_t image = r / max_boxes;
    const int64_t image_end = (image + 1) * max_boxes;
    bool overwritten = false;
    for (int64_t later = r + 1; later < image_end && !overwritten; ++later) {
      if (best[later] != k) continue;
      T l[4];
      LoadRow(boxes, later, l);
      overwritten = yolo_targets::Cell(l[0], l[2], sc.gw) == cx &&
                    yolo_targets::Cell(l[1], l[3], sc.gh) == cy;
    }
    if (overwritten) continue;
    T* out = sc.out + (((image * sc.gh + cy) * sc.gw + cx) * sc.count + slot) * 6;
    for (int k4 = 0; k4 < 4; ++k4) out[k4] = b[k4];
    out[4] = T(1);
    out[5] = static_cast<T>(classes[r]);
  }
}

// Scratch, in int64: [0] the first bad row, [1, 1 + masks) anchor_masks, then best[rows]; none
// without rows.
int64_t ScratchElements(const YoloTargetsParams& p) {
  const int64_t rows = p.batch * p.max_boxes;
  return rows > 0 ? 1 + static_cast<int64_t>(p.anchor_masks.size()) + rows : 0;
}

template <typename T>
Status Run(const YoloTargetsParams& p, const T* boxes, const int32_t* classes, const T* anchors,
           const std::vector<void*>& outputs, void* scratch, int64_t scratch_bytes,
           cudaStream_t stream) {
  if (static_cast<int64_t>(outputs.size()) != p.num_scales()) {
    return Status::Internal(std::string(kOp) + ": " + std::to_string(outputs.size()) +
                            " outputs for " + std::to_string(p.num_scales()) + " scales");
  }
  const int64_t rows = p.batch * p.max_boxes;
  const int64_t masks = static_cast<int64_t>(p.anchor_masks.size());
  const int64_t need = ScratchElements(p) * static_cast<int64_t>(sizeof(int64_t));
  if (need > 0 && (scratch == nullptr || scratch_bytes < need ||
                   reinterpret_cast<uintptr_t>(scratch) % alignof(int64_t) != 0)) {
    return Status::Internal(std::string(kOp) + ": needs " + std::to_string(need) +
                            " bytes of scratch memory aligned to 8, got " +
                            std::to_string(scratch_bytes));
  }
  int64_t* first_bad = nullptr;
  const int64_t* mask_table = nullptr;
  int64_t* best = nullptr;

  // 1. The check.
  if (p.max_boxes > 0) {
    long long bad_row = kNoBadRow;
    if (rows > 0) {
      first_bad = static_cast<int64_t*>(scratch);
      mask_table = first_bad + 1;
      best = first_bad + 1 + masks;
      std::vector<int64_t> init;
      init.reserve(static_cast<size_t>(1 + masks));
      init.push_back(kNoBadRow);
      init.insert(init.end(), p.anchor_masks.begin(), p.anchor_masks.end());
      // From pageable memory: returns once `init` is staged, so it may go out of scope.
      OPFORGE_YOLO_CUDA_(cudaMemcpyAsync(first_bad, init.data(), init.size() * sizeof(int64_t),
                                         cudaMemcpyHostToDevice, stream));
      OPFORGE_LAUNCH(cuda::Blocks(rows), cuda::kThreads, 0, stream, CheckKernel<T>)
      (rows, p.num_classes, p.num_anchors, boxes, classes, anchors,
       reinterpret_cast<long long*>(first_bad), best);
      OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
      OPFORGE_YOLO_CUDA_(
          cudaMemcpyAsync(&bad_row, first_bad, sizeof(bad_row), cudaMemcpyDeviceToHost, stream));
    }
    std::vector<T> host_anchors(static_cast<size_t>(2 * p.num_anchors));
    OPFORGE_YOLO_CUDA_(cudaMemcpyAsync(host_anchors.data(), anchors,
                                       host_anchors.size() * sizeof(T), cudaMemcpyDeviceToHost,
                                       stream));
    OPFORGE_YOLO_CUDA_(cudaStreamSynchronize(stream));
    OPFORGE_RETURN_IF_ERROR(CheckYoloAnchors(kOp, "anchors", host_anchors.data(), p.num_anchors));
    if (bad_row != kNoBadRow) {
      T b[4];
      int32_t cls = 0;
      OPFORGE_YOLO_CUDA_(
          cudaMemcpyAsync(b, boxes + 4 * bad_row, sizeof(b), cudaMemcpyDeviceToHost, stream));
      OPFORGE_YOLO_CUDA_(
          cudaMemcpyAsync(&cls, classes + bad_row, sizeof(cls), cudaMemcpyDeviceToHost, stream));
      OPFORGE_YOLO_CUDA_(cudaStreamSynchronize(stream));
      const double v[4] = {double(b[0]), double(b[1]), double(b[2]), double(b[3])};
      return YoloTargetsRowError(p, bad_row / p.max_boxes, bad_row % p.max_boxes, v, cls);
    }
  }
  if (p.batch == 0) return Status::Ok();

  // 2. Zeros everywhere.
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    const std::vector<int64_t> shape = p.output_shape(s);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    void* out = outputs[static_cast<size_t>(s)];
    if (out == nullptr || n == 0) continue;
    OPFORGE_YOLO_CUDA_(cudaMemsetAsync(out, 0, static_cast<size_t>(n) * sizeof(T), stream));
  }
  if (rows == 0) return Status::Ok();

  // 3. The assignment, scale by scale.
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    const std::vector<int64_t> shape = p.output_shape(s);
    ScaleArgs<T> sc;
    sc.mask = mask_table + p.mask_offset(s);
    sc.count = shape[3];
    sc.gh = shape[1];
    sc.gw = shape[2];
    sc.out = static_cast<T*>(outputs[static_cast<size_t>(s)]);
    OPFORGE_LAUNCH(cuda::Blocks(rows), cuda::kThreads, 0, stream, AssignKernel<T>)
    (rows, p.max_boxes, sc, boxes, classes, best);
    OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
  }
  return Status::Ok();
}

#undef OPFORGE_YOLO_CUDA_

}  // namespace

int64_t YoloTargetsGpuScratchBytes(const YoloTargetsParams& params) {
  return ScratchElements(params) * static_cast<int64_t>(sizeof(int64_t));
}

Status YoloTargetsGpu(DType dtype, const YoloTargetsParams& params, const void* boxes,
                      const int32_t* classes, const void* anchors,
                      const std::vector<void*>& outputs, void* scratch, int64_t scratch_bytes,
                      void* stream) {
  return cuda::DispatchFloatDouble(dtype, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Run<T>(params, static_cast<const T*>(boxes), classes, static_cast<const T*>(anchors),
                  outputs, scratch, scratch_bytes, static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge
