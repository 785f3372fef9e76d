// The TensorFlow side of the core's interfaces: the intra-op thread pool behind
// opforge::Parallel, core Status to TensorFlow Status, shapes, huge-page advice and CUDA
// streams. A binding (cc/ops/<op>/<op>_tf.cc) writes no OpKernel of its own: it writes a small
// op struct and registers it with common/tf_kernel.h, which has the one Compute skeleton (see
// the example there) and uses these. Shape functions use ToTfStatus for core errors.
#ifndef OPFORGE_COMMON_TF_GLUE_H_
#define OPFORGE_COMMON_TF_GLUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/op_signature.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/tf_pch.h"

namespace opforge {

// opforge::Parallel over the op's intra-op thread pool (respects tf.config.threading).
class TfParallel final : public Parallel {
 public:
  explicit TfParallel(tensorflow::OpKernelContext* context) : context_(context) {}
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override;

 private:
  tensorflow::OpKernelContext* context_;
};

inline absl::Status ToTfStatus(const Status& status) {
  if (status.ok()) return absl::OkStatus();
  if (status.code() == Status::Code::kInternal) return absl::InternalError(status.message());
  return absl::InvalidArgumentError(status.message());
}

// Runs a core call and, on failure, sets its error on the context (InvalidArgument for bad
// input, Internal for a failed CUDA launch) and returns.
#define OPFORGE_OP_REQUIRES_OK(context, expr)               \
  do {                                                      \
    ::opforge::Status _opf_s = (expr);                      \
    OP_REQUIRES_OK(context, ::opforge::ToTfStatus(_opf_s)); \
  } while (0)

inline std::vector<int64_t> Dims(const tensorflow::TensorShape& shape) {
  std::vector<int64_t> dims(static_cast<size_t>(shape.dims()));
  for (int i = 0; i < shape.dims(); ++i) dims[static_cast<size_t>(i)] = shape.dim_size(i);
  return dims;
}

tensorflow::TensorShape ToTensorShape(const std::vector<int64_t>& dims);

// The values of an int32 or int64 tensor in host memory, flattened (empty for other dtypes).
std::vector<int64_t> IntValues(const tensorflow::Tensor& tensor);

// REGISTER_OP's builder holding an op struct's signature (common/op_signature.h): its name, and
// an .Input, .Output and .Attr for each item, in order. OPFORGE_REGISTER_OP uses it.
tensorflow::register_op::OpDefBuilderWrapper OpDefBuilderOf(const OpSignature& signature);

#if GOOGLE_CUDA
// The CUDA stream of the op's context, as the void* the core's .cu entry points take.
void* GpuStream(tensorflow::OpKernelContext* context);
#endif

}  // namespace opforge

// REGISTER_OP(OPSTRUCT::kSignature.name) with the signature's inputs, outputs and attrs: the
// binding chains the rest (the shape function, the doc, SetIsStateful):
//   OPFORGE_REGISTER_OP(BiasLeakyReluOp).SetShapeFn(Shape).Doc("...");
#define OPFORGE_REGISTER_OP_CONCAT_(a, b) a##b
#define OPFORGE_REGISTER_OP_NAME_(a, b) OPFORGE_REGISTER_OP_CONCAT_(a, b)
#define OPFORGE_REGISTER_OP(OPSTRUCT)                                                        \
  [[maybe_unused]] static ::tensorflow::InitOnStartupMarker const OPFORGE_REGISTER_OP_NAME_( \
      opforge_register_op_, __COUNTER__) = ::tensorflow::InitOnStartupMarker{}               \
                                           << ::opforge::OpDefBuilderOf(OPSTRUCT::kSignature)

#endif  // OPFORGE_COMMON_TF_GLUE_H_
