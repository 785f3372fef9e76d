// CUDA kernels of ElementMul.
//
// Products (the forward pass, and the gradient of an operand with nothing to sum): a plan of one
// dimension (same shapes, or a scalar operand) is a vectorised element-wise map; other plans map
// each output index to the operands' offsets with 32-bit multiply-high divisions, once per
// 16-byte vector of outputs where the innermost dimension allows, else once per output.
//
// Gradient sums follow the order of element_mul_reduce.h, which the CPU kernel follows too, so
// the two give the same bits; no atomics, the same bits on every run. The kernels, by layout:
//   * innermost dimension reduced (lane order): a warp sums a segment of 2048 consecutive terms
//     (lane j the terms r = j mod 32, coalesced), WarpTreeSum gives its value; up to 8 warps
//     share a target's segments, each lane of the group keeping u_(s mod 32). At most 32 terms
//     along one reduced dimension: one thread per target.
//   * innermost dimension kept (row order): a thread sums a segment of 512 terms of one target
//     while its neighbours sum the neighbouring targets (coalesced); a block of 32 targets x 8
//     threads shares the segments, one segment at a time each.
//   * few targets (under 1024) with more than one segment: two passes, every segment of every
//     target a work item over the whole GPU (values in scratch), then a warp per target
//     combines them. So the gradient of x * scalar keeps every SM busy.
// Index arithmetic is 32-bit where every index fits (with slack for loops that step past their
// end), 64-bit past 2^31 elements.
#include <algorithm>
#include <string>

#include "common/cuda_util.cuh"
#include "ops/element_mul/element_mul.h"
#include "ops/element_mul/element_mul_reduce.h"

namespace opforge {
namespace {

using mul_grad::Geometry;
using mul_grad::IndexMap;

template <typename T>
using AccOf = typename cuda::Num<T>::C;

// Loops in the reduction step past their end by at most a segment or a grid (of kMaxBlocks
// blocks of 256 threads: 2^24 on a GPU); int32_t index math needs this much room above the
// largest index.
constexpr int64_t kIndexSlack = cuda::kMaxGridBlocks * 256;
// Below this many targets, sums of several segments take two passes (when scratch is there).
constexpr int64_t kTwoPassMaxTargets = 1024;
constexpr unsigned kMaxBlocks = static_cast<unsigned>(cuda::kMaxGridBlocks);  // 2^16 on a GPU
constexpr unsigned kFullMask = 0xffffffffu;

unsigned BlocksFor(int64_t units, int64_t per_block) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::min<int64_t>((units + per_block - 1) / per_block, kMaxBlocks)));
}

// --- products ------------------------------------------------------------------------------------

template <typename T>
struct MulFn {
  __device__ T operator()(T x, T y) const {
    using N = cuda::Num<T>;
    return N::From(Mul(N::To(x), N::To(y)));
  }
};

template <typename T, typename Index>
__global__ void BroadcastMulKernel(IndexMap<Index> map, Index n, const T* x, const T* y, T* out) {
  using N = cuda::Num<T>;
  const Index step = cuda::GridStep<Index>();
  for (Index i = cuda::GridStart<Index>(); i < n; i = cuda::GridNext(i, step, n)) {
    Index xo, yo;
    map.Map(i, &xo, &yo);
    out[i] = N::From(Mul(N::To(x[xo]), N::To(y[yo])));
  }
}

