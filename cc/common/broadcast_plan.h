// The broadcast plan of two shapes (NumPy rules), shared by CPU and CUDA code. Kept free of
// Eigen so that .cu files can include it.
//
// MakeBroadcastPlan checks two shapes, computes the broadcast output shape and a collapsed
// description of the iteration: dimensions of size 1 in the output are dropped and adjacent
// dimensions with the same broadcast pattern are merged, so that the innermost loop is as long
// as possible and has unit or zero strides, which the compiler vectorises.
#ifndef OPFORGE_COMMON_BROADCAST_PLAN_H_
#define OPFORGE_COMMON_BROADCAST_PLAN_H_

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace opforge {

struct BroadcastPlan {
  std::vector<int64_t> out_shape;  // the broadcast shape, full rank
  int64_t out_size = 0;            // number of output elements
  bool same_shape = false;         // a and b have identical shapes
  // Collapsed iteration space (never empty; {1} for a scalar result). Strides are in elements;
  // a stride of 0 marks a dimension along which that operand is broadcast. The output is
  // contiguous over `dims`. For an empty output, dimensions along which no operand that has
  // elements varies are iterated as size 0 (so no product of sizes can overflow int64).
  std::vector<int64_t> dims;
  std::vector<int64_t> a_strides;
  std::vector<int64_t> b_strides;
  std::vector<int64_t> out_strides;
};

// Fills `plan` for operands of shapes `a` and `b`. `op`, `a_name` and `b_name` name the op and
// its arguments in the error message.
Status MakeBroadcastPlan(const char* op, const char* a_name, const char* b_name,
                         const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                         BroadcastPlan* plan);

}  // namespace opforge

#endif  // OPFORGE_COMMON_BROADCAST_PLAN_H_
