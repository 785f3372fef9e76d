#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/arith.h"
#include "common/bf16_bits.h"
#include "common/broadcast.h"
#include "common/cpu_features.h"
#include "ops/element_mul/element_mul.h"
#include "ops/element_mul/element_mul_bf16.h"
#include "ops/element_mul/element_mul_reduce.h"

namespace opforge {

namespace {
#include "ops/element_mul/element_mul_bf16.inc"

// out = x * y in bfloat16 over a broadcast plan: the product in float and its rounding on 16-bit
// patterns (element_mul_bf16.h), the same bits as Eigen::bfloat16's operator*, in loops the
// compiler vectorises, AVX2 where the CPU has it.
void MulBf16(const std::vector<int64_t>& dims, const std::vector<int64_t>& x_strides,
             const std::vector<int64_t>& y_strides, const Eigen::bfloat16* x,
             const Eigen::bfloat16* y, Eigen::bfloat16* out, const Parallel& parallel) {
  static const bool avx2 = HaveElementMulBf16Avx2() && CpuHasAvx2Fma();
  BroadcastRuns(
      dims, x_strides, y_strides, reinterpret_cast<const uint16_t*>(x),
      reinterpret_cast<const uint16_t*>(y), reinterpret_cast<uint16_t*>(out),
      [](const uint16_t* xp, const uint16_t* yp, uint16_t* o, int64_t n, int64_t sx, int64_t sy) {
        if (avx2) {
          ElementMulBf16RunAvx2(xp, yp, o, n, sx, sy);
        } else {
          MulBf16Run(xp, yp, o, n, sx, sy);
        }
      },
      parallel);
}
}  // namespace

Status ValidateElementMul(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                          BroadcastPlan* plan) {
  return MakeBroadcastPlan("ElementMul", "a", "b", a, b, plan);
}

Status ValidateElementMulGrad(const std::vector<int64_t>& grad, const std::vector<int64_t>& a,
                              const std::vector<int64_t>& b, BroadcastPlan* plan) {
  OPFORGE_RETURN_IF_ERROR(MakeBroadcastPlan("ElementMulGrad", "a", "b", a, b, plan));
  if (grad != plan->out_shape) {
    return InvalidArgument("ElementMulGrad", "grad",
                           "the broadcast shape of a and b " + ShapeString(plan->out_shape),
                           ShapeString(grad));
  }
  return Status::Ok();
}

template <typename T>
void ElementMulForward(const BroadcastPlan& plan, const T* a, const T* b, T* out,
                       const Parallel& parallel) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    MulBf16(plan.dims, plan.a_strides, plan.b_strides, a, b, out, parallel);
    return;
  }
  BroadcastApply(
      plan.dims, plan.a_strides, plan.b_strides, a, b, out, [](T x, T y) { return Mul<T>(x, y); },
      parallel);
}

namespace {

// One term of a gradient sum, in the accumulator type A: g * conj(o).
template <typename A, typename T>
inline A TermOf(T g, T o) {
  return Mul<A>(static_cast<A>(g), Conj<A>(static_cast<A>(o)));
}

// The gradient of one broadcast operand (the target): for each of its elements, the sum over
// the dimensions it was broadcast along of grad * conj(other), in the order that
// element_mul_reduce.h defines and the CUDA kernels follow (segments summed by 32 lanes or one
// running sum, then 32 interleaved running sums of the segment values, then a halving tree).
// The plan may have any number of dimensions here (the GPU's index maps take 8).
template <typename T>
class Reducer {
 public:
  using A = Acc<T>;

  Reducer(const BroadcastPlan& plan, const std::vector<int64_t>& target_strides,
          const std::vector<int64_t>& other_strides, const T* g, const T* other, T* target)
      : dims_(plan.dims), other_strides_(other_strides), g_(g), other_(other), target_(target) {
    const int rank = static_cast<int>(dims_.size());
    g_strides_.resize(dims_.size());
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      g_strides_[d] = stride;
      stride *= dims_[d];
    }
    for (int d = 0; d < rank; ++d) (target_strides[d] != 0 ? kept_ : reduced_).push_back(d);
    const mul_grad::GeometryCounts c = mul_grad::CountGeometry(dims_, target_strides);
    targets_ = c.targets;
    terms_ = c.terms;
    segments_ = c.segments;
    lane_order_ = c.lane_order;
    segment_ = lane_order_ ? mul_grad::kLaneSegment : mul_grad::kRowSegment;
    inner_ = dims_[rank - 1];
    inner_other_ = other_strides_[rank - 1];
  }