// The same over kN outputs at a time, when the innermost dimension is a multiple of kN and every
// pointer is aligned to a vector: the kN outputs lie in one row, and each operand's kN inputs are
// either one aligned vector (inner stride 1) or one value (inner stride 0, broadcast).
template <typename T, typename Index>
__global__ void BroadcastMulVectorKernel(IndexMap<Index> map, Index n, const T* x, const T* y,
                                         T* out) {
  using N = cuda::Num<T>;
  constexpr int kN = cuda::VecWidth<T>();
  const int last = map.rank - 1;
  const bool x_row = map.first[last] != 0, y_row = map.second[last] != 0;
  const Index vectors = n / kN, step = cuda::GridStep<Index>();
  for (Index v = cuda::GridStart<Index>(); v < vectors; v = cuda::GridNext(v, step, vectors)) {
    Index xo, yo;
    map.Map(v * kN, &xo, &yo);
    cuda::Vec<T, kN> xv, yv, ov;
    if (x_row) {
      xv = cuda::LoadVec<kN>(x + xo);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) xv.v[k] = x[xo];
    }
    if (y_row) {
      yv = cuda::LoadVec<kN>(y + yo);
    } else {
#pragma unroll
      for (int k = 0; k < kN; ++k) yv.v[k] = y[yo];
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) ov.v[k] = N::From(Mul(N::To(xv.v[k]), N::To(yv.v[k])));
    cuda::StoreVec(out + v * kN, ov);
  }
}

Status TooManyDims(size_t rank) {
  return Status::Invalid(
      "ElementMul: on the GPU, a and b may differ in broadcasting along at most " +
      std::to_string(kElementMulGpuMaxDims) + " groups of dimensions, got " + std::to_string(rank));
}

// out[i] = x[.] * y[.] over the collapsed space `dims` (n elements, out contiguous), x and y read
// through their strides.
template <typename T>
Status Product(const char* what, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& x_strides, const std::vector<int64_t>& y_strides,
               const void* xv, const void* yv, void* outv, int64_t n, cudaStream_t s) {
  if (n == 0) return Status::Ok();
  if (dims.size() > static_cast<size_t>(kElementMulGpuMaxDims)) return TooManyDims(dims.size());
  const T* x = static_cast<const T*>(xv);
  const T* y = static_cast<const T*>(yv);
  T* out = static_cast<T*>(outv);
  // Plans have unit or zero strides; one dimension is a map, a zero stride a scalar operand.
  if (dims.size() == 1 && x_strides[0] <= 1 && y_strides[0] <= 1) {
    const T* in[2] = {x, y};
    const bool scalar[2] = {x_strides[0] == 0, y_strides[0] == 0};
    return cuda::LaunchMap(what, n, MulFn<T>{}, out, in, scalar, s);
  }
  constexpr int kN = cuda::VecWidth<T>();
  constexpr size_t kBytes = sizeof(T) * kN;
  const bool vectorized = kN > 1 && dims.back() % kN == 0 && x_strides.back() <= 1 &&
                          y_strides.back() <= 1 && cuda::IsAligned(x, kBytes) &&
                          cuda::IsAligned(y, kBytes) && cuda::IsAligned(out, kBytes);
  cuda::DispatchIndex(n, [&](auto tag) {
    using Index = typename decltype(tag)::type;
    IndexMap<Index> map;
    for (size_t d = 0; d < dims.size(); ++d) map.Push(dims[d], x_strides[d], y_strides[d]);
    if (vectorized) {
      OPFORGE_LAUNCH(cuda::Blocks(n / kN), cuda::kThreads, 0, s, BroadcastMulVectorKernel<T, Index>)
      (map, static_cast<Index>(n), x, y, out);
    } else {
      OPFORGE_LAUNCH(cuda::Blocks(n), cuda::kThreads, 0, s, BroadcastMulKernel<T, Index>)
      (map, static_cast<Index>(n), x, y, out);
    }
    return 0;
  });
  return cuda::LaunchStatus(what);
}

// --- gradient sums -----------------------------------------------------------------------------

// Lane order with at most 32 terms along one reduced dimension: one thread per target.
template <typename T, typename Index>
__global__ void SmallLaneKernel(Geometry<Index> geo, const T* g, const T* other, T* target) {
  using N = cuda::Num<T>;
  const Index step = cuda::GridStep<Index>();
  for (Index t = cuda::GridStart<Index>(); t < geo.targets;
       t = cuda::GridNext(t, step, geo.targets)) {
    Index gb, ob;
    geo.kept.Map(t, &gb, &ob);
    target[t] = N::From(mul_grad::SmallLaneSum<N>(geo, g, other, gb, ob));
  }
}

