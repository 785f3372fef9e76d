// CUDA kernels of YoloDecode and its gradient: one thread per box (grid-stride), running the
// per-box maths of yolo_decode_math.h that the CPU kernels run, in the same order (compiled
// without FMA contraction). They differ from the CPU only where the device's exp and expf differ
// from the CPU's (glibc's, and Eigen's vectorised exp for the class sigmoids): a few ulps of the
// compute type. The class argmax is taken, as on the CPU, on the class scores rounded to the
// element type (the first maximum, or the first NaN).
#include <cstdint>
#include <string>
#include <vector>

#include "common/cuda_util.cuh"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_math.h"

namespace opforge {
namespace {

// The box's position in the grid: box = ((b * H + cy) * W + cx) * A + a. Index: int32_t when
// every index and offset fits (cuda::DispatchIndex; 32-bit division is several times cheaper),
// else int64_t. The maths sees the same integer values either way: the same bits.
template <typename Index>
struct Shape {
  Index boxes;  // B * H * W * A
  Index height, width, anchors, classes;
};

template <typename Index>
Shape<Index> ShapeOf(const YoloDecodeParams& p) {
  return {static_cast<Index>(p.batch * p.boxes_per_image()), static_cast<Index>(p.height),
          static_cast<Index>(p.width), static_cast<Index>(p.anchors),
          static_cast<Index>(p.num_classes)};
}

// The largest offset the kernels form: the features' elements (boxes * (5 + C), more than the
// boxes' 4 and the class scores' C per box).
int64_t LargestIndex(const YoloDecodeParams& p) {
  return p.batch * p.boxes_per_image() * (5 + p.num_classes);
}

template <typename T, typename Index>
__global__ void ForwardKernel(yolo::Geometry<typename cuda::Num<T>::C> g, Shape<Index> s,
                              const T* features, const T* anchors, T* boxes, T* scores,
                              int32_t* class_indices, T* class_scores) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const Index per_anchor = 5 + s.classes;
  for (Index box = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); box < s.boxes;
       box = cuda::GridNext(box, step, s.boxes)) {
    const Index a = box % s.anchors;
    const Index cell = box / s.anchors;
    const Index cx = cell % s.width;
    const Index cy = (cell / s.width) % s.height;
    const T* f = features + box * per_anchor;
    if (boxes != nullptr) {
      const C t[4] = {N::To(f[0]), N::To(f[1]), N::To(f[2]), N::To(f[3])};
      C out[4];
      yolo::DecodeBox(g, t, static_cast<C>(cx), static_cast<C>(cy), N::To(anchors[2 * a]),
                      N::To(anchors[2 * a + 1]), out);
      for (int k = 0; k < 4; ++k) boxes[box * 4 + k] = N::From(out[k]);
    }
    if (scores == nullptr && class_scores == nullptr) continue;
    const C obj = yolo::Sigmoid(N::To(f[4]));
    C best = C(0);
    int32_t best_index = 0;
    for (Index c = 0; c < s.classes; ++c) {
      const T v = N::From(obj * yolo::Sigmoid(N::To(f[5 + c])));
      if (class_scores != nullptr) class_scores[box * s.classes + c] = v;
      if (c == 0 || yolo::Beats(N::To(v), best)) {
        best = N::To(v);
        best_index = static_cast<int32_t>(c);
      }
    }
    if (scores != nullptr) {
      scores[box] = N::From(best);
      class_indices[box] = best_index;
    }
  }
}

