// CUDA kernels of ElementMul. The forward pass is one thread per output element over the
// collapsed broadcast plan; the gradient gives each element of an operand to one thread, which
// sums over that operand's broadcast dimensions in a fixed order: deterministic, no atomics.
#include "common/cuda_util.cuh"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

struct GpuPlan {
  int rank;
  int64_t dims[kElementMulGpuMaxDims];
  int64_t x_strides[kElementMulGpuMaxDims];  // first operand read by the kernel
  int64_t y_strides[kElementMulGpuMaxDims];  // second operand
};

template <typename T>
__global__ void ForwardKernel(GpuPlan p, int64_t n, const T* x, const T* y, T* out) {
  using N = cuda::Num<T>;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, xo = 0, yo = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t k = rem % p.dims[d];
      rem /= p.dims[d];
      xo += k * p.x_strides[d];
      yo += k * p.y_strides[d];
    }
    out[i] = N::From(Mul(N::To(x[xo]), N::To(y[yo])));
  }
}

// target[t] = sum over the dimensions where target_strides is 0 of g[o] * other[o'].
// p.x_strides: the target's strides; p.y_strides: the other operand's.
template <typename T>
__global__ void ReduceKernel(GpuPlan p, int64_t target_size, const T* g, const T* other,
                             T* target) {
  using N = cuda::Num<T>;
  using C = typename N::C;
  int64_t g_strides[kElementMulGpuMaxDims];
  int64_t acc_stride = 1, reduce_size = 1;
  for (int d = p.rank - 1; d >= 0; --d) {
    g_strides[d] = acc_stride;
    acc_stride *= p.dims[d];
    if (p.x_strides[d] == 0) reduce_size *= p.dims[d];
  }
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < target_size;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Offsets of target element t along the kept dimensions.
    int64_t rem = t, g_base = 0, o_base = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      if (p.x_strides[d] == 0) continue;
      const int64_t k = rem % p.dims[d];
      rem /= p.dims[d];
      g_base += k * g_strides[d];
      o_base += k * p.y_strides[d];
    }
    if (reduce_size == 1) {
      // Not broadcast: one product, exactly as the CPU kernel (no 0 + x, which turns -0 into +0).
      target[t] = N::From(Mul(N::To(g[g_base]), N::To(other[o_base])));
      continue;
    }
    C acc = static_cast<C>(0);
    for (int64_t r = 0; r < reduce_size; ++r) {
      int64_t rr = r, go = g_base, oo = o_base;
      for (int d = p.rank - 1; d >= 0; --d) {
        if (p.x_strides[d] != 0) continue;
        const int64_t k = rr % p.dims[d];
        rr /= p.dims[d];
        go += k * g_strides[d];
        oo += k * p.y_strides[d];
      }
      acc = Add(acc, Mul(N::To(g[go]), N::To(other[oo])));
    }
    target[t] = N::From(acc);
  }
}

Status MakeGpuPlan(const BroadcastPlan& plan, const std::vector<int64_t>& x_strides,
                   const std::vector<int64_t>& y_strides, GpuPlan* out) {
  const int rank = static_cast<int>(plan.dims.size());
  if (rank > kElementMulGpuMaxDims) {
    return Status::Invalid(
        "ElementMul: on the GPU, a and b may differ in broadcasting along at "
        "most " +
        std::to_string(kElementMulGpuMaxDims) + " groups of dimensions, got " +
        std::to_string(rank));
  }
  out->rank = rank;
  for (int d = 0; d < rank; ++d) {
    out->dims[d] = plan.dims[d];
    out->x_strides[d] = x_strides[d];
    out->y_strides[d] = y_strides[d];
  }
  return Status::Ok();
}

template <typename T>
Status Forward(const BroadcastPlan& plan, const void* a, const void* b, void* out, cudaStream_t s) {
  GpuPlan p;
  OPFORGE_RETURN_IF_ERROR(MakeGpuPlan(plan, plan.a_strides, plan.b_strides, &p));
  ForwardKernel<T><<<cuda::Blocks(plan.out_size), cuda::kThreads, 0, s>>>(
      p, plan.out_size, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
  return cuda::LaunchStatus("ElementMul");
}

template <typename T>
Status ReduceOne(const BroadcastPlan& plan, const std::vector<int64_t>& target_strides,
                 const std::vector<int64_t>& other_strides, const void* g, const void* other,
                 void* target, cudaStream_t s) {
  GpuPlan p;
  OPFORGE_RETURN_IF_ERROR(MakeGpuPlan(plan, target_strides, other_strides, &p));
  int64_t target_size = 1;
  for (size_t d = 0; d < plan.dims.size(); ++d) {
    if (target_strides[d] != 0) target_size *= plan.dims[d];
  }
  if (target_size == 0) return Status::Ok();
  ReduceKernel<T><<<cuda::Blocks(target_size), cuda::kThreads, 0, s>>>(
      p, target_size, static_cast<const T*>(g), static_cast<const T*>(other),
      static_cast<T*>(target));
  return cuda::LaunchStatus("ElementMulGrad");
}

template <typename T>
Status Backward(const BroadcastPlan& plan, const void* g, const void* a, const void* b,
                void* grad_a, void* grad_b, cudaStream_t s) {
  if (grad_a != nullptr) {
    OPFORGE_RETURN_IF_ERROR(ReduceOne<T>(plan, plan.a_strides, plan.b_strides, g, b, grad_a, s));
  }
  if (grad_b != nullptr) {
    OPFORGE_RETURN_IF_ERROR(ReduceOne<T>(plan, plan.b_strides, plan.a_strides, g, a, grad_b, s));
  }
  return Status::Ok();
}

}  // namespace

Status ElementMulForwardGpu(DType dtype, const BroadcastPlan& plan, const void* a, const void* b,
                            void* out, void* stream) {
  if (plan.out_size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<true>(dtype, "ElementMul", [&](auto tag) {
    return Forward<typename decltype(tag)::type>(plan, a, b, out, s);
  });
}

Status ElementMulBackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad,
                             const void* a, const void* b, void* grad_a, void* grad_b,
                             void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<true>(dtype, "ElementMulGrad", [&](auto tag) {
    return Backward<typename decltype(tag)::type>(plan, grad, a, b, grad_a, grad_b, s);
  });
}

}  // namespace opforge
