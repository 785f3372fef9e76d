#include "common/tf_glue.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tensorflow/core/framework/device_base.h"
#include "tensorflow/core/platform/threadpool.h"
#if GOOGLE_CUDA
#include "tensorflow/core/platform/stream_executor.h"
#endif

namespace opforge {

void TfParallel::For(int64_t total, double cost_per_unit, const Fn& fn) const {
  if (total <= 0) return;
  auto* workers = context_->device()->tensorflow_cpu_worker_threads()->workers;
  const int64_t cost = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cost_per_unit)));
  workers->ParallelFor(total, tsl::thread::ThreadPool::SchedulingParams::Adaptive(cost), fn);
}

tensorflow::TensorShape ToTensorShape(const std::vector<int64_t>& dims) {
  tensorflow::TensorShape shape;
  for (int64_t d : dims) shape.AddDim(d);
  return shape;
}

void AdviseHugePages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes < 16 * kHuge) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
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

}  // namespace opforge