  int64_t terms() const { return terms_; }

  void Run(const Parallel& parallel) const {
    if (targets_ == 0) return;
    if (terms_ == 0) {  // broadcast along a size-0 dimension: empty sums, +0
      std::fill(target_, target_ + targets_, static_cast<T>(A(0)));
      return;
    }
    // Few targets with long sums: the segments are the parallel work (their values kept, then
    // combined per target), so that the gradient of x * scalar is not one thread's job. Either
    // way each value is computed by the same operations: the same bits.
    if (segments_ >= 2 && targets_ < 256) {
      RunBySegments(parallel);
    } else {
      RunByTargets(parallel);
    }
  }

 private:
  static constexpr int kLanes = mul_grad::kLanes;
  // Row order sums up to this many neighbouring targets at once (one vector loop per row, long
  // enough that the rows are read as streams).
  static constexpr int64_t kRun = 4096;

  // Offsets of target t in grad and in the other operand.
  void Base(int64_t t, int64_t* gb, int64_t* ob) const {
    int64_t go = 0, oo = 0;
    for (int k = static_cast<int>(kept_.size()) - 1; k >= 0; --k) {
      const int d = kept_[k];
      const int64_t i = t % dims_[d];
      t /= dims_[d];
      go += i * g_strides_[d];
      oo += i * other_strides_[d];
    }
    *gb = go;
    *ob = oo;
  }

  // The targets that row order sums together from t: neighbours along the innermost (kept)
  // dimension, whose offsets advance by 1 in grad and by inner_other_ in the other operand.
  int64_t RunFrom(int64_t t, int64_t end) const {
    if (lane_order_) return 1;
    return std::min({inner_ - t % inner_, end - t, kRun});
  }

  // Row order: v[k] = segment s's sum for the `run` targets from offsets (gb, ob).
  // idx: scratch for the odometer (as many entries as reduced dimensions).
  // v is scratch of the caller's, never an input: restrict lets the row loops vectorise.
  void RowSegment(int64_t gb, int64_t ob, int64_t run, int64_t s, A* __restrict v,
                  int64_t* idx) const {
    std::fill(v, v + run, A(0));
    const int64_t first = s * segment_;
    const int64_t count = std::min(segment_, terms_ - first);
    // The reduced dimensions' odometer, started at `first`.
    const size_t nr = reduced_.size();
    int64_t go = gb, oo = ob, rem = first;
    for (size_t k = nr; k-- > 0;) {
      const int d = reduced_[k];
      idx[k] = rem % dims_[d];
      rem /= dims_[d];
      go += idx[k] * g_strides_[d];
      oo += idx[k] * other_strides_[d];
    }
    const int64_t so = inner_other_;
    for (int64_t n = 0; n < count; ++n) {
      const T* __restrict gp = g_ + go;
      const T* __restrict op = other_ + oo;
      if (so == 1) {
        for (int64_t k = 0; k < run; ++k) v[k] = Add<A>(v[k], TermOf<A>(gp[k], op[k]));
      } else if (so == 0) {
        const T o = *op;
        for (int64_t k = 0; k < run; ++k) v[k] = Add<A>(v[k], TermOf<A>(gp[k], o));
      } else {
        for (int64_t k = 0; k < run; ++k) v[k] = Add<A>(v[k], TermOf<A>(gp[k], op[k * so]));
      }
      for (size_t k = nr; k-- > 0;) {
        const int d = reduced_[k];
        go += g_strides_[d];
        oo += other_strides_[d];
        if (++idx[k] < dims_[d]) break;
        idx[k] = 0;
        go -= dims_[d] * g_strides_[d];
        oo -= dims_[d] * other_strides_[d];
      }
    }
  }

