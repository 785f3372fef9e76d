// Shape functions that report bad input as the kernels do: "<op>: <argument> must be <expected>,
// got <given>" (common/status.h). TensorFlow runs a shape function when a graph is built (inside
// tf.function, say) and its own helpers (WithRank, Merge) answer "Shape must be rank 4 but is
// rank 5 for '{{node ...}}'", naming no argument; the same call in eager mode reaches the kernel,
// whose message does. With these helpers both modes name the argument, what was expected and
// what was given. Unknown dimensions print as "?".
#ifndef OPFORGE_COMMON_TF_SHAPE_H_
#define OPFORGE_COMMON_TF_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tf_glue.h"

namespace opforge {

// The shape-inference names every binding's shape functions use.
namespace shape_inference = tensorflow::shape_inference;
using shape_inference::DimensionHandle;
using shape_inference::InferenceContext;
using shape_inference::ShapeHandle;

class ShapeFn {
 public:
  using InferenceContext = shape_inference::InferenceContext;
  using ShapeHandle = shape_inference::ShapeHandle;
  using DimensionHandle = shape_inference::DimensionHandle;

  ShapeFn(InferenceContext* c, const char* op) : c_(c), op_(op) {}

  InferenceContext* context() const { return c_; }
  const char* op() const { return op_; }

  // Input `index`, named `argument`, has rank `rank` (when its rank is known). `expected` says
  // what it holds ("4-D [batch, height, width, channels]"); by default "a <rank>-D tensor".
  absl::Status Rank(int index, const char* argument, int rank, ShapeHandle* out,
                    const std::string& expected = "") const;
  // The same with a rank of at least `rank`.
  absl::Status RankAtLeast(int index, const char* argument, int rank, ShapeHandle* out,
                           const std::string& expected = "") const;
  // Two dimensions that must agree; on a conflict, `argument` must be `expected`, got `given`.
  absl::Status MergeDim(DimensionHandle a, DimensionHandle b, const char* argument,
                        const std::string& expected, const std::string& given,
                        DimensionHandle* out) const;
  // Input `index` (named `argument`) must have the shape `like`, described by `expected`.
  absl::Status MergeInput(int index, const char* argument, ShapeHandle like,
                          const std::string& expected, ShapeHandle* out) const;
  // NumPy broadcasting of inputs `a` and `b`, named `a_name` and `b_name`, as the core's
  // MakeBroadcastPlan reports it. Unknown dimensions broadcast to unknown.
  absl::Status Broadcast(int a, const char* a_name, int b, const char* b_name,
                         ShapeHandle* out) const;

  absl::Status Invalid(const char* argument, const std::string& expected,
                       const std::string& given) const;

  // "[?, 3, 4]", or "an unknown shape".
  std::string Text(ShapeHandle s) const;
  std::string Text(DimensionHandle d) const;
  // Whether every dimension of every shape is known.
  bool Known(std::initializer_list<ShapeHandle> shapes) const;
  // The dimensions of a shape of known rank, -1 for each unknown one.
  std::vector<int64_t> Dims(ShapeHandle s) const;
  // A shape from core dimensions.
  ShapeHandle Make(const std::vector<int64_t>& dims) const;

 private:
  InferenceContext* c_;
  const char* op_;
};

}  // namespace opforge

#endif  // OPFORGE_COMMON_TF_SHAPE_H_