// Row order with one segment: one thread per target; its value is the result.
template <typename T, typename Index>
__global__ void RowKernel(Geometry<Index> geo, const T* g, const T* other, T* target) {
  using N = cuda::Num<T>;
  const Index step = cuda::GridStep<Index>();
  for (Index t = cuda::GridStart<Index>(); t < geo.targets;
       t = cuda::GridNext(t, step, geo.targets)) {
    Index gb, ob;
    geo.kept.Map(t, &gb, &ob);
    target[t] = N::From(mul_grad::RowSum<N>(geo, g, other, gb, ob, Index{0}));
  }
}

// Lane order in one pass: blocks of 8 warps, `per` warps (1, 2, 4 or 8) per target. Warp w of a
// target's group sums segments w, w + per, ... in turn; after each, lane s % 32 adds the value
// to its u, so lane j of warp j % per owns u_j and adds v_j, v_(j+32), ... in increasing order.
// The group's u then meet in shared memory for the final tree.
template <typename T, typename Index>
__global__ void LaneKernel(Geometry<Index> geo, int per, const T* g, const T* other, T* target) {
  using N = cuda::Num<T>;
  using A = typename N::C;
  __shared__ A shared_u[8][mul_grad::kLanes];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int groups = 8 / per, group = warp / per, w = warp % per;
  const Index targets = geo.targets, segments = geo.segments;
  const Index step = static_cast<Index>(gridDim.x) * groups;
  // The same rounds for every thread of the block (the barriers): the loop bound is per block.
  for (Index base = static_cast<Index>(blockIdx.x) * groups; base < targets;
       base = cuda::GridNext(base, step, targets)) {
    const Index t = base + group;
    const bool active = t < targets;  // the same for the whole warp
    A u = A(0);
    if (active) {
      Index gb, ob;
      geo.kept.Map(t, &gb, &ob);
      for (Index s = w; s < segments; s += per) {
        A v = cuda::WarpTreeSum(mul_grad::LaneSum<N>(geo, g, other, gb, ob, s, lane));
        v = __shfl_sync(kFullMask, v, 0);
        if (lane == static_cast<int>(s % mul_grad::kLanes)) u = Add(u, v);
      }
    }
    if (per == 1) {
      const A r = cuda::WarpTreeSum(u);
      if (active && lane == 0) target[t] = N::From(r);
    } else {
      if (active && lane % per == w) shared_u[group][lane] = u;
      __syncthreads();
      if (active && w == 0) {
        const A r = cuda::WarpTreeSum(shared_u[group][lane]);
        if (lane == 0) target[t] = N::From(r);
      }
      __syncthreads();
    }
  }
}

// Row order in one pass: blocks of 32 x 8 threads; thread (x, y) serves target base + x (so a
// warp reads 32 neighbouring targets) and its segments y, y + 8, ...; the segment s goes to u_(s
// mod 32) = u_(y + 8 m), its m-th accumulator. The 32 u of a target meet in shared memory, where
// warp y reduces those of targets y, y + 8, y + 16 and y + 24.
template <typename T, typename Index>
__global__ void RowBlockKernel(Geometry<Index> geo, const T* g, const T* other, T* target) {
  using N = cuda::Num<T>;
  using A = typename N::C;
  __shared__ A shared_u[32][mul_grad::kLanes + 1];  // [x][j], padded against bank conflicts
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const Index targets = geo.targets, segments = geo.segments;
  const Index step = static_cast<Index>(gridDim.x) * 32;
  for (Index base = static_cast<Index>(blockIdx.x) * 32; base < targets;
       base = cuda::GridNext(base, step, targets)) {
    const Index t = base + x;
    A u[4] = {A(0), A(0), A(0), A(0)};
    if (t < targets) {
      Index gb, ob;
      geo.kept.Map(t, &gb, &ob);
      for (Index s0 = y; s0 < segments; s0 += mul_grad::kLanes) {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const Index s = s0 + 8 * m;
          if (s < segments) u[m] = Add(u[m], mul_grad::RowSum<N>(geo, g, other, gb, ob, s));
        }
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) shared_u[x][y + 8 * m] = u[m];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int tx = y + 8 * k;  // warp y, lane x: u_x of target base + tx
      const A r = cuda::WarpTreeSum(shared_u[tx][x]);
      if (x == 0 && base + tx < targets) target[base + tx] = N::From(r);
    }
    __syncthreads();
  }
}

