// CUDA kernels of ResizeBilinear and its gradient, with the CPU kernel's exact arithmetic
// (compiled without FMA contraction, so the bits match the CPU's).
//
// The gradient is a gather: one thread per element of the image gradient sums, in the order of
// TensorFlow's sequential scatter, the incoming gradients whose taps reach it. There are no
// atomics, so it is deterministic whatever tf.config.experimental.enable_op_determinism() says,
// and it equals the CPU kernel bit for bit.
#include "common/cuda_util.cuh"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

// Index: int32_t when every index and offset fits (cuda::DispatchIndex), else int64_t. The taps
// (resize_taps.h, shared with the CPU) stay in int64_t: they are products and compares, no
// division; their float maths sees the same integer values either way, so the bits do not
// depend on Index.
template <typename Index>
struct Geometry {
  Index batch, in_h, in_w, channels, out_h, out_w;
  float height_scale, width_scale;
  bool half_pixel;
};

// The (b, y, x, c) of flat index i of an NHWC tensor of height h, width w and c channels.
template <typename Index>
struct Nhwc {
  Index b, y, x, c;
};
template <typename Index>
__device__ inline Nhwc<Index> Unflatten(Index i, Index h, Index w, Index channels) {
  Nhwc<Index> p;
  p.c = i % channels;
  Index t = i / channels;
  p.x = t % w;
  t /= w;
  p.y = t % h;
  p.b = t / h;
  return p;
}

template <typename T, typename Index>
__global__ void ConvertKernel(Index n, const T* in, float* out) {
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < n;
       i = cuda::GridNext(i, step, n)) {
    out[i] = cuda::ToFloat(in[i]);
  }
}

template <typename T, typename Index>
__global__ void ForwardKernel(Geometry<Index> g, Index n, const T* in, float* out) {
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < n;
       i = cuda::GridNext(i, step, n)) {
    const auto [b, y, x, c] = Unflatten(i, g.out_h, g.out_w, g.channels);
    const ResizeTap ty = ComputeResizeTap(y, g.height_scale, g.in_h, g.half_pixel);
    const ResizeTap tx = ComputeResizeTap(x, g.width_scale, g.in_w, g.half_pixel);
    const Index x_lower = static_cast<Index>(tx.lower) * g.channels;
    const Index x_upper = static_cast<Index>(tx.upper) * g.channels;
    const T* top_row = in + ((b * g.in_h + static_cast<Index>(ty.lower)) * g.in_w) * g.channels + c;
    const T* bottom_row =
        in + ((b * g.in_h + static_cast<Index>(ty.upper)) * g.in_w) * g.channels + c;
    const float tl = cuda::ToFloat(top_row[x_lower]);
    const float tr = cuda::ToFloat(top_row[x_upper]);
    const float bl = cuda::ToFloat(bottom_row[x_lower]);
    const float br = cuda::ToFloat(bottom_row[x_upper]);
    const float top = tl + (tr - tl) * tx.lerp;
    const float bottom = bl + (br - bl) * tx.lerp;
    out[i] = top + (bottom - top) * ty.lerp;
  }
}

// The first output index whose taps can reach input index r: taps are non-decreasing in the
// output index and upper - lower <= 1, so every earlier index has upper < r. Starts from an
// estimate and walks back while the previous index still reaches r (float rounding of huge
// coordinates can make the estimate late).
__device__ inline int64_t FirstReaching(int64_t r, float scale, int64_t in_size, int64_t out_size,
                                        bool half_pixel) {
  const double offset = half_pixel ? 0.5 : 0.0;
  double estimate = (static_cast<double>(r - 1) + offset) / scale - offset - 1.0;
  int64_t i = estimate <= 0.0 ? 0 : static_cast<int64_t>(estimate);
  if (i > out_size - 1) i = out_size - 1;
  while (i > 0 && ComputeResizeTap(i - 1, scale, in_size, half_pixel).upper >= r) --i;
  return i;
}

