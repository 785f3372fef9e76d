#include "common/tf_glue.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>

#include "common/tf_shape.h"
#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"
#if GOOGLE_CUDA
#include "tensorflow/core/platform/stream_executor.h"
#endif

namespace opforge {

// --- TensorFlow versions ------------------------------------------------------------------------
// opforge builds against TensorFlow 2.16 to 2.21 (`make compat-check`). Every difference between
// their C++ APIs that the bindings meet is handled in this section, by what the headers declare
// rather than by version number where a feature test can tell (so a patch release that
// back-ports a change needs nothing here).
namespace {

// ThreadPool::SchedulingParams::Adaptive(cost) (TensorFlow 2.18 and later, where the
// three-argument constructor is deprecated); before, only that constructor.
template <typename Params, typename = void>
struct HasAdaptiveFactory : std::false_type {};
template <typename Params>
struct HasAdaptiveFactory<Params, std::void_t<decltype(Params::Adaptive(int64_t{1}))>>
    : std::true_type {};

template <typename Pool>
typename Pool::SchedulingParams AdaptiveScheduling(int64_t cost) {
  using Params = typename Pool::SchedulingParams;
  if constexpr (HasAdaptiveFactory<Params>::value) {
    return Params::Adaptive(cost);
  } else {
    return Params(Pool::SchedulingStrategy::kAdaptive, cost, std::nullopt);
  }
}

}  // namespace

void TfParallel::For(int64_t total, double cost_per_unit, const Fn& fn) const {
  if (total <= 0) return;
  auto* workers = context_->device()->tensorflow_cpu_worker_threads()->workers;
  const int64_t cost = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cost_per_unit)));
  using Pool = std::remove_pointer_t<decltype(workers)>;
  workers->ParallelFor(total, AdaptiveScheduling<Pool>(cost), fn);
}

tensorflow::TensorShape ToTensorShape(const std::vector<int64_t>& dims) {
  tensorflow::TensorShape shape;
  for (int64_t d : dims) shape.AddDim(d);
  return shape;
}