// Two passes, first: the value of every segment of every target, values[t * S + s]. Lane order:
// a warp per (target, segment), item t * S + s.
template <typename T, typename Index>
__global__ void LaneSegmentsKernel(Geometry<Index> geo, const T* g, const T* other,
                                   AccOf<T>* values) {
  using N = cuda::Num<T>;
  const Index items = geo.targets * geo.segments;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const Index warps = static_cast<Index>(blockDim.x / 32);
  const Index step = static_cast<Index>(gridDim.x) * warps;
  for (Index item = static_cast<Index>(blockIdx.x) * warps + static_cast<Index>(threadIdx.x / 32);
       item < items; item = cuda::GridNext(item, step, items)) {
    const Index t = item / geo.segments, s = item - t * geo.segments;
    Index gb, ob;
    geo.kept.Map(t, &gb, &ob);
    const auto v = cuda::WarpTreeSum(mul_grad::LaneSum<N>(geo, g, other, gb, ob, s, lane));
    if (lane == 0) values[item] = v;
  }
}

// Row order: a thread per (segment, target), item s * T + t, so that neighbouring threads read
// neighbouring targets.
template <typename T, typename Index>
__global__ void RowSegmentsKernel(Geometry<Index> geo, const T* g, const T* other,
                                  AccOf<T>* values) {
  using N = cuda::Num<T>;
  const Index items = geo.targets * geo.segments;
  const Index step = cuda::GridStep<Index>();
  for (Index item = cuda::GridStart<Index>(); item < items;
       item = cuda::GridNext(item, step, items)) {
    const Index s = item / geo.targets, t = item - s * geo.targets;
    Index gb, ob;
    geo.kept.Map(t, &gb, &ob);
    values[t * geo.segments + s] = mul_grad::RowSum<N>(geo, g, other, gb, ob, s);
  }
}

// Second pass: a warp per target; lane j sums values[t * S + s] for s = j, j + 32, ... from +0,
// then the tree.
template <typename T, typename Index>
__global__ void CombineKernel(Index targets, Index segments, const AccOf<T>* values, T* target) {
  using N = cuda::Num<T>;
  using A = typename N::C;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const Index warps = static_cast<Index>(blockDim.x / 32);
  const Index step = static_cast<Index>(gridDim.x) * warps;
  for (Index t = static_cast<Index>(blockIdx.x) * warps + static_cast<Index>(threadIdx.x / 32);
       t < targets; t = cuda::GridNext(t, step, targets)) {
    A u = A(0);
    for (Index s = lane; s < segments; s += mul_grad::kLanes) u = Add(u, values[t * segments + s]);
    const A r = cuda::WarpTreeSum(u);
    if (lane == 0) target[t] = N::From(r);
  }
}

// Scratch bytes for the two-pass sum of one target (0: none used).
template <typename T>
int64_t WorkspaceFor(const BroadcastPlan& plan, const std::vector<int64_t>& target_strides) {
  if (plan.dims.size() > static_cast<size_t>(kElementMulGpuMaxDims)) return 0;
  const mul_grad::GeometryCounts c = mul_grad::CountGeometry(plan.dims, target_strides);
  if (c.targets == 0 || c.terms <= 1 || c.segments < 2 || c.targets >= kTwoPassMaxTargets) return 0;
  return c.targets * c.segments * static_cast<int64_t>(sizeof(AccOf<T>));
}

