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
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <thread>
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

// n values uniform in [lo, hi), rounded to T, each a hash of (seed, index), filled by all the
// host's threads: the large cases' inputs (2^31 elements in seconds, not minutes).
template <typename T>
std::vector<T> HashedUniform(int64_t n, uint64_t seed, double lo, double hi) {
  std::vector<T> v(static_cast<size_t>(n));
  const int threads =
      static_cast<int>(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&v, n, seed, lo, hi, t, threads] {
      for (int64_t i = t; i < n; i += threads) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i);  // splitmix64
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        const double u = static_cast<double>(z >> 11) * 0x1.0p-53;
        v[static_cast<size_t>(i)] = static_cast<T>(static_cast<float>(lo + (hi - lo) * u));
      }
    });
  }
  for (auto& th : pool) th.join();
  return v;
}

// Allocates `bytes` for a test that needs a lot of device memory: false (with the allocation
// error cleared, so that later checks do not see it) when the device cannot hold them; the
// caller then skips with a message.
inline bool TryAllocate(DeviceBuffer* dev, size_t bytes) {
  if (dev->Allocate(bytes) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

// Copies `host` into device memory at `dst` on `stream`: any address, such as one element into
// a buffer (a pointer that is not aligned to a vector, which takes the kernels' scalar path).
template <typename T>
void CopyToDeviceOn(cudaStream_t stream, const std::vector<T>& host, void* dst) {
  if (!host.empty()) {
    OPFORGE_ASSERT_CUDA(
        cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
  }
}

// Copies host->size() elements from device memory at `src` on `stream` and waits for them.
template <typename T>
void CopyFromDeviceOn(cudaStream_t stream, const void* src, std::vector<T>* host) {
  if (!host->empty()) {
    OPFORGE_ASSERT_CUDA(cudaMemcpyAsync(host->data(), src, host->size() * sizeof(T),
                                        cudaMemcpyDeviceToHost, stream));
  }
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream));
}

// The device's free memory in bytes (0 when the query fails), for tests that skip when a large
// case does not fit.
inline size_t FreeDeviceBytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return free;
}

// Declares `name`, a cudaStream_t of a TestStream created here (the test fails if it cannot be).
#define OPFORGE_TEST_STREAM(name)             \
  ::opforge::test::TestStream name##_owner;   \
  OPFORGE_ASSERT_CUDA(name##_owner.Create()); \
  const cudaStream_t name = name##_owner.get()

// The element types of the cases over 2^31 elements, which use 2-byte types to stay at 4 GiB a
// buffer: n elements whose bit patterns run through all 2^16 (i * multiplier, so neighbours
// differ) -- infinities, NaNs, signed zeros and subnormals included.
template <typename T>
std::vector<T> PatternVector(int64_t n, uint32_t multiplier) {
  static_assert(sizeof(T) == 2, "2-byte element types");
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] =
        FromBits<T>(static_cast<uint16_t>(static_cast<uint64_t>(i) * multiplier));
  }
  return v;
}

// Whether `bytes` of device memory are free with 256 MiB to spare; if not, *why says so (for
// GTEST_SKIP).
inline bool DeviceHasRoom(size_t bytes, std::string* why) {
  const size_t free = FreeDeviceBytes();
  if (free >= bytes + (size_t{256} << 20)) return true;
  *why = "skipped: needs " + std::to_string(bytes >> 20) + " MiB of free device memory, has " +
         std::to_string(free >> 20) + " MiB";
  return false;
}

// Allocates `bytes` in each of `buffers`, the device memory of a case over 2^31 elements: false,
// with *why saying so (for GTEST_SKIP), where the device has not the room or an allocation fails.
//   std::string why;
//   if (!test::AllocateLarge(bytes, {&dx, &dg}, &why)) GTEST_SKIP() << why;
inline bool AllocateLarge(size_t bytes, std::initializer_list<DeviceBuffer*> buffers,
                          std::string* why) {
  if (!DeviceHasRoom(buffers.size() * bytes, why)) return false;
  for (DeviceBuffer* buffer : buffers) {
    if (!TryAllocate(buffer, bytes)) {
      *why = "skipped: could not allocate " + std::to_string(buffers.size()) + " buffer(s) of " +
             std::to_string(bytes >> 20) + " MiB";
      return false;
    }
  }
  return true;
}

// A device copy placed `offset` elements into its buffer: 0 aligned (the kernels' vector path),
// 1 not (their scalar path).
template <typename T>
struct Placed {
  DeviceBuffer buffer;
  T* ptr = nullptr;
};

// Allocates `placed` with room for `offset` elements before a copy of `host`, and copies `host`
// there on `stream`.
template <typename T>
void PlaceOn(cudaStream_t stream, const std::vector<T>& host, int offset, Placed<T>* placed) {
  OPFORGE_ASSERT_CUDA(placed->buffer.Allocate((host.size() + offset) * sizeof(T)));
  placed->ptr = static_cast<T*>(placed->buffer.get()) + offset;
  ASSERT_NO_FATAL_FAILURE(CopyToDeviceOn(stream, host, placed->ptr));
}

}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_COMMON_CUDA_TEST_UTIL_H_
