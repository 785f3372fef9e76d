// The summation order of ElementMul's broadcast gradients, written once for the CPU kernel
// (element_mul_cpu.cc) and the CUDA kernels (element_mul.cu), which must agree bit for bit, and
// the index arithmetic the CUDA kernels use (host and device: the core tests run it on the CPU).
//
// The gradient of an operand broadcast along some dimensions is, for each of its elements (a
// "target" t), a sum of R terms x_r = grad * conj(other), r = 0 .. R-1 running over the reduced
// dimensions in row-major order. Floating-point sums depend on their order; this one is fixed,
// depends on R and the layout only (never on threads, blocks or devices), and is built from
// pieces a GPU sums in parallel:
//
//   * R == 1 (nothing reduced): the product itself, not 0 + x (that would turn -0 into +0).
//   * Segments: the terms are cut into S = ceil(R / L) segments of L consecutive terms (the last
//     one shorter), each summed to a value v_s as below.
//       - The innermost dimension is reduced ("lane order", L = kLaneSegment = 2048): the
//         segment's terms are dealt to 32 lanes, term r to lane r % 32; each lane sums its
//         terms from +0 in increasing r; v_s = Tree32(the 32 lane sums). On the GPU a warp sums
//         a segment, each thread a lane, reading consecutive terms: coalesced.
//       - The innermost dimension is kept ("row order", L = kRowSegment = 512): v_s = the
//         segment's terms summed from +0 in increasing r. On the GPU a thread sums a segment
//         while its neighbours sum the neighbouring targets: coalesced.
//   * The result: u_j = the v_s with s % 32 == j summed from +0 in increasing s (j = 0 .. 31),
//     then Tree32(u).
//   * Tree32(u): for h = 16, 8, 4, 2, 1, u[j] = u[j] + u[j + h] for every j < h; the result is
//     u[0]. It is a warp's shuffle-down reduction, step for step (cuda::WarpTreeSum).
//
// Every sum starts from +0, so no partial sum is ever -0 and adding an empty lane or segment
// (+0) changes no bits: with one segment the result is v_0 itself, and with at most 32 terms in
// lane order it is Tree32 of the terms. Zero sums are +0, as TensorFlow's reduce_sum gives.
// Accumulation is in Acc<T> (float for half and bfloat16, T otherwise), rounded to T once.
// Compared with one running sum, the error bound drops from about R eps to about
// (L / 32 + S / 32 + 10) eps for lane order and (512 + S / 32 + 5) eps for row order.
#ifndef OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_REDUCE_H_
#define OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_REDUCE_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/host_device.h"
#include "common/scalar.h"

#if defined(__CUDA_ARCH__)
#define OPFORGE_UNROLL _Pragma("unroll")
#else
#define OPFORGE_UNROLL
#endif
#if defined(__CUDACC__)
// The templates below call the converter N's To, which may be __device__-only (a GPU type's) or
// host-only (the CPU's); each instantiation is used on its own side only.
#define OPFORGE_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define OPFORGE_HD_TEMPLATE
#endif

namespace opforge {
namespace mul_grad {

constexpr int kLanes = 32;
constexpr int64_t kLaneSegment = 2048;  // terms per segment, innermost dimension reduced
constexpr int64_t kRowSegment = 512;    // terms per segment, innermost dimension kept
constexpr int kMaxDims = 8;             // dimensions of a collapsed plan the index maps take

// Tree32 over u[0..31] (overwrites u).
template <typename A>
OPFORGE_HOST_DEVICE inline A Tree32(A* u) {
  OPFORGE_UNROLL
  for (int h = kLanes / 2; h >= 1; h /= 2) {
    OPFORGE_UNROLL
    for (int j = 0; j < h; ++j) u[j] = Add(u[j], u[j + h]);
  }
  return u[0];
}

// --- division by a fixed divisor ---------------------------------------------------------------

// Divider<Index>: quotient and remainder by a fixed positive divisor. For int32_t it is a
// multiply-high and a shift (Granlund and Montgomery's round-up method, as PyTorch's
// IntDivider): exact for every dividend in [0, 2^31) and divisor in [1, 2^31), several times
// cheaper on a GPU than a division, which CUDA emulates in software. For int64_t, plain division.
template <typename Index>
struct Divider;

template <>
struct Divider<int32_t> {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;

