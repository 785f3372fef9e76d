// CUDA kernels of YoloDecode and its gradient: one thread per box (grid-stride), running the
// per-box maths of yolo_decode_math.h that the CPU kernels run, in the same order (compiled
// without FMA contraction). They differ from the CPU only where the device's exp and expf differ
// from the CPU's (glibc's, and Eigen's vectorised exp for the class sigmoids): a few ulps of the
// compute type. The class argmax is taken, as on the CPU, on the class scores rounded to the
// element type (the first maximum, or the first NaN).
#include "common/cuda_util.cuh"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_math.h"

namespace opforge {
namespace {

// The box's position in the grid: box = ((b * H + cy) * W + cx) * A + a.
struct Shape {
  int64_t boxes;  // B * H * W * A
  int64_t height, width, anchors, classes;
};

Shape ShapeOf(const YoloDecodeParams& p) {
  return {p.batch * p.boxes_per_image(), p.height, p.width, p.anchors, p.num_classes};
}

template <typename T>
__global__ void ForwardKernel(yolo::Geometry<typename cuda::Num<T>::C> g, Shape s,
                              const T* features, const T* anchors, T* boxes, T* scores,
                              int32_t* class_indices, T* class_scores) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const int64_t per_anchor = 5 + s.classes;
  for (int64_t box = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; box < s.boxes;
       box += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t a = box % s.anchors;
    const int64_t cx = (box / s.anchors) % s.width;
    const int64_t cy = (box / (s.anchors * s.width)) % s.height;
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
    for (int64_t c = 0; c < s.classes; ++c) {
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
template <typename T>
__global__ void BackwardKernel(yolo::Geometry<typename cuda::Num<T>::C> g, Shape s,
                               const T* grad_boxes, const T* grad_scores,
                               const T* grad_class_scores, const T* features, const T* anchors,
                               T* grad_features) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const int64_t per_anchor = 5 + s.classes;
  for (int64_t box = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; box < s.boxes;
       box += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t a = box % s.anchors;
    const T* f = features + box * per_anchor;
    T* df = grad_features + box * per_anchor;
    const C t[4] = {N::To(f[0]), N::To(f[1]), N::To(f[2]), N::To(f[3])};
    C gb[4] = {C(0), C(0), C(0), C(0)};
    if (grad_boxes != nullptr) {
      for (int k = 0; k < 4; ++k) gb[k] = N::To(grad_boxes[box * 4 + k]);
    }
    C dt[4];
    yolo::DecodeBoxGrad(g, t, N::To(anchors[2 * a]), N::To(anchors[2 * a + 1]), gb, dt);
    for (int k = 0; k < 4; ++k) df[k] = N::From(dt[k]);

    // The winning class, as the forward chose it (on the rounded class scores), where the
    // score has a gradient.
    const C obj = yolo::Sigmoid(N::To(f[4]));
    int64_t best_index = -1;
    if (grad_scores != nullptr) {
      C best = C(0);
      for (int64_t c = 0; c < s.classes; ++c) {
        const C v = N::To(N::From(obj * yolo::Sigmoid(N::To(f[5 + c]))));
        if (c == 0 || yolo::Beats(v, best)) {
          best = v;
          best_index = c;
        }
      }
    }
    const C gs = grad_scores != nullptr ? N::To(grad_scores[box]) : C(0);
    C d_obj = C(0);
    for (int64_t c = 0; c < s.classes; ++c) {
      const C sc = yolo::Sigmoid(N::To(f[5 + c]));
      C gc = grad_class_scores != nullptr ? N::To(grad_class_scores[box * s.classes + c]) : C(0);
      if (c == best_index) gc = gc + gs;
      d_obj = d_obj + gc * sc;
      df[5 + c] = N::From(gc * obj * (sc * (C(1) - sc)));
    }
    df[4] = N::From(d_obj * (obj * (C(1) - obj)));
  }
}

template <typename T>
Status Forward(const YoloDecodeParams& p, const void* features, const void* anchors, void* boxes,
               void* scores, int32_t* class_indices, void* class_scores, cudaStream_t stream) {
  using C = typename cuda::Num<T>::C;
  if (boxes == nullptr && scores == nullptr && class_scores == nullptr) return Status::Ok();
  const Shape s = ShapeOf(p);
  ForwardKernel<T><<<cuda::Blocks(s.boxes), cuda::kThreads, 0, stream>>>(
      yolo::MakeGeometry<C>(p), s, static_cast<const T*>(features), static_cast<const T*>(anchors),
      static_cast<T*>(boxes), static_cast<T*>(scores), class_indices,
      static_cast<T*>(class_scores));
  return cuda::LaunchStatus("YoloDecode");
}

template <typename T>
Status Backward(const YoloDecodeParams& p, const void* grad_boxes, const void* grad_scores,
                const void* grad_class_scores, const void* features, const void* anchors,
                void* grad_features, cudaStream_t stream) {
  using C = typename cuda::Num<T>::C;
  const Shape s = ShapeOf(p);
  BackwardKernel<T><<<cuda::Blocks(s.boxes), cuda::kThreads, 0, stream>>>(
      yolo::MakeGeometry<C>(p), s, static_cast<const T*>(grad_boxes),
      static_cast<const T*>(grad_scores), static_cast<const T*>(grad_class_scores),
      static_cast<const T*>(features), static_cast<const T*>(anchors),
      static_cast<T*>(grad_features));
  return cuda::LaunchStatus("YoloDecodeGrad");
}

}  // namespace

Status YoloDecodeForwardGpu(DType dtype, const YoloDecodeParams& params, const void* features,
                            const void* anchors, void* boxes, void* scores, int32_t* class_indices,
                            void* class_scores, void* stream) {
  if (params.batch * params.boxes_per_image() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "YoloDecode", [&](auto tag) {
    return Forward<typename decltype(tag)::type>(params, features, anchors, boxes, scores,
                                                 class_indices, class_scores, s);
  });
}

Status YoloDecodeBackwardGpu(DType dtype, const YoloDecodeParams& params, const void* grad_boxes,
                             const void* grad_scores, const void* grad_class_scores,
                             const void* features, const void* anchors, void* grad_features,
                             void* stream) {
  if (params.batch * params.boxes_per_image() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "YoloDecodeGrad", [&](auto tag) {
    return Backward<typename decltype(tag)::type>(
        params, grad_boxes, grad_scores, grad_class_scores, features, anchors, grad_features, s);
  });
}

}  // namespace opforge
