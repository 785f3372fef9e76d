// CUDA kernels of Conv2DTranspose and its two gradients: direct kernels, one thread per result
// element for the forward pass and the input gradient (gathering its sum in a fixed order), one
// block per filter element for the filter gradient (a strided sum per thread, then a fixed
// shared-memory tree). No atomics, so results are deterministic run to run. half and bfloat16
// accumulate in float, as on the CPU; sums run in another order than the CPU's GEMM, so the two
// agree to rounding, not bit for bit.
#include "common/cuda_util.cuh"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace {

// The kernels' view of the params (passed by value; no host pointers).
struct Geometry {
  int64_t n, ih, iw, ci, oh, ow, co, fh, fw;
  int64_t sh, sw, dh, dw, pt, pl;
  bool nchw;
};

Geometry MakeGeometry(const Conv2DTransposeParams& p) {
  return Geometry{p.batch,      p.in_h,     p.in_w,     p.in_c,     p.out_h,    p.out_w,
                  p.out_c,      p.filter_h, p.filter_w, p.stride_h, p.stride_w, p.dilation_h,
                  p.dilation_w, p.pad_top,  p.pad_left, p.nchw};
}

// Offset of (b, y, x, c) in a [n, h, w, c] image tensor of the data format.
__device__ inline int64_t Offset(bool nchw, int64_t b, int64_t y, int64_t x, int64_t c, int64_t h,
                                 int64_t w, int64_t ch) {
  return nchw ? ((b * ch + c) * h + y) * w + x : ((b * h + y) * w + x) * ch + c;
}

// Splits a linear index in the data format's order into (b, y, x, c).
__device__ inline void Split(bool nchw, int64_t i, int64_t h, int64_t w, int64_t ch, int64_t* b,
                             int64_t* y, int64_t* x, int64_t* c) {
  if (nchw) {
    *x = i % w;
    i /= w;
    *y = i % h;
    i /= h;
    *c = i % ch;
    *b = i / ch;
  } else {
    *c = i % ch;
    i /= ch;
    *x = i % w;
    i /= w;
    *y = i % h;
    *b = i / h;
  }
}

// The input position that output position o receives from tap f, or -1.
__device__ inline int64_t Source(int64_t o, int64_t f, int64_t stride, int64_t pad,
                                 int64_t dilation, int64_t size) {
  const int64_t t = o + pad - f * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < size ? i : -1;
}

template <typename T>
__global__ void ForwardKernel(Geometry g, const T* in, const T* filter, T* out) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const int64_t total = g.n * g.oh * g.ow * g.co;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t b, h, w, co;
    Split(g.nchw, i, g.oh, g.ow, g.co, &b, &h, &w, &co);
    C acc = 0;
    for (int64_t fh = g.fh - 1; fh >= 0; --fh) {
      const int64_t ih = Source(h, fh, g.sh, g.pt, g.dh, g.ih);
      if (ih < 0) continue;
      for (int64_t fw = g.fw - 1; fw >= 0; --fw) {
        const int64_t iw = Source(w, fw, g.sw, g.pl, g.dw, g.iw);
        if (iw < 0) continue;
        const T* f = filter + ((fh * g.fw + fw) * g.co + co) * g.ci;
        for (int64_t ci = 0; ci < g.ci; ++ci) {
          acc += N::To(in[Offset(g.nchw, b, ih, iw, ci, g.ih, g.iw, g.ci)]) * N::To(f[ci]);
        }
      }
    }
    out[i] = N::From(acc);
  }
}