// The CPU kernel keeps each class's sigmoid from the argmax pass; here it is recomputed in the
// second pass (the same function of the same value, so the same bits), which needs no storage
// per class. The objectness's gradient is summed in class order (the CPU's vectorised sum may
// group the terms otherwise: a few ulps of the sum's terms).
template <typename T, typename Index>
__global__ void BackwardKernel(yolo::Geometry<typename cuda::Num<T>::C> g, Shape<Index> s,
                               const T* grad_boxes, const T* grad_scores,
                               const T* grad_class_scores, const T* features, const T* anchors,
                               T* grad_features) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const Index per_anchor = 5 + s.classes;
  for (Index box = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); box < s.boxes;
       box = cuda::GridNext(box, step, s.boxes)) {
    const Index a = box % s.anchors;
    const Index cell = box / s.anchors;
    const Index cx = cell % s.width;
    const Index cy = (cell / s.width) % s.height;
    const T* f = features + box * per_anchor;
    T* df = grad_features + box * per_anchor;
    const C t[4] = {N::To(f[0]), N::To(f[1]), N::To(f[2]), N::To(f[3])};
    C gb[4] = {C(0), C(0), C(0), C(0)};
    if (grad_boxes != nullptr) {
      for (int k = 0; k < 4; ++k) gb[k] = N::To(grad_boxes[box * 4 + k]);
    }
    C dt[4];
    yolo::DecodeBoxGrad(g, t, static_cast<C>(cx), static_cast<C>(cy), N::To(anchors[2 * a]),
                        N::To(anchors[2 * a + 1]), gb, dt);
    for (int k = 0; k < 4; ++k) df[k] = N::From(dt[k]);

    // The winning class, as the forward chose it (on the rounded class scores), where the
    // score has a gradient.
    const C obj = yolo::Sigmoid(N::To(f[4]));
    Index best_index = -1;
    if (grad_scores != nullptr) {
      C best = C(0);
      for (Index c = 0; c < s.classes; ++c) {
        const C v = N::To(N::From(obj * yolo::Sigmoid(N::To(f[5 + c]))));
        if (c == 0 || yolo::Beats(v, best)) {
          best = v;
          best_index = c;
        }
      }
    }
    const C gs = grad_scores != nullptr ? N::To(grad_scores[box]) : C(0);
    C d_obj = C(0);
    for (Index c = 0; c < s.classes; ++c) {
      const C sc = yolo::Sigmoid(N::To(f[5 + c]));
      C gc = grad_class_scores != nullptr ? N::To(grad_class_scores[box * s.classes + c]) : C(0);
      if (c == best_index) gc = gc + gs;
      d_obj = d_obj + gc * sc;
      df[5 + c] = N::From(gc * obj * (sc * (C(1) - sc)));
    }
    df[4] = N::From(d_obj * (obj * (C(1) - obj)));
  }
}

// The anchors' bytes: 2 A elements.
int64_t AnchorBytes(DType dtype, const YoloDecodeParams& p) {
  return 2 * p.anchors * (dtype == DType::kDouble ? 8 : dtype == DType::kFloat ? 4 : 2);
}

// Enqueues the copy of the host anchors into `scratch` on `stream`; *device points at them
// there. The copy goes through a pageable buffer of ours: cudaMemcpyAsync from pageable
// memory returns once the bytes are staged, so neither that buffer nor the caller's tensor (which
// TensorFlow may have put in pinned memory, where the copy would still read it later) needs to
// outlive the call, and nothing waits for the device.
Status AnchorsToDevice(const char* op, DType dtype, const YoloDecodeParams& p, const void* anchors,
                       void* scratch, int64_t scratch_bytes, cudaStream_t stream,
                       const void** device) {
  const int64_t bytes = AnchorBytes(dtype, p);
  if (scratch == nullptr || scratch_bytes < bytes ||
      reinterpret_cast<uintptr_t>(scratch) % alignof(double) != 0) {
    return Status::Internal(std::string(op) + ": needs " + std::to_string(bytes) +
                            " bytes of scratch memory aligned to 8 for the anchors, got " +
                            std::to_string(scratch_bytes));
  }
  const auto* from = static_cast<const unsigned char*>(anchors);
  const std::vector<unsigned char> staged(from, from + bytes);
  const cudaError_t err = cudaMemcpyAsync(scratch, staged.data(), static_cast<size_t>(bytes),
                                          cudaMemcpyHostToDevice, stream);
  if (err != cudaSuccess) {
    return Status::Internal(
        std::string(op) + ": copying the anchors to the device failed: " + cudaGetErrorString(err));
  }
  *device = scratch;
  return Status::Ok();
}