// Scratch for one call: the caller's, or one allocated on the stream and freed there after use.
class Scratch {
 public:
  explicit Scratch(cudaStream_t s) : stream_(s) {}
  ~Scratch() {
    if (owned_ != nullptr) cudaFreeAsync(owned_, stream_);
  }
  // Scratch of at least `bytes`, or null (no room: the caller takes the one-pass kernels).
  void* Get(int64_t bytes, void* given, int64_t given_bytes, bool allocate) {
    if (given != nullptr && given_bytes >= bytes && cuda::IsAligned(given, 16)) return given;
    if (!allocate) return nullptr;
    if (owned_ != nullptr && owned_bytes_ >= bytes) return owned_;
    if (owned_ != nullptr) cudaFreeAsync(owned_, stream_);
    owned_ = nullptr;
    if (cudaMallocAsync(&owned_, static_cast<size_t>(bytes), stream_) != cudaSuccess) {
      cudaGetLastError();  // not an error of ours: the one-pass kernels need no scratch
      owned_ = nullptr;
      return nullptr;
    }
    owned_bytes_ = bytes;
    return owned_;
  }

 private:
  cudaStream_t stream_;
  void* owned_ = nullptr;
  int64_t owned_bytes_ = 0;
};

// The gradient of one operand, the target: target_strides (0 where it was broadcast),
// other_strides those of the operand it is multiplied by. grad_first: the product is
// grad * other (grad_a) rather than other * grad (grad_b).
template <typename T>
Status ReduceOne(const BroadcastPlan& plan, const std::vector<int64_t>& target_strides,
                 const std::vector<int64_t>& other_strides, bool grad_first, const void* gv,
                 const void* otherv, void* targetv, cudaStream_t s, Scratch* scratch,
                 void* workspace, int64_t workspace_bytes, bool allocate) {
  constexpr char kWhat[] = "ElementMulGrad";
  const mul_grad::GeometryCounts c = mul_grad::CountGeometry(plan.dims, target_strides);
  if (c.targets == 0) return Status::Ok();
  if (c.terms == 1) {
    // Nothing to sum: the product, element by element, as TensorFlow (-0 stays -0).
    if (grad_first) {
      return Product<T>(kWhat, plan.dims, plan.out_strides, other_strides, gv, otherv, targetv,
                        c.targets, s);
    }
    return Product<T>(kWhat, plan.dims, other_strides, plan.out_strides, otherv, gv, targetv,
                      c.targets, s);
  }
  if (c.terms == 0) {  // broadcast along a size-0 dimension: empty sums, +0 (all bits zero)
    const cudaError_t err =
        cudaMemsetAsync(targetv, 0, static_cast<size_t>(c.targets) * sizeof(T), s);
    if (err != cudaSuccess) {
      return Status::Internal(std::string(kWhat) + ": cudaMemsetAsync: " + cudaGetErrorString(err));
    }
    return Status::Ok();
  }
  if (plan.dims.size() > static_cast<size_t>(kElementMulGpuMaxDims)) {
    return TooManyDims(plan.dims.size());
  }
  const int64_t need = WorkspaceFor<T>(plan, target_strides);
  void* values = need > 0 ? scratch->Get(need, workspace, workspace_bytes, allocate) : nullptr;
  const T* g = static_cast<const T*>(gv);
  const T* other = static_cast<const T*>(otherv);
  T* target = static_cast<T*>(targetv);
  auto* acc = static_cast<AccOf<T>*>(values);
  const int64_t largest = std::max(plan.out_size, c.targets * c.segments) + kIndexSlack;
  cuda::DispatchIndex(largest, [&](auto tag) {
    using Index = typename decltype(tag)::type;
    const Geometry<Index> geo =
        mul_grad::MakeGeometry<Index>(plan.dims, target_strides, other_strides);
    const int64_t items = c.targets * c.segments;
    if (c.lane_order && c.terms <= mul_grad::kLanes && geo.reduced.rank == 1) {
      OPFORGE_LAUNCH(cuda::Blocks(c.targets), cuda::kThreads, 0, s, SmallLaneKernel<T, Index>)
      (geo, g, other, target);
    } else if (!c.lane_order && c.segments == 1) {
      OPFORGE_LAUNCH(cuda::Blocks(c.targets), cuda::kThreads, 0, s, RowKernel<T, Index>)
      (geo, g, other, target);
    } else if (values != nullptr) {
      if (c.lane_order) {
        OPFORGE_LAUNCH(BlocksFor(items, 8), 256, 0, s, LaneSegmentsKernel<T, Index>)
        (geo, g, other, acc);
      } else {
        OPFORGE_LAUNCH(cuda::Blocks(items), cuda::kThreads, 0, s, RowSegmentsKernel<T, Index>)
        (geo, g, other, acc);
      }
      OPFORGE_LAUNCH(BlocksFor(c.targets, 8), 256, 0, s, CombineKernel<T, Index>)
      (geo.targets, geo.segments, acc, target);
    } else if (c.lane_order) {
      const int per = c.segments >= 5 ? 8 : c.segments >= 3 ? 4 : static_cast<int>(c.segments);
      OPFORGE_LAUNCH(BlocksFor(c.targets, 8 / per), 256, 0, s, LaneKernel<T, Index>)
      (geo, per, g, other, target);
    } else {
      OPFORGE_LAUNCH(BlocksFor(c.targets, 32), dim3(32, 8), 0, s, RowBlockKernel<T, Index>)
      (geo, g, other, target);
    }
    return 0;
  });
  return cuda::LaunchStatus(kWhat);
}