  // Lane order: segment s's value for the target at offsets (gb, ob). Term r goes to lane
  // r % 32 (segments start at multiples of 32); runs along the innermost (reduced) dimension are
  // contiguous, and whole rounds of 32 terms are one vector loop over the lanes.
  A LaneSegment(int64_t gb, int64_t ob, int64_t s, int64_t* idx) const {
    const int64_t first = s * segment_;
    const int64_t count = std::min(segment_, terms_ - first);
    const int64_t end = first + count;
    const int64_t so = inner_other_;
    const size_t nw = reduced_.size() - 1;
    if (nw == 0) {
      // One reduced dimension (the innermost): the segment is contiguous, and starts at lane 0.
      return LaneContiguous(g_ + gb + first, other_ + ob + first * so, so, count);
    }
    A lanes[kLanes];
    std::fill(lanes, lanes + kLanes, A(0));
    // Odometer over the reduced dimensions but the innermost; c: index along the innermost.
    int64_t go = gb, oo = ob;
    int64_t c = first % inner_, rem = first / inner_;
    for (size_t k = nw; k-- > 0;) {
      const int d = reduced_[k];
      idx[k] = rem % dims_[d];
      rem /= dims_[d];
      go += idx[k] * g_strides_[d];
      oo += idx[k] * other_strides_[d];
    }
    int64_t r = first;
    while (r < end) {
      const int64_t n = std::min(inner_ - c, end - r);
      const T* gp = g_ + go + c;
      const T* op = other_ + oo + c * so;
      int lane = static_cast<int>(r % kLanes);
      int64_t k = 0;
      for (; k < n && lane != 0; ++k, lane = (lane + 1) % kLanes) {
        lanes[lane] = Add<A>(lanes[lane], TermOf<A>(gp[k], op[k * so]));
      }
      if (so == 1) {
        for (; k + kLanes <= n; k += kLanes) {
          for (int j = 0; j < kLanes; ++j) {
            lanes[j] = Add<A>(lanes[j], TermOf<A>(gp[k + j], op[k + j]));
          }
        }
      } else {
        for (; k + kLanes <= n; k += kLanes) {
          for (int j = 0; j < kLanes; ++j) {
            lanes[j] = Add<A>(lanes[j], TermOf<A>(gp[k + j], op[(k + j) * so]));
          }
        }
      }
      for (; k < n; ++k, ++lane) lanes[lane] = Add<A>(lanes[lane], TermOf<A>(gp[k], op[k * so]));
      r += n;
      c = 0;
      if (r == end) break;
      for (size_t q = nw; q-- > 0;) {
        const int d = reduced_[q];
        go += g_strides_[d];
        oo += other_strides_[d];
        if (++idx[q] < dims_[d]) break;
        idx[q] = 0;
        go -= dims_[d] * g_strides_[d];
        oo -= dims_[d] * other_strides_[d];
      }
    }
    return TreeOfLanes(lanes, count);
  }

  // Tree32 of lanes whose first `count` only may be non-zero, without the additions of empty
  // lanes (+0 to a sum that is never -0: no change), which a short sum (over a [N, 2] operand's
  // 2 columns, say) would spend most of its time on. Lanes past `count` are not read.
  static A TreeOfLanes(A* lanes, int64_t count) {
    int64_t n = std::min<int64_t>(count, kLanes);  // lanes [0, n) may be non-zero
    for (int h = kLanes / 2; h >= 1; h /= 2) {
      if (h >= n) continue;
      for (int64_t j = 0; j < n - h; ++j) lanes[j] = Add<A>(lanes[j], lanes[j + h]);
      n = h;
    }
    return lanes[0];
  }

