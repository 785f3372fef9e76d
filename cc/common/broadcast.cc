#include "common/broadcast.h"

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

namespace opforge {

Status MakeBroadcastPlan(const char* op, const char* a_name, const char* b_name,
                         const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                         BroadcastPlan* plan) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> pa(rank, 1), pb(rank, 1), out(rank, 1);
  std::copy(a.begin(), a.end(), pa.begin() + static_cast<std::ptrdiff_t>(rank - a.size()));
  std::copy(b.begin(), b.end(), pb.begin() + static_cast<std::ptrdiff_t>(rank - b.size()));
  int64_t size = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (pa[d] < 0 || pb[d] < 0) {
      return InvalidArgument(op, pa[d] < 0 ? a_name : b_name, "a shape of non-negative sizes",
                             ShapeString(pa[d] < 0 ? a : b));
    }
    if (pa[d] != pb[d] && pa[d] != 1 && pb[d] != 1) {
      std::ostringstream s;
      s << op << ": " << a_name << " and " << b_name
        << " must have broadcast-compatible shapes, got " << ShapeString(a) << " and "
        << ShapeString(b) << " (dimension " << static_cast<int64_t>(d) - static_cast<int64_t>(rank)
        << " is " << pa[d] << " vs " << pb[d] << ")";
      return Status::Invalid(s.str());
    }
    out[d] = pa[d] == 1 ? pb[d] : pa[d];
    if (out[d] != 0 && size > std::numeric_limits<int64_t>::max() / out[d]) {
      std::ostringstream s;
      s << op << ": the broadcast of " << a_name << " " << ShapeString(a) << " and " << b_name
        << " " << ShapeString(b) << " must have fewer than 2^63 elements";
      return Status::Invalid(s.str());
    }
    size *= out[d];
  }
  // Each operand must itself be a possible tensor. Only an empty output can hide one that is not,
  // such as [1, 2^40, 2^40] against [0, 1, 1]: its sizes do not all enter the output's count.
  if (size == 0) {
    for (const auto& [shape, name] : {std::make_pair(&a, a_name), std::make_pair(&b, b_name)}) {
      int64_t n = 1;
      for (int64_t d : *shape) {
        if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
          return InvalidArgument(op, name, "a shape with fewer than 2^63 elements",
                                 ShapeString(*shape));
        }
        n *= d;
      }
    }
  }
  plan->out_shape = out;
  plan->out_size = size;
  plan->same_shape = (a == b);

  // The sizes iterated over. An empty output has nothing to read; only an operand that still has
  // elements (broadcast along a zero-size dimension) gets work: zeros for its gradient. So every
  // dimension along which no such operand varies is iterated as size 0. Without this, the
  // products below (merged sizes, strides) of an empty output such as [0, 2^40, 2^40] against
  // [1, 2^40, 1] overflow int64, though the output size itself was checked.
  std::vector<int64_t> iter = out;
  if (size == 0) {
    const bool a_has = std::find(pa.begin(), pa.end(), 0) == pa.end();
    const bool b_has = std::find(pb.begin(), pb.end(), 0) == pb.end();
    for (size_t d = 0; d < rank; ++d) {
      if (!(a_has && pa[d] != 1) && !(b_has && pb[d] != 1)) iter[d] = 0;
    }
  }

  // Collapse: drop output dimensions of size 1, merge neighbours with the same broadcast pattern.
  // pattern bit 0: a is broadcast along the dimension; bit 1: b is.
  std::vector<int64_t> dims;
  std::vector<int> pattern;
  for (size_t d = 0; d < rank; ++d) {
    if (iter[d] == 1) continue;
    const int p = (pa[d] == 1 ? 1 : 0) | (pb[d] == 1 ? 2 : 0);
    if (!dims.empty() && pattern.back() == p) {
      dims.back() *= iter[d];
    } else {
      dims.push_back(iter[d]);
      pattern.push_back(p);
    }
  }
  if (dims.empty()) {
    dims.push_back(1);
    pattern.push_back(3);
  }
  const size_t n = dims.size();
  plan->dims = dims;
  plan->a_strides.assign(n, 0);
  plan->b_strides.assign(n, 0);
  plan->out_strides.assign(n, 0);
  int64_t sa = 1, sb = 1, so = 1;
  for (size_t i = n; i-- > 0;) {
    if (!(pattern[i] & 1)) {
      plan->a_strides[i] = sa;
      sa *= dims[i];
    }
    if (!(pattern[i] & 2)) {
      plan->b_strides[i] = sb;
      sb *= dims[i];
    }
    plan->out_strides[i] = so;
    so *= dims[i];
  }
  return Status::Ok();
}

}  // namespace opforge