template <typename T>
__global__ void InputGradKernel(Geometry g, const T* grad, const T* filter, T* grad_in) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  const int64_t total = g.n * g.ih * g.iw * g.ci;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t b, ih, iw, ci;
    Split(g.nchw, i, g.ih, g.iw, g.ci, &b, &ih, &iw, &ci);
    C acc = 0;
    for (int64_t fh = 0; fh < g.fh; ++fh) {
      const int64_t h = ih * g.sh - g.pt + fh * g.dh;
      if (h < 0 || h >= g.oh) continue;
      for (int64_t fw = 0; fw < g.fw; ++fw) {
        const int64_t w = iw * g.sw - g.pl + fw * g.dw;
        if (w < 0 || w >= g.ow) continue;
        const T* f = filter + (fh * g.fw + fw) * g.co * g.ci + ci;
        for (int64_t co = 0; co < g.co; ++co) {
          acc += N::To(grad[Offset(g.nchw, b, h, w, co, g.oh, g.ow, g.co)]) * N::To(f[co * g.ci]);
        }
      }
    }
    grad_in[i] = N::From(acc);
  }
}

constexpr int kReduceThreads = 256;

// One block per filter element (fh, fw, co, ci): threads stride over the input pixels, then a
// shared-memory tree sums the partial sums in a fixed order.
template <typename T>
__global__ void FilterGradKernel(Geometry g, const T* in, const T* grad, T* grad_filter) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  __shared__ C partial[kReduceThreads];
  const int64_t total = g.fh * g.fw * g.co * g.ci;
  const int64_t pixels = g.n * g.ih * g.iw;
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    const int64_t ci = e % g.ci;
    const int64_t co = (e / g.ci) % g.co;
    const int64_t tap = e / (g.ci * g.co);
    const int64_t fh = tap / g.fw, fw = tap % g.fw;
    C acc = 0;
    for (int64_t q = threadIdx.x; q < pixels; q += blockDim.x) {
      const int64_t iw = q % g.iw, ih = (q / g.iw) % g.ih, b = q / (g.iw * g.ih);
      const int64_t h = ih * g.sh - g.pt + fh * g.dh;
      const int64_t w = iw * g.sw - g.pl + fw * g.dw;
      if (h < 0 || h >= g.oh || w < 0 || w >= g.ow) continue;
      acc += N::To(grad[Offset(g.nchw, b, h, w, co, g.oh, g.ow, g.co)]) *
             N::To(in[Offset(g.nchw, b, ih, iw, ci, g.ih, g.iw, g.ci)]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kReduceThreads / 2; s > 0; s /= 2) {
      if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) grad_filter[e] = N::From(partial[0]);
    __syncthreads();  // partial is reused by the next element
  }
}

unsigned ReduceBlocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(n, int64_t{1} << 20)));
}

}  // namespace

Status Conv2DTransposeForwardGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                 const void* filter, void* output, void* stream) {
  if (p.OutputSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Conv2DTranspose", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ForwardKernel<T><<<cuda::Blocks(p.OutputSize()), cuda::kThreads, 0, s>>>(
        MakeGeometry(p), static_cast<const T*>(input), static_cast<const T*>(filter),
        static_cast<T*>(output));
    return cuda::LaunchStatus("Conv2DTranspose");
  });
}

Status Conv2DTransposeInputGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* grad,
                                   const void* filter, void* grad_input, void* stream) {
  if (p.InputSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Conv2DTransposeInputGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    InputGradKernel<T><<<cuda::Blocks(p.InputSize()), cuda::kThreads, 0, s>>>(
        MakeGeometry(p), static_cast<const T*>(grad), static_cast<const T*>(filter),
        static_cast<T*>(grad_input));
    return cuda::LaunchStatus("Conv2DTransposeInputGrad");
  });
}

Status Conv2DTransposeFilterGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                    const void* grad, void* grad_filter, void* stream) {
  if (p.FilterSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Conv2DTransposeFilterGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    FilterGradKernel<T><<<ReduceBlocks(p.FilterSize()), kReduceThreads, 0, s>>>(
        MakeGeometry(p), static_cast<const T*>(input), static_cast<const T*>(grad),
        static_cast<T*>(grad_filter));
    return cuda::LaunchStatus("Conv2DTransposeFilterGrad");
  });
}

}  // namespace opforge