  // Lane order over `count` contiguous terms (gp[k], op[k * so]) from lane 0: term k to lane
  // k % 32, each lane summed from +0, then the tree.
  static A LaneContiguous(const T* gp, const T* op, int64_t so, int64_t count) {
    A lanes[kLanes];
    if (count < kLanes) {
      for (int64_t j = 0; j < count; ++j) lanes[j] = Add<A>(A(0), TermOf<A>(gp[j], op[j * so]));
      return TreeOfLanes(lanes, count);
    }
    std::fill(lanes, lanes + kLanes, A(0));
    int64_t k = 0;
    if (so == 1) {
      for (; k + kLanes <= count; k += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          lanes[j] = Add<A>(lanes[j], TermOf<A>(gp[k + j], op[k + j]));
        }
      }
    }
    for (int j = 0; k < count; ++k, j = (j + 1) % kLanes) {
      lanes[j] = Add<A>(lanes[j], TermOf<A>(gp[k], op[k * so]));
    }
    return TreeOfLanes(lanes, count);
  }

  // Segment s's values for the `run` targets from t (run is 1 in lane order).
  void Segment(int64_t t, int64_t run, int64_t s, A* v, int64_t* idx) const {
    int64_t gb, ob;
    Base(t, &gb, &ob);
    if (lane_order_) {
      v[0] = LaneSegment(gb, ob, s, idx);
    } else {
      RowSegment(gb, ob, run, s, v, idx);
    }
  }

  // Lane order, targets [begin, end): walked with an odometer over the kept dimensions.
  void LaneTargets(int64_t begin, int64_t end) const {
    std::vector<int64_t> idx(reduced_.size()), kidx(kept_.size());
    int64_t gb = 0, ob = 0, rem = begin;
    for (size_t k = kept_.size(); k-- > 0;) {
      const int d = kept_[k];
      kidx[k] = rem % dims_[d];
      rem /= dims_[d];
      gb += kidx[k] * g_strides_[d];
      ob += kidx[k] * other_strides_[d];
    }
    for (int64_t t = begin; t < end; ++t) {
      if (segments_ == 1) {
        // u_0 = 0 + v_0 = v_0 (never -0), and the tree adds +0s: v_0 is the result.
        target_[t] = static_cast<T>(LaneSegment(gb, ob, 0, idx.data()));
      } else {
        A u[kLanes];
        std::fill(u, u + kLanes, A(0));
        for (int64_t s = 0; s < segments_; ++s) {
          u[s % kLanes] = Add<A>(u[s % kLanes], LaneSegment(gb, ob, s, idx.data()));
        }
        target_[t] = static_cast<T>(mul_grad::Tree32(u));
      }
      for (size_t k = kept_.size(); k-- > 0;) {
        const int d = kept_[k];
        gb += g_strides_[d];
        ob += other_strides_[d];
        if (++kidx[k] < dims_[d]) break;
        kidx[k] = 0;
        gb -= dims_[d] * g_strides_[d];
        ob -= dims_[d] * other_strides_[d];
      }
    }
  }

  void RunByTargets(const Parallel& parallel) const {
    const double cost = static_cast<double>(terms_) * 3.0;
    if (lane_order_) {
      parallel.For(targets_, cost, [&](int64_t begin, int64_t end) { LaneTargets(begin, end); });
      return;
    }
    parallel.For(targets_, cost, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> idx(reduced_.size());
      std::vector<A> v(static_cast<size_t>(std::min(kRun, inner_)));
      std::vector<A> u(segments_ > 1 ? kLanes * v.size() : 0);
      for (int64_t t = begin; t < end;) {
        const int64_t run = RunFrom(t, end);
        if (segments_ == 1) {
          // u_0 = 0 + v_0 = v_0 (never -0), and the tree adds +0s: v_0 is the result.
          Segment(t, run, 0, v.data(), idx.data());
          for (int64_t k = 0; k < run; ++k) target_[t + k] = static_cast<T>(v[k]);
        } else {
          std::fill(u.begin(), u.end(), A(0));
          for (int64_t s = 0; s < segments_; ++s) {
            Segment(t, run, s, v.data(), idx.data());
            A* us = &u[(s % kLanes) * run];
            for (int64_t k = 0; k < run; ++k) us[k] = Add<A>(us[k], v[k]);
          }
          // Tree32 for the `run` targets at once: row j of u holds their u_j.
          for (int h = kLanes / 2; h >= 1; h /= 2) {
            for (int j = 0; j < h; ++j) {
              A* uj = &u[j * run];
              const A* ujh = &u[(j + h) * run];
              for (int64_t k = 0; k < run; ++k) uj[k] = Add<A>(uj[k], ujh[k]);
            }
          }
          for (int64_t k = 0; k < run; ++k) target_[t + k] = static_cast<T>(u[k]);
        }
        t += run;
      }
    });
  }

  void RunBySegments(const Parallel& parallel) const {
    // values[s * T + t]: segment s's value for target t.
    std::vector<A> values(static_cast<size_t>(segments_ * targets_));
    const double cost = static_cast<double>(segment_ * targets_) * 3.0;
    parallel.For(segments_, cost, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> idx(reduced_.size());
      for (int64_t s = begin; s < end; ++s) {
        for (int64_t t = 0; t < targets_;) {
          const int64_t run = RunFrom(t, targets_);
          Segment(t, run, s, &values[s * targets_ + t], idx.data());
          t += run;
        }
      }
    });
    // Then per target: u_j = the values of segments j, j + 32, ... summed from +0, and Tree32.
    for (int64_t t = 0; t < targets_; ++t) {
      A u[kLanes];
      std::fill(u, u + kLanes, A(0));
      for (int64_t s = 0; s < segments_; ++s) {
        u[s % kLanes] = Add<A>(u[s % kLanes], values[s * targets_ + t]);
      }
      target_[t] = static_cast<T>(mul_grad::Tree32(u));
    }
  }

  std::vector<int64_t> dims_, g_strides_;
  const std::vector<int64_t>& other_strides_;
  std::vector<int> kept_, reduced_;
  const T* g_;
  const T* other_;
  T* target_;
  int64_t targets_ = 0, terms_ = 0, segments_ = 0, segment_ = 0, inner_ = 1, inner_other_ = 0;
  bool lane_order_ = false;
};

}  // namespace

