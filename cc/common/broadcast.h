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
// Calls run(x + xo, y + yo, out + pos, n, sx, sy) for every run of n output elements along the
// last dimension (sx, sy: the operands' last strides), in parallel over the output.
template <typename T, typename Run>
void BroadcastRuns(const std::vector<int64_t>& dims, const std::vector<int64_t>& x_strides,
                   const std::vector<int64_t>& y_strides, const T* x, const T* y, T* out, Run run,
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
      run(x + xo, y + yo, out + pos, n, sx, sy);
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

template <typename T, typename F>
void BroadcastApply(const std::vector<int64_t>& dims, const std::vector<int64_t>& x_strides,
                    const std::vector<int64_t>& y_strides, const T* x, const T* y, T* out, F f,
                    const Parallel& parallel, double cost_per_element = kCostElementwise) {
  BroadcastRuns(
      dims, x_strides, y_strides, x, y, out,
      [f](const T* xp, const T* yp, T* op, int64_t n, int64_t sx, int64_t sy) {
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
      },
      parallel, cost_per_element);
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_BROADCAST_H_