template <typename T>
Status Backward(const BroadcastPlan& plan, const void* g, const void* a, const void* b,
                void* grad_a, void* grad_b, cudaStream_t s, void* workspace,
                int64_t workspace_bytes, bool allocate) {
  Scratch scratch(s);
  if (grad_a != nullptr) {
    OPFORGE_RETURN_IF_ERROR(ReduceOne<T>(plan, plan.a_strides, plan.b_strides, true, g, b, grad_a,
                                         s, &scratch, workspace, workspace_bytes, allocate));
  }
  if (grad_b != nullptr) {
    OPFORGE_RETURN_IF_ERROR(ReduceOne<T>(plan, plan.b_strides, plan.a_strides, false, g, a, grad_b,
                                         s, &scratch, workspace, workspace_bytes, allocate));
  }
  return Status::Ok();
}

Status BackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad, const void* a,
                   const void* b, void* grad_a, void* grad_b, void* stream, void* workspace,
                   int64_t workspace_bytes, bool allocate) {
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<true>(dtype, "ElementMulGrad", [&](auto tag) {
    return Backward<typename decltype(tag)::type>(plan, grad, a, b, grad_a, grad_b, s, workspace,
                                                  workspace_bytes, allocate);
  });
}

}  // namespace

Status ElementMulForwardGpu(DType dtype, const BroadcastPlan& plan, const void* a, const void* b,
                            void* out, void* stream) {
  if (plan.out_size == 0) return Status::Ok();
  auto s = static_cast<cudaStream_t>(stream);
  return cuda::DispatchDType<true>(dtype, "ElementMul", [&](auto tag) {
    return Product<typename decltype(tag)::type>("ElementMul", plan.dims, plan.a_strides,
                                                 plan.b_strides, a, b, out, plan.out_size, s);
  });
}

int64_t ElementMulBackwardGpuWorkspaceBytes(DType dtype, const BroadcastPlan& plan, bool grad_a,
                                            bool grad_b) {
  int64_t bytes = 0;
  const Status st = cuda::DispatchDType<true>(dtype, "ElementMulGrad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (grad_a) bytes = std::max(bytes, WorkspaceFor<T>(plan, plan.a_strides));
    if (grad_b) bytes = std::max(bytes, WorkspaceFor<T>(plan, plan.b_strides));
    return Status::Ok();
  });
  return st.ok() ? bytes : 0;
}

Status ElementMulBackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad,
                             const void* a, const void* b, void* grad_a, void* grad_b,
                             void* stream) {
  return BackwardGpu(dtype, plan, grad, a, b, grad_a, grad_b, stream, nullptr, 0,
                     /*allocate=*/true);
}

Status ElementMulBackwardGpu(DType dtype, const BroadcastPlan& plan, const void* grad,
                             const void* a, const void* b, void* grad_a, void* grad_b, void* stream,
                             void* workspace, int64_t workspace_bytes) {
  return BackwardGpu(dtype, plan, grad, a, b, grad_a, grad_b, stream, workspace, workspace_bytes,
                     /*allocate=*/false);
}

}  // namespace opforge