  Divider() = default;
  explicit Divider(int32_t d) : divisor(static_cast<uint32_t>(d)) {
    shift = 0;
    while ((uint64_t{1} << shift) < divisor) ++shift;  // the smallest 2^shift >= d
    // floor(2^32 (2^shift - d) / d) + 1 < 2^32, since 2^shift < 2d.
    multiplier = static_cast<uint32_t>(
        ((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  OPFORGE_HOST_DEVICE int32_t Div(int32_t n) const {
    const uint32_t un = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(un, multiplier);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(un) * multiplier) >> 32);
#endif
    // t <= n < 2^31: the sum fits in 32 bits.
    return static_cast<int32_t>((t + un) >> shift);
  }
  OPFORGE_HOST_DEVICE int32_t Value() const { return static_cast<int32_t>(divisor); }
};

template <>
struct Divider<int64_t> {
  int64_t divisor = 1;
  Divider() = default;
  explicit Divider(int64_t d) : divisor(d) {}
  OPFORGE_HOST_DEVICE int64_t Div(int64_t n) const { return n / divisor; }
  OPFORGE_HOST_DEVICE int64_t Value() const { return divisor; }
};

// --- index maps --------------------------------------------------------------------------------

// A row-major index over `rank` dimensions, mapped to offsets in two arrays: i ->
// sum_d idx_d * first[d] and sum_d idx_d * second[d]. Dimensions outermost first.
template <typename Index>
struct IndexMap {
  int rank = 0;
  Index dims[kMaxDims] = {};
  Divider<Index> div[kMaxDims];
  Index first[kMaxDims] = {};
  Index second[kMaxDims] = {};

  void Push(int64_t dim, int64_t s1, int64_t s2) {
    dims[rank] = static_cast<Index>(dim);
    div[rank] = Divider<Index>(static_cast<Index>(dim > 0 ? dim : 1));
    first[rank] = static_cast<Index>(s1);
    second[rank] = static_cast<Index>(s2);
    ++rank;
  }

  // One quotient per dimension but the outermost (whose index is what is left).
  OPFORGE_HOST_DEVICE void Map(Index i, Index* o1, Index* o2) const {
    Index a = 0, b = 0;
    for (int d = rank - 1; d > 0; --d) {
      const Index q = div[d].Div(i);
      const Index k = i - q * dims[d];
      a += k * first[d];
      b += k * second[d];
      i = q;
    }
    if (rank > 0) {
      a += i * first[0];
      b += i * second[0];
    }
    *o1 = a;
    *o2 = b;
  }
};

// Walks an IndexMap's indices one by one from a start, with additions only.
template <typename Index>
struct IndexCursor {
  Index idx[kMaxDims];
  Index o1, o2;

  OPFORGE_HOST_DEVICE void Start(const IndexMap<Index>& m, Index i) {
    o1 = 0;
    o2 = 0;
    for (int d = m.rank - 1; d >= 0; --d) {
      Index k = i;
      if (d > 0) {
        const Index q = m.div[d].Div(i);
        k = i - q * m.dims[d];
        i = q;
      }
      idx[d] = k;
      o1 += k * m.first[d];
      o2 += k * m.second[d];
    }
  }
  // Moves to the next index. Call it only while there is one: past the last, the offsets
  // could leave Index's range.
  OPFORGE_HOST_DEVICE void Next(const IndexMap<Index>& m) {
    for (int d = m.rank - 1; d >= 0; --d) {
      o1 += m.first[d];
      o2 += m.second[d];
      if (++idx[d] < m.dims[d]) return;
      o1 -= m.dims[d] * m.first[d];
      o2 -= m.dims[d] * m.second[d];
      idx[d] = 0;
    }
  }
};

// --- the gradient of one operand ---------------------------------------------------------------

// Where the terms of each target are: target t at offsets kept.Map(t) in grad and the other
// operand, its term r at reduced.Map(r) from there.
template <typename Index>
struct Geometry {
  IndexMap<Index> kept;     // the target's own dimensions: first = grad, second = other
  IndexMap<Index> reduced;  // the dimensions it was broadcast along
  Index targets = 0;        // T
  Index terms = 0;          // R
  Index segment = 0;        // L: kLaneSegment or kRowSegment
  Index segments = 0;       // S = ceil(R / L)
  bool lane_order = false;  // the innermost dimension is reduced
};

struct GeometryCounts {
  int64_t targets = 1, terms = 1, segments = 0;
  bool lane_order = false;
};

// T, R, S and the order for a collapsed plan (`dims`, `target_strides`: 0 on the dimensions the
// target was broadcast along).
inline GeometryCounts CountGeometry(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& target_strides) {
  GeometryCounts c;
  for (size_t d = 0; d < dims.size(); ++d) {
    (target_strides[d] != 0 ? c.targets : c.terms) *= dims[d];
  }
  c.lane_order = !dims.empty() && target_strides.back() == 0;
  const int64_t segment = c.lane_order ? kLaneSegment : kRowSegment;
  c.segments = (c.terms + segment - 1) / segment;
  return c;
}

// The geometry of a collapsed plan: `dims`, the target's strides (0 where it was broadcast) and
// the other operand's; grad is contiguous over `dims`. At most kMaxDims dimensions.
template <typename Index>
Geometry<Index> MakeGeometry(const std::vector<int64_t>& dims,
                             const std::vector<int64_t>& target_strides,
                             const std::vector<int64_t>& other_strides) {
  Geometry<Index> geo;
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> g_strides(dims.size());
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    g_strides[d] = stride;
    stride *= dims[d];
  }
  for (int d = 0; d < rank; ++d) {
    IndexMap<Index>& m = target_strides[d] != 0 ? geo.kept : geo.reduced;
    m.Push(dims[d], g_strides[d], other_strides[d]);
  }
  const GeometryCounts c = CountGeometry(dims, target_strides);
  geo.targets = static_cast<Index>(c.targets);
  geo.terms = static_cast<Index>(c.terms);
  geo.lane_order = c.lane_order;
  geo.segment = static_cast<Index>(c.lane_order ? kLaneSegment : kRowSegment);
  geo.segments = static_cast<Index>(c.segments);
  return geo;
}

// Term of grad at offset go and the other operand at offset oo, in the accumulator type N::C
// (N: the element converter; cuda::Num<T> on the GPU).
OPFORGE_HD_TEMPLATE
template <typename N, typename T, typename Index>
OPFORGE_HOST_DEVICE inline typename N::C Term(const T* g, const T* other, Index go, Index oo) {
  return Mul(N::To(g[go]), Conj(N::To(other[oo])));
}

// Lane order: the sum of lane `lane`'s terms in segment s of the target whose offsets are
// (gb, ob): terms s L + lane, s L + lane + 32, ... below min(R, (s + 1) L).
OPFORGE_HD_TEMPLATE
template <typename N, typename T, typename Index>
OPFORGE_HOST_DEVICE inline typename N::C LaneSum(const Geometry<Index>& geo, const T* g,
                                                 const T* other, Index gb, Index ob, Index s,
                                                 int lane) {
  using A = typename N::C;
  A acc = A(0);
  const Index first = s * geo.segment;
  const Index end = geo.terms - first < geo.segment ? geo.terms : first + geo.segment;
  for (Index r = first + lane; r < end; r += kLanes) {
    Index go, oo;
    geo.reduced.Map(r, &go, &oo);
    acc = Add(acc, Term<N>(g, other, gb + go, ob + oo));
  }
  return acc;
}

// Row order: v_s, the sum of segment s's terms in increasing r.
OPFORGE_HD_TEMPLATE
template <typename N, typename T, typename Index>
OPFORGE_HOST_DEVICE inline typename N::C RowSum(const Geometry<Index>& geo, const T* g,
                                                const T* other, Index gb, Index ob, Index s) {
  using A = typename N::C;
  A acc = A(0);
  const Index first = s * geo.segment;
  const Index count = geo.terms - first < geo.segment ? geo.terms - first : geo.segment;
  if (count <= 0) return acc;
  if (geo.reduced.rank == 1) {  // one reduced dimension (the usual case): fixed steps
    const Index sg = geo.reduced.first[0], so = geo.reduced.second[0];
    const T* gp = g + (gb + first * sg);
    const T* op = other + (ob + first * so);
    for (Index k = 0; k < count; ++k) {
      acc = Add(acc, Mul(N::To(gp[k * sg]), Conj(N::To(op[k * so]))));
    }
    return acc;
  }
  IndexCursor<Index> c;
  c.Start(geo.reduced, first);
  for (Index k = 0;;) {
    acc = Add(acc, Term<N>(g, other, gb + c.o1, ob + c.o2));
    if (++k == count) break;
    c.Next(geo.reduced);
  }
  return acc;
}

// Lane order with R <= 32 and one reduced dimension: Tree32 of the terms (one per lane, one
// segment), skipping the steps that only add empty lanes (+0, no change). Straight-line code: u
// stays in registers on the GPU.
OPFORGE_HD_TEMPLATE
template <typename N, typename T, typename Index>
OPFORGE_HOST_DEVICE inline typename N::C SmallLaneSum(const Geometry<Index>& geo, const T* g,
                                                      const T* other, Index gb, Index ob) {
  using A = typename N::C;
  A u[kLanes];
  const Index sg = geo.reduced.first[0], so = geo.reduced.second[0];
  OPFORGE_UNROLL
  for (int j = 0; j < kLanes; ++j) {
    u[j] = j < geo.terms ? Add(A(0), Term<N>(g, other, gb + j * sg, ob + j * so)) : A(0);
  }
  OPFORGE_UNROLL
  for (int h = kLanes / 2; h >= 1; h /= 2) {
    if (h < geo.terms) {
      OPFORGE_UNROLL
      for (int j = 0; j < h; ++j) u[j] = Add(u[j], u[j + h]);
    }
  }
  return u[0];
}

// The whole order for target t, one step after the other, exactly as the header comment says
// (R != 1): the reference the CPU kernel and the GPU's pieces are tested against.
OPFORGE_HD_TEMPLATE
template <typename N, typename T, typename Index>
OPFORGE_HOST_DEVICE inline typename N::C SumInOrder(const Geometry<Index>& geo, const T* g,
                                                    const T* other, Index t) {
  using A = typename N::C;
  Index gb, ob;
  geo.kept.Map(t, &gb, &ob);
  A u[kLanes];
  for (int j = 0; j < kLanes; ++j) u[j] = A(0);
  for (Index s = 0; s < geo.segments; ++s) {
    A v;
    if (geo.lane_order) {
      A lanes[kLanes];
      for (int j = 0; j < kLanes; ++j) lanes[j] = LaneSum<N>(geo, g, other, gb, ob, s, j);
      v = Tree32(lanes);
    } else {
      v = RowSum<N>(geo, g, other, gb, ob, s);
    }
    u[s % kLanes] = Add(u[s % kLanes], v);
  }
  return Tree32(u);
}

}  // namespace mul_grad
}  // namespace opforge

#endif  // OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_REDUCE_H_
