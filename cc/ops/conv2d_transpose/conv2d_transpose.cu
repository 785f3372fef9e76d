// CUDA kernels of Conv2DTranspose and its two gradients; their bodies are in
// conv2d_transpose_gpu.h (shared with the host-run tests). The forward pass and the input
// gradient: one thread per result element, gathering its sum in a fixed order. The filter
// gradient: a tiled matrix product per tap, split over slices of the pixels, with a second
// kernel that adds the slices in order (see the header). No atomics: the same bits on every
// run. half and bfloat16 accumulate in float, as on the CPU; the sums run in another order than
// the CPU's GEMM, so the two agree to rounding, not bit for bit.
#include <cstdint>
#include <string>

#include "common/cuda_util.cuh"
#include "ops/conv2d_transpose/conv2d_transpose.h"
#include "ops/conv2d_transpose/conv2d_transpose_gpu.h"

namespace opforge {
namespace {

using conv2d_transpose_gpu::FilterGradArgs;
using conv2d_transpose_gpu::FilterGradPlan;
using conv2d_transpose_gpu::Geometry;
using conv2d_transpose_gpu::kFilterGradMaxStagePixels;
using conv2d_transpose_gpu::kFilterGradThreads;
using conv2d_transpose_gpu::kFilterGradTileElements;

// The filter gradient's grid: enough blocks to fill any GPU several times over (8192; 8 on the
// SIMT runtime, so that its tests reach the loop); a block takes further units in a loop (the
// result does not depend on the grid).
constexpr int64_t kFilterGradMaxBlocks = cuda::kMaxGridBlocks / 8;

struct DeviceBlock {
  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ void sync() const { __syncthreads(); }
};

template <typename T, typename Index>
__global__ void ForwardKernel(Geometry<Index> g, Index total, const T* in, const T* filter,
                              T* out) {
  using N = cuda::Num<T>;
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < total;
       i = cuda::GridNext(i, step, total)) {
    out[i] = conv2d_transpose_gpu::ForwardElement<typename N::C, N>(g, i, in, filter);
  }
}

template <typename T, typename Index>
__global__ void InputGradKernel(Geometry<Index> g, Index total, const T* grad, const T* filter,
                                T* grad_in) {
  using N = cuda::Num<T>;
  for (Index i = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); i < total;
       i = cuda::GridNext(i, step, total)) {
    grad_in[i] = conv2d_transpose_gpu::InputGradElement<typename N::C, N>(g, i, grad, filter);
  }
}

template <typename T, typename Index>
__global__ void __launch_bounds__(kFilterGradThreads)
    FilterGradKernel(Geometry<Index> g, FilterGradArgs<Index> a, const T* in, const T* grad,
                     T* grad_filter, typename cuda::Num<T>::C* partial) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  __shared__ C tile[kFilterGradTileElements];
  __shared__ Index g_off[kFilterGradMaxStagePixels];
  __shared__ Index in_off[kFilterGradMaxStagePixels];
  for (int64_t unit = blockIdx.x; unit < a.units; unit += gridDim.x) {
    conv2d_transpose_gpu::FilterGradUnit<C, N>(DeviceBlock{}, g, a, unit, in, grad, grad_filter,
                                               partial, tile, g_off, in_off);
  }
}

template <typename T, typename Index>
__global__ void FilterGradSumKernel(Index filter_size, Index slices,
                                    const typename cuda::Num<T>::C* partial, T* grad_filter) {
  using N = cuda::Num<T>;
  for (Index e = cuda::GridStart<Index>(), step = cuda::GridStep<Index>(); e < filter_size;
       e = cuda::GridNext(e, step, filter_size)) {
    grad_filter[e] = conv2d_transpose_gpu::FilterGradSumElement<typename N::C, N, T>(
        e, filter_size, slices, partial);
  }
}

// The accumulation type's size: double for double, float otherwise.
int64_t AccumulatorBytes(DType dtype) { return dtype == DType::kDouble ? 8 : 4; }

// No pixel meets the output (an empty batch or image, or an empty output): the gradient is 0.
bool FilterGradIsZero(const Conv2DTransposeParams& p) {
  return p.batch * p.in_h * p.in_w == 0 || p.OutputSize() == 0;
}

}  // namespace