std::vector<int64_t> IntValues(const tensorflow::Tensor& tensor) {
  std::vector<int64_t> values(static_cast<size_t>(tensor.NumElements()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (tensor.dtype() == tensorflow::DT_INT32) {
      values[i] = tensor.flat<int32_t>()(static_cast<int64_t>(i));
    } else if (tensor.dtype() == tensorflow::DT_INT64) {
      values[i] = tensor.flat<int64_t>()(static_cast<int64_t>(i));
    } else {
      return {};
    }
  }
  return values;
}

#if GOOGLE_CUDA
void* GpuStream(tensorflow::OpKernelContext* context) {
  return context->op_device_context()->stream()->platform_specific_handle().stream;
}
#endif

// --- ShapeFn (common/tf_shape.h) ----------------------------------------------------------------

absl::Status ShapeFn::Invalid(const char* argument, const std::string& expected,
                              const std::string& given) const {
  return ToTfStatus(InvalidArgument(op_, argument, expected, given));
}

std::string ShapeFn::Text(DimensionHandle d) const {
  return c_->ValueKnown(d) ? std::to_string(c_->Value(d)) : "?";
}

std::string ShapeFn::Text(ShapeHandle s) const {
  if (!c_->RankKnown(s)) return "an unknown shape";
  std::string text = "[";
  for (int i = 0; i < c_->Rank(s); ++i) text += (i ? ", " : "") + Text(c_->Dim(s, i));
  return text + "]";
}

bool ShapeFn::Known(std::initializer_list<ShapeHandle> shapes) const {
  for (ShapeHandle s : shapes) {
    if (!c_->FullyDefined(s)) return false;
  }
  return true;
}

std::vector<int64_t> ShapeFn::Dims(ShapeHandle s) const {
  std::vector<int64_t> dims;
  for (int i = 0; i < c_->Rank(s); ++i) dims.push_back(c_->Value(c_->Dim(s, i)));
  return dims;
}

ShapeFn::ShapeHandle ShapeFn::Make(const std::vector<int64_t>& dims) const {
  std::vector<DimensionHandle> handles;
  for (int64_t d : dims) handles.push_back(c_->MakeDim(d));
  return c_->MakeShape(handles);
}

absl::Status ShapeFn::Rank(int index, const char* argument, int rank, ShapeHandle* out,
                           const std::string& expected) const {
  const ShapeHandle s = c_->input(index);
  if (c_->RankKnown(s) && c_->Rank(s) != rank) {
    return Invalid(argument,
                   expected.empty() ? "a " + std::to_string(rank) + "-D tensor" : expected,
                   "rank " + std::to_string(c_->Rank(s)) + ", shape " + Text(s));
  }
  return c_->WithRank(s, rank, out);
}

absl::Status ShapeFn::RankAtLeast(int index, const char* argument, int rank, ShapeHandle* out,
                                  const std::string& expected) const {
  const ShapeHandle s = c_->input(index);
  if (c_->RankKnown(s) && c_->Rank(s) < rank) {
    return Invalid(argument,
                   expected.empty() ? "at least " + std::to_string(rank) + "-D" : expected,
                   "rank " + std::to_string(c_->Rank(s)) + ", shape " + Text(s));
  }
  return c_->WithRankAtLeast(s, rank, out);
}

absl::Status ShapeFn::MergeDim(DimensionHandle a, DimensionHandle b, const char* argument,
                               const std::string& expected, const std::string& given,
                               DimensionHandle* out) const {
  if (!c_->Merge(a, b, out).ok()) return Invalid(argument, expected, given);
  return absl::OkStatus();
}

absl::Status ShapeFn::MergeInput(int index, const char* argument, ShapeHandle like,
                                 const std::string& expected, ShapeHandle* out) const {
  if (!c_->Merge(c_->input(index), like, out).ok()) {
    return Invalid(argument, expected + " " + Text(like), Text(c_->input(index)));
  }
  return absl::OkStatus();
}

absl::Status ShapeFn::Broadcast(int a, const char* a_name, int b, const char* b_name,
                                ShapeHandle* out) const {
  const ShapeHandle sa = c_->input(a), sb = c_->input(b);
  if (!c_->RankKnown(sa) || !c_->RankKnown(sb)) {
    *out = c_->UnknownShape();
    return absl::OkStatus();
  }
  const int ra = c_->Rank(sa), rb = c_->Rank(sb), rank = std::max(ra, rb);
  std::vector<DimensionHandle> dims(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    const int ia = d - (rank - ra), ib = d - (rank - rb);
    const DimensionHandle da = ia >= 0 ? c_->Dim(sa, ia) : c_->MakeDim(1);
    const DimensionHandle db = ib >= 0 ? c_->Dim(sb, ib) : c_->MakeDim(1);
    const bool ka = c_->ValueKnown(da), kb = c_->ValueKnown(db);
    const int64_t va = ka ? c_->Value(da) : -1, vb = kb ? c_->Value(db) : -1;
    if (ka && kb && va != vb && va != 1 && vb != 1) {
      return absl::InvalidArgumentError(std::string(op_) + ": " + a_name + " and " + b_name +
                                        " must have broadcast-compatible shapes, got " + Text(sa) +
                                        " and " + Text(sb) + " (dimension " +
                                        std::to_string(d - rank) + " is " + std::to_string(va) +
                                        " vs " + std::to_string(vb) + ")");
    }
    if (ka && va == 1) {
      dims[static_cast<size_t>(d)] = db;
    } else if (kb && vb == 1) {
      dims[static_cast<size_t>(d)] = da;
    } else if (ka) {
      dims[static_cast<size_t>(d)] = da;  // vb is va or unknown (then it must be va or 1)
    } else if (kb) {
      dims[static_cast<size_t>(d)] = db;
    } else {
      dims[static_cast<size_t>(d)] = c_->UnknownDim();
    }
  }
  *out = c_->MakeShape(dims);
  return absl::OkStatus();
}

tensorflow::register_op::OpDefBuilderWrapper OpDefBuilderOf(const OpSignature& signature) {
  tensorflow::register_op::OpDefBuilderWrapper builder(signature.name);
  for (std::string_view spec : signature::Split(signature.inputs, ';')) {
    builder.Input(std::string(spec));
  }
  for (std::string_view spec : signature::Split(signature.outputs, ';')) {
    builder.Output(std::string(spec));
  }
  for (std::string_view spec : signature::Split(signature.attrs, ';')) {
    builder.Attr(std::string(spec));
  }
  return builder;
}

}  // namespace opforge
