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

// TensorFlow's float attrs are float32, so a value written in Python (momentum=0.99, ref=1e-3)
// arrives rounded, ~1e-8 off the float64 a reference library computes with, and an iterative
// kernel compounds the difference (Griffin-Lim: 1e-5 relative after 32 iterations, against
// 1e-12 from FFT rounding). The shortest decimal that rounds to the same float32 (what Python
// prints for numpy.float32(v)) is the literal the caller wrote whenever it had at most 9
// significant digits: this returns it as a double (non-finite values unchanged).
double FloatAttrAsWritten(float value);

// Asks the OS to back a large, freshly allocated CPU output with transparent huge pages before
// the kernel first writes it. TensorFlow's CPU allocator takes big buffers from malloc, which
// maps buffers above 32 MiB freshly on every call (smaller ones are recycled and stay mapped),
// so every call pays one page fault per 4 KiB on first touch; measured on the 2-core VM,
// first-touching 177 MB took ~140 ms with 4 KiB pages and ~34 ms with huge pages, more than
// the resize kernel itself. Only the 2 MiB-aligned interior of buffers of 32 MiB or more is
// advised (recycled smaller buffers gain nothing); values are unaffected, and it is a no-op
// where THP is off or not available.
void AdviseHugePages(void* data, size_t bytes);

// Device tags of TfKernel (common/tf_kernel.h): one op struct, specialised by where it runs.
struct CpuTag {};
struct GpuTag {};

#if GOOGLE_CUDA
// The CUDA stream of the op's context, as the void* the core's .cu entry points take.
void* GpuStream(tensorflow::OpKernelContext* context);
#endif

}  // namespace opforge

#endif  // OPFORGE_COMMON_TF_GLUE_H_