template <typename T, typename Index>
__global__ void BackwardKernel(Geometry<Index> g, Index n, const float* grads, T* out) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < n;
       i = cuda::GridNext(i, step, n)) {
    const auto [b, r, q, c] = Unflatten(i, g.in_h, g.in_w, g.channels);
    const Index x_first =
        static_cast<Index>(FirstReaching(q, g.width_scale, g.in_w, g.out_w, g.half_pixel));
    A acc = A(0);
    for (Index y =
             static_cast<Index>(FirstReaching(r, g.height_scale, g.in_h, g.out_h, g.half_pixel));
         y < g.out_h; ++y) {
      const ResizeTap ty = ComputeResizeTap(y, g.height_scale, g.in_h, g.half_pixel);
      if (ty.lower > r) break;
      const bool as_top = ty.lower == r;
      const bool as_bottom = ty.upper == r;
      if (!as_top && !as_bottom) continue;
      const float inv_y = 1.0f - ty.lerp;
      const float* grad_row = grads + ((b * g.out_h + y) * g.out_w) * g.channels + c;
      for (Index x = x_first; x < g.out_w; ++x) {
        const ResizeTap tx = ComputeResizeTap(x, g.width_scale, g.in_w, g.half_pixel);
        if (tx.lower > q) break;
        const bool as_left = tx.lower == q;
        const bool as_right = tx.upper == q;
        if (!as_left && !as_right) continue;
        const float gv = grad_row[x * g.channels];
        const float inv_x = 1.0f - tx.lerp;
        // The scatter's order: top-left, top-right, bottom-left, bottom-right.
        if (as_top && as_left) acc += static_cast<A>(gv * inv_y * inv_x);
        if (as_top && as_right) acc += static_cast<A>(gv * inv_y * tx.lerp);
        if (as_bottom && as_left) acc += static_cast<A>(gv * ty.lerp * inv_x);
        if (as_bottom && as_right) acc += static_cast<A>(gv * ty.lerp * tx.lerp);
      }
    }
    out[i] = cuda::Num<T>::From(acc);
  }
}

template <typename Index>
Geometry<Index> GeometryOf(const ResizeBilinearParams& p) {
  return {static_cast<Index>(p.batch),
          static_cast<Index>(p.in_height),
          static_cast<Index>(p.in_width),
          static_cast<Index>(p.channels),
          static_cast<Index>(p.out_height),
          static_cast<Index>(p.out_width),
          ResizeScale(p.in_height, p.out_height, p.align_corners),
          ResizeScale(p.in_width, p.out_width, p.align_corners),
          p.half_pixel_centers};
}

// The largest index or offset the kernels form: the elements of the image and of the resized
// image (the spatial sizes and channels are factors of those; taps stay inside the image).
int64_t LargestIndex(const ResizeBilinearParams& p) {
  const int64_t image = p.batch * p.in_height * p.in_width * p.channels;
  const int64_t resized = p.batch * p.out_height * p.out_width * p.channels;
  return std::max(image, resized);
}

template <typename T>
Status Forward(const ResizeBilinearParams& p, const void* images, float* output, cudaStream_t s) {
  const T* in = static_cast<const T*>(images);
  const int64_t n = p.batch * p.out_height * p.out_width * p.channels;
  return cuda::DispatchIndex(LargestIndex(p), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    if (p.out_height == p.in_height && p.out_width == p.in_width) {
      // Same size: the input converted to float, as on the CPU.
      OPFORGE_LAUNCH(cuda::Blocks(n), cuda::kThreads, 0, s, ConvertKernel<T, Index>)
      (static_cast<Index>(n), in, output);
    } else {
      OPFORGE_LAUNCH(cuda::Blocks(n), cuda::kThreads, 0, s, ForwardKernel<T, Index>)
      (GeometryOf<Index>(p), static_cast<Index>(n), in, output);
    }
    return cuda::LaunchStatus("ResizeBilinear");
  });
}

template <typename T>
Status Backward(const ResizeBilinearParams& p, const float* grads, void* output, cudaStream_t s) {
  const int64_t n = p.batch * p.in_height * p.in_width * p.channels;
  return cuda::DispatchIndex(LargestIndex(p), [&](auto tag) {
    using Index = typename decltype(tag)::type;
    OPFORGE_LAUNCH(cuda::Blocks(n), cuda::kThreads, 0, s, BackwardKernel<T, Index>)
    (GeometryOf<Index>(p), static_cast<Index>(n), grads, static_cast<T*>(output));
    return cuda::LaunchStatus("ResizeBilinearGrad");
  });
}

}  // namespace

Status ResizeBilinearForwardGpu(DType dtype, const ResizeBilinearParams& params, const void* images,
                                float* output, void* stream) {
  if (params.batch * params.out_height * params.out_width * params.channels == 0) {
    return Status::Ok();
  }
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::kInt8:
      return Forward<int8_t>(params, images, output, s);
    case DType::kUInt8:
      return Forward<uint8_t>(params, images, output, s);
    case DType::kInt16:
      return Forward<int16_t>(params, images, output, s);
    case DType::kUInt16:
      return Forward<uint16_t>(params, images, output, s);
    default:
      return cuda::DispatchDType<true>(dtype, "ResizeBilinear", [&](auto tag) {
        return Forward<typename decltype(tag)::type>(params, images, output, s);
      });
  }
}

Status ResizeBilinearBackwardGpu(DType dtype, const ResizeBilinearParams& params,
                                 const float* grads, void* output, void* stream) {
  if (params.batch * params.in_height * params.in_width * params.channels == 0) {
    return Status::Ok();
  }
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "ResizeBilinearGrad", [&](auto tag) {
    return Backward<typename decltype(tag)::type>(params, grads, output, s);
  });
}

}  // namespace opforge