template <typename T>
void ElementMulBackward(const BroadcastPlan& plan, const T* grad, const T* a, const T* b, T* grad_a,
                        T* grad_b, const Parallel& parallel) {
  // grad * conj(b) and conj(a) * grad (TensorFlow's _MulGrad): the same products for real T.
  auto grad_times_conj = [](T g, T y) { return Mul<T>(g, Conj<T>(y)); };
  auto conj_times_grad = [](T x, T g) { return Mul<T>(Conj<T>(x), g); };
  // An operand with nothing to sum (every dimension it was broadcast along has size 1, such as
  // both operands of a scalar product) gets one product per element, as TensorFlow's gradient
  // does: an element-wise multiply with the other operand read through its broadcast strides.
  // (A sum 0 + x would turn a product of -0 into +0.) The rest is a reduction.
  const auto& g_strides = plan.out_strides;
  if (grad_a != nullptr) {
    Reducer<T> reducer(plan, plan.a_strides, plan.b_strides, grad, b, grad_a);
    if (reducer.terms() == 1) {
      if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        MulBf16(plan.dims, g_strides, plan.b_strides, grad, b, grad_a, parallel);
      } else {
        BroadcastApply(plan.dims, g_strides, plan.b_strides, grad, b, grad_a, grad_times_conj,
                       parallel);
      }
    } else {
      reducer.Run(parallel);
    }
  }
  if (grad_b != nullptr) {
    Reducer<T> reducer(plan, plan.b_strides, plan.a_strides, grad, a, grad_b);
    if (reducer.terms() == 1) {
      if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
        MulBf16(plan.dims, plan.a_strides, g_strides, a, grad, grad_b, parallel);
      } else {
        BroadcastApply(plan.dims, plan.a_strides, g_strides, a, grad, grad_b, conj_times_grad,
                       parallel);
      }
    } else {
      reducer.Run(parallel);
    }
  }
}

#define OPFORGE_INSTANTIATE_FORWARD(T, ...) \
  template void ElementMulForward<T>(const BroadcastPlan&, const T*, const T*, T*, const Parallel&);
OPFORGE_ELEMENT_MUL_TYPES(OPFORGE_INSTANTIATE_FORWARD)
#undef OPFORGE_INSTANTIATE_FORWARD
#define OPFORGE_INSTANTIATE_BACKWARD(T, ...)                                                      \
  template void ElementMulBackward<T>(const BroadcastPlan&, const T*, const T*, const T*, T*, T*, \
                                      const Parallel&);
OPFORGE_ELEMENT_MUL_GRAD_TYPES(OPFORGE_INSTANTIATE_BACKWARD)
#undef OPFORGE_INSTANTIATE_BACKWARD

}  // namespace opforge
