#include "common/broadcast.h"

#include <limits>
#include <sstream>

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
      s << op << ": " << a_name << " and " << b_name << " must have broadcast-compatible shapes, got "
        << ShapeString(a) << " and " << ShapeString(b) << " (dimension "
        << static_cast<int64_t>(d) - static_cast<int64_t>(rank) << " is " << pa[d] << " vs "
        << pb[d] << ")";
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
  plan->out_shape = out;
  plan->out_size = size;
  plan->same_shape = (a == b);

  // Collapse: drop output dimensions of size 1, merge neighbours with the same broadcast pattern.
  // pattern bit 0: a is broadcast along the dimension; bit 1: b is.
  std::vector<int64_t> dims;
  std::vector<int> pattern;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    const int p = (pa[d] == 1 ? 1 : 0) | (pb[d] == 1 ? 2 : 0);
    if (!dims.empty() && pattern.back() == p) {
      dims.back() *= out[d];
    } else {
      dims.push_back(out[d]);
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
