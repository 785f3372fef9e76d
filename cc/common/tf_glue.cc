#include "common/tf_glue.h"

#include <algorithm>
#include <cmath>

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

#if GOOGLE_CUDA
void* GpuStream(tensorflow::OpKernelContext* context) {
  return context->op_device_context()->stream()->platform_specific_handle().stream;
}
#endif

}  // namespace opforge
