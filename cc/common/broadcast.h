// CPU kernels for NumPy-broadcast binary element-wise ops over a BroadcastPlan, framework-free.
#ifndef OPFORGE_COMMON_BROADCAST_H_
#define OPFORGE_COMMON_BROADCAST_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/arith.h"
#include "common/broadcast_plan.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

// out[i] = f(x[.], y[.]) over the collapsed space `dims`, where x and y are read with the given
// strides and `out` is contiguous. Parallel over the output; each element written once.
template <typename T, typename F>
void BroadcastApply(const std::vector<int64_t>& dims, const std::vector<int64_t>& x_strides,
                    const std::vector<int64_t>& y_strides, const T* x, const T* y, T* out, F f,
                    const Parallel& parallel, double cost_per_element = kCostElementwise) {
  const int rank = static_cast<int>(dims.size());
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  parallel.For(total, cost_per_element, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(rank);
    int64_t xo = 0, yo = 0, rem = begin;
    for (int d = rank - 1; d >= 0; --d) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      xo += idx[d] * x_strides[d];
      yo += idx[d] * y_strides[d];
    }
    const int64_t inner = dims[rank - 1];
    const int64_t sx = x_strides[rank - 1], sy = y_strides[rank - 1];
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(inner - idx[rank - 1], end - pos);
      const T* xp = x + xo;
      const T* yp = y + yo;
      T* op = out + pos;
      // Plans give unit or zero strides only (see MakeBroadcastPlan): four loops the compiler
      // vectorises. Other strides (a direct caller's) take the general loop at the end.
      if (sx == 1 && sy == 1) {
        OPFORGE_IVDEP
        for (int64_t k = 0; k < n; ++k) op[k] = f(xp[k], yp[k]);
      } else if (sx == 1 && sy == 0) {
        const T yv = *yp;
        OPFORGE_IVDEP
        for (int64_t k = 0; k < n; ++k) op[k] = f(xp[k], yv);
      } else if (sx == 0 && sy == 1) {
        const T xv = *xp;
        OPFORGE_IVDEP
        for (int64_t k = 0; k < n; ++k) op[k] = f(xv, yp[k]);
      } else if (sx == 0 && sy == 0) {
        const T v = f(*xp, *yp);
        for (int64_t k = 0; k < n; ++k) op[k] = v;
      } else {
        for (int64_t k = 0; k < n; ++k) op[k] = f(xp[k * sx], yp[k * sy]);
      }
      pos += n;
      idx[rank - 1] += n;
      xo += n * sx;
      yo += n * sy;
      for (int d = rank - 1; d > 0 && idx[d] == dims[d]; --d) {
        idx[d] = 0;
        xo += x_strides[d - 1] - dims[d] * x_strides[d];
        yo += y_strides[d - 1] - dims[d] * y_strides[d];
        ++idx[d - 1];
      }
    }
  });
}

// target[t] = sum over the broadcast dimensions of the target of g[o] * conj(other[o']) (conj:
// the identity on real types; TensorFlow's gradient of a complex multiply), where the
// target is the operand with `target_strides` (0 on the dimensions it is broadcast along) and
// `other` is read with `other_strides`. `g` is contiguous over `dims`. This is the gradient of a
// broadcast multiply with respect to one operand. Each target element is summed by one thread in
// a fixed order (lexicographic over the reduced dimensions), so the result does not depend on the
// number of threads. Accumulates in Acc<T> (float for half and bfloat16).
template <typename T>
void BroadcastMulReduce(const std::vector<int64_t>& dims,
                        const std::vector<int64_t>& target_strides,
                        const std::vector<int64_t>& other_strides, const T* g, const T* other,
                        T* target, const Parallel& parallel) {
  using A = Acc<T>;
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> g_strides(rank);
  int64_t total = 1;
  for (int d = rank - 1; d >= 0; --d) {
    g_strides[d] = total;
    total *= dims[d];
  }
  // No early return on an empty g: a target whose broadcast dimension has size 0 still has
  // elements, and each of them is an empty sum, 0.
  // Split dimensions into kept (target varies along them) and reduced (target broadcast).
  std::vector<int> kept, reduced;
  int64_t target_size = 1, reduce_size = 1;
  for (int d = 0; d < rank; ++d) {
    if (target_strides[d] != 0) {
      kept.push_back(d);
      target_size *= dims[d];
    } else {
      reduced.push_back(d);
      reduce_size *= dims[d];
    }
  }
  const bool inner_kept = target_strides[rank - 1] != 0;
  // Reduced dimensions walked by the odometer below; when the innermost dimension is reduced it
  // is summed by a contiguous inner loop instead.
  std::vector<int> walk = reduced;
  int64_t inner_reduce = 1;
  if (!inner_kept) {
    inner_reduce = dims[rank - 1];
    walk.pop_back();
  }
  int64_t walk_size = 1;
  for (int d : walk) walk_size *= dims[d];
  const double cost = static_cast<double>(reduce_size) * 3.0;

  parallel.For(target_size, cost, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> widx(walk.size());
    std::vector<A> acc;
    int64_t t = begin;
    while (t < end) {
      // Offsets of target element t along the kept dimensions.
      int64_t rem = t, g_base = 0, o_base = 0;
      int64_t run = 1;  // how many consecutive target elements share this row (inner kept)
      for (int k = static_cast<int>(kept.size()) - 1; k >= 0; --k) {
        const int d = kept[k];
        const int64_t i = rem % dims[d];
        rem /= dims[d];
        g_base += i * g_strides[d];
        o_base += i * other_strides[d];
        if (inner_kept && d == rank - 1) run = std::min(dims[d] - i, end - t);
      }
      acc.assign(static_cast<size_t>(run), A(0));
      std::fill(widx.begin(), widx.end(), 0);
      int64_t g_off = g_base, o_off = o_base;
      for (int64_t w = 0; w < walk_size; ++w) {
        if (inner_kept) {
          const int64_t so = other_strides[rank - 1];
          for (int64_t k = 0; k < run; ++k) {
            acc[k] = Add<A>(acc[k], Mul<A>(static_cast<A>(g[g_off + k]),
                                           Conj<A>(static_cast<A>(other[o_off + k * so]))));
          }
        } else {
          A s = acc[0];
          const int64_t so = other_strides[rank - 1];
          for (int64_t k = 0; k < inner_reduce; ++k) {
            s = Add<A>(s, Mul<A>(static_cast<A>(g[g_off + k]),
                                 Conj<A>(static_cast<A>(other[o_off + k * so]))));
          }
          acc[0] = s;
        }
        // Advance the odometer over the walked reduced dimensions.
        for (int k = static_cast<int>(walk.size()) - 1; k >= 0; --k) {
          const int d = walk[k];
          ++widx[k];
          g_off += g_strides[d];
          o_off += other_strides[d];
          if (widx[k] < dims[d]) break;
          widx[k] = 0;
          g_off -= dims[d] * g_strides[d];
          o_off -= dims[d] * other_strides[d];
        }
      }
      for (int64_t k = 0; k < run; ++k) target[t + k] = static_cast<T>(acc[k]);
      t += run;
    }
  });
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_BROADCAST_H_
