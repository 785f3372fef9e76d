// Helpers for the CUDA kernel tests (<op>_cuda_test.cc): skipping without a device, CUDA error
// assertions, device buffers and copies. These tests are compiled by the host compiler and
// linked against the CUDA kernels library and the CUDA runtime; the host-only helpers come from
// common/test_util.h, and DTypeOf<T>::value (the DType of an element type) from common/dtype.h.
// Test code only; header-only.
//
// Upload, Download and Sync assert (fatally) inside; call them as
// ASSERT_NO_FATAL_FAILURE(Upload(x, &dx)) so that a failure stops the test.
#ifndef OPFORGE_COMMON_CUDA_TEST_UTIL_H_
#define OPFORGE_COMMON_CUDA_TEST_UTIL_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/test_util.h"

// Skips the current test, saying "skipped: no CUDA device", when no CUDA device is usable.
#define OPFORGE_SKIP_WITHOUT_CUDA()              \
  do {                                           \
    if (!::opforge::test::HasCudaDevice()) {     \
      GTEST_SKIP() << "skipped: no CUDA device"; \
    }                                            \
  } while (0)

// Asserts that a CUDA runtime call returned cudaSuccess, printing the call and the error.
#define OPFORGE_ASSERT_CUDA(expr)                                                            \
  do {                                                                                       \
    const cudaError_t opforge_err = (expr);                                                  \
    ASSERT_EQ(opforge_err, cudaSuccess) << #expr << ": " << cudaGetErrorString(opforge_err); \
  } while (0)

namespace opforge {
namespace test {

inline bool HasCudaDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error
    return false;
  }
  return count > 0;
}

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  // Allocates `bytes`, freeing any earlier allocation (nothing for 0 bytes: get() is null).
  cudaError_t Allocate(size_t bytes) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    return bytes == 0 ? cudaSuccess : cudaMalloc(&ptr_, bytes);
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

// Allocates `dev` to the size of `host` and copies `host` into it.
template <typename T>
void Upload(const std::vector<T>& host, DeviceBuffer* dev) {
  OPFORGE_ASSERT_CUDA(dev->Allocate(host.size() * sizeof(T)));
  if (!host.empty()) {
    OPFORGE_ASSERT_CUDA(
        cudaMemcpy(dev->get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
}

// Copies host->size() elements from `dev` into `host`.
template <typename T>
void Download(const DeviceBuffer& dev, std::vector<T>* host) {
  if (!host->empty()) {
    OPFORGE_ASSERT_CUDA(
        cudaMemcpy(host->data(), dev.get(), host->size() * sizeof(T), cudaMemcpyDeviceToHost));
  }
}

// Checks for a failed launch, then waits for the device and checks the kernels' errors.
inline void Sync() {
  OPFORGE_ASSERT_CUDA(cudaGetLastError());
  OPFORGE_ASSERT_CUDA(cudaDeviceSynchronize());
}

// --- a non-default stream -----------------------------------------------------------------------
//
// TensorFlow runs an op's kernels on its own stream, created non-blocking: work on it is not
// ordered with the legacy default stream (stream 0, cudaMemcpy, cudaMemset). A test that hands
// the kernels such a stream, copies on it and waits for it alone (SyncStream) fails where a
// kernel or a copy escapes to another stream; one that passes nullptr and synchronises the
// device cannot.

// A stream created with cudaStreamNonBlocking, destroyed on scope exit.
class TestStream {
 public:
  TestStream() = default;
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  ~TestStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaError_t Create() { return cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Allocates `dev` to the size of `host` and copies `host` into it on `stream` (a copy from
// pageable memory is staged before the call returns, so `host` may change afterwards).
template <typename T>
void UploadOn(cudaStream_t stream, const std::vector<T>& host, DeviceBuffer* dev) {
  OPFORGE_ASSERT_CUDA(dev->Allocate(host.size() * sizeof(T)));
  if (!host.empty()) {
    OPFORGE_ASSERT_CUDA(cudaMemcpyAsync(dev->get(), host.data(), host.size() * sizeof(T),
                                        cudaMemcpyHostToDevice, stream));
  }
}

// Checks for a failed launch, then waits for `stream` alone and checks the kernels' errors.
inline void SyncStream(cudaStream_t stream) {
  OPFORGE_ASSERT_CUDA(cudaGetLastError());
  OPFORGE_ASSERT_CUDA(cudaStreamSynchronize(stream));
}

// Copies host->size() elements from `dev` into `host` on `stream`, after the work already on
// it, and waits for the copy.
template <typename T>
void DownloadOn(cudaStream_t stream, const DeviceBuffer& dev, std::vector<T>* host) {
  if (!host->empty()) {
    OPFORGE_ASSERT_CUDA(cudaMemcpyAsync(host->data(), dev.get(), host->size() * sizeof(T),
                                        cudaMemcpyDeviceToHost, stream));
  }
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream));
}

// Allocates `bytes` for a test that needs a lot of device memory: false (with the allocation
// error cleared, so that later checks do not see it) when the device cannot hold them; the
// caller then skips with a message.
inline bool TryAllocate(DeviceBuffer* dev, size_t bytes) {
  if (dev->Allocate(bytes) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_COMMON_CUDA_TEST_UTIL_H_