template <typename T>
Status Forward(DType dtype, const YoloDecodeParams& p, const void* features, const void* anchors,
               void* boxes, void* scores, int32_t* class_indices, void* class_scores,
               cudaStream_t stream) {
  using C = typename cuda::Num<T>::C;
  if (boxes == nullptr && scores == nullptr && class_scores == nullptr) return Status::Ok();
  return cuda::DispatchIndex(LargestIndex(p), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    const Shape<Index> s = ShapeOf<Index>(p);
    OPFORGE_LAUNCH(cuda::Blocks(s.boxes), cuda::kThreads, 0, stream, ForwardKernel<T, Index>)
    (yolo::MakeGeometry<C>(p, dtype), s, static_cast<const T*>(features),
     static_cast<const T*>(anchors), static_cast<T*>(boxes), static_cast<T*>(scores), class_indices,
     static_cast<T*>(class_scores));
    return cuda::LaunchStatus("YoloDecode");
  });
}

template <typename T>
Status Backward(DType dtype, const YoloDecodeParams& p, const void* grad_boxes,
                const void* grad_scores, const void* grad_class_scores, const void* features,
                const void* anchors, void* grad_features, cudaStream_t stream) {
  using C = typename cuda::Num<T>::C;
  return cuda::DispatchIndex(LargestIndex(p), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    const Shape<Index> s = ShapeOf<Index>(p);
    OPFORGE_LAUNCH(cuda::Blocks(s.boxes), cuda::kThreads, 0, stream, BackwardKernel<T, Index>)
    (yolo::MakeGeometry<C>(p, dtype), s, static_cast<const T*>(grad_boxes),
     static_cast<const T*>(grad_scores), static_cast<const T*>(grad_class_scores),
     static_cast<const T*>(features), static_cast<const T*>(anchors),
     static_cast<T*>(grad_features));
    return cuda::LaunchStatus("YoloDecodeGrad");
  });
}

}  // namespace

int64_t YoloDecodeGpuScratchBytes(DType dtype, const YoloDecodeParams& params) {
  return AnchorBytes(dtype, params);
}

Status YoloDecodeForwardGpu(DType dtype, const YoloDecodeParams& params, const void* features,
                            const void* anchors, void* boxes, void* scores, int32_t* class_indices,
                            void* class_scores, void* scratch, int64_t scratch_bytes,
                            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (params.batch * params.boxes_per_image() == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "YoloDecode", [&](auto tag) -> Status {
    const void* device_anchors = nullptr;
    OPFORGE_RETURN_IF_ERROR(AnchorsToDevice("YoloDecode", dtype, params, anchors, scratch,
                                            scratch_bytes, s, &device_anchors));
    return Forward<typename decltype(tag)::type>(dtype, params, features, device_anchors, boxes,
                                                 scores, class_indices, class_scores, s);
  });
}

Status YoloDecodeBackwardGpu(DType dtype, const YoloDecodeParams& params, const void* grad_boxes,
                             const void* grad_scores, const void* grad_class_scores,
                             const void* features, const void* anchors, void* grad_features,
                             void* scratch, int64_t scratch_bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (params.batch * params.boxes_per_image() == 0) return Status::Ok();
  return cuda::DispatchDType<false>(dtype, "YoloDecodeGrad", [&](auto tag) -> Status {
    const void* device_anchors = nullptr;
    OPFORGE_RETURN_IF_ERROR(AnchorsToDevice("YoloDecodeGrad", dtype, params, anchors, scratch,
                                            scratch_bytes, s, &device_anchors));
    return Backward<typename decltype(tag)::type>(dtype, params, grad_boxes, grad_scores,
                                                  grad_class_scores, features, device_anchors,
                                                  grad_features, s);
  });
}

}  // namespace opforge