Status Conv2DTransposeForwardGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                 const void* filter, void* output, void* stream) {
  if (p.OutputSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Conv2DTranspose", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return cuda::DispatchIndex(conv2d_transpose_gpu::LargestIndex(p, 0), [&](auto index_tag) {
      using Index = typename decltype(index_tag)::type;
      OPFORGE_LAUNCH(cuda::Blocks(p.OutputSize()), cuda::kThreads, 0, s, ForwardKernel<T, Index>)
      (conv2d_transpose_gpu::MakeGeometry<Index>(p), static_cast<Index>(p.OutputSize()),
       static_cast<const T*>(input), static_cast<const T*>(filter), static_cast<T*>(output));
      return cuda::LaunchStatus("Conv2DTranspose");
    });
  });
}

Status Conv2DTransposeInputGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* grad,
                                   const void* filter, void* grad_input, void* stream) {
  if (p.InputSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, "Conv2DTransposeInputGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return cuda::DispatchIndex(conv2d_transpose_gpu::LargestIndex(p, 0), [&](auto index_tag) {
      using Index = typename decltype(index_tag)::type;
      OPFORGE_LAUNCH(cuda::Blocks(p.InputSize()), cuda::kThreads, 0, s, InputGradKernel<T, Index>)
      (conv2d_transpose_gpu::MakeGeometry<Index>(p), static_cast<Index>(p.InputSize()),
       static_cast<const T*>(grad), static_cast<const T*>(filter), static_cast<T*>(grad_input));
      return cuda::LaunchStatus("Conv2DTransposeInputGrad");
    });
  });
}

int64_t Conv2DTransposeFilterGradGpuScratchBytes(DType dtype, const Conv2DTransposeParams& p) {
  if (p.FilterSize() == 0 || FilterGradIsZero(p)) return 0;
  const FilterGradPlan plan = conv2d_transpose_gpu::MakeFilterGradPlan(p);
  return conv2d_transpose_gpu::FilterGradScratchElements(plan, p) * AccumulatorBytes(dtype);
}

Status Conv2DTransposeFilterGradGpu(DType dtype, const Conv2DTransposeParams& p, const void* input,
                                    const void* grad, void* grad_filter, void* scratch,
                                    int64_t scratch_bytes, void* stream) {
  constexpr char kOp[] = "Conv2DTransposeFilterGrad";
  if (p.FilterSize() == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<false>(dtype, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename cuda::Num<T>::C;
    if (FilterGradIsZero(p)) {
      // All bits zero is +0 in every float type.
      const cudaError_t err =
          cudaMemsetAsync(grad_filter, 0, static_cast<size_t>(p.FilterSize()) * sizeof(T), s);
      if (err != cudaSuccess) {
        return Status::Internal(std::string(kOp) +
                                ": cudaMemsetAsync failed: " + cudaGetErrorString(err));
      }
      return Status::Ok();
    }
    const FilterGradPlan plan = conv2d_transpose_gpu::MakeFilterGradPlan(p);
    const int64_t scratch_elements = conv2d_transpose_gpu::FilterGradScratchElements(plan, p);
    const int64_t need = scratch_elements * static_cast<int64_t>(sizeof(C));
    if (need > 0 && (scratch == nullptr || scratch_bytes < need ||
                     reinterpret_cast<uintptr_t>(scratch) % alignof(C) != 0)) {
      return Status::Internal(std::string(kOp) + ": needs " + std::to_string(need) +
                              " bytes of scratch memory aligned to " + std::to_string(alignof(C)) +
                              ", got " + std::to_string(scratch_bytes));
    }
    C* partial = plan.slices > 1 ? static_cast<C*>(scratch) : nullptr;
    return cuda::DispatchIndex(
        conv2d_transpose_gpu::LargestIndex(p, scratch_elements), [&](auto index_tag) {
          using Index = typename decltype(index_tag)::type;
          const auto blocks =
              static_cast<unsigned>(std::min<int64_t>(plan.units, kFilterGradMaxBlocks));
          OPFORGE_LAUNCH(blocks, kFilterGradThreads, 0, s, FilterGradKernel<T, Index>)
          (conv2d_transpose_gpu::MakeGeometry<Index>(p),
           conv2d_transpose_gpu::MakeFilterGradArgs<Index>(plan, p), static_cast<const T*>(input),
           static_cast<const T*>(grad), static_cast<T*>(grad_filter), partial);
          OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
          if (partial == nullptr) return Status::Ok();
          OPFORGE_LAUNCH(cuda::Blocks(p.FilterSize()), cuda::kThreads, 0, s,
                         FilterGradSumKernel<T, Index>)
          (static_cast<Index>(p.FilterSize()), static_cast<Index>(plan.slices), partial,
           static_cast<T*>(grad_filter));
          return cuda::LaunchStatus(kOp);
        });
  });
}

}  // namespace opforge
