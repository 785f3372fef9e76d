// The SIMT runtime's own tests: small kernels whose results are known, and kernels with a
// planted bug, each of which the runtime must report with the kernel's name instead of hanging
// or giving a plausible answer.
#include "common/simt/simt.h"  // first: the kernels below are CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/cuda_util.cuh"

namespace opforge {
namespace simt {
namespace {

using test::DeviceBuffer;
using test::Download;
using test::Upload;

// --- kernels that are right -------------------------------------------------------------------

__global__ void AddKernel(int n, const float* a, const float* b, float* out) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// Each block sums its 256 values in shared memory, halving with a barrier between rounds.
__global__ void BlockSumKernel(const int* in, int* out) {
  __shared__ int s[256];
  const int t = threadIdx.x;
  s[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  for (int h = 128; h >= 1; h /= 2) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Per warp: the tree sum, a ballot of odd values, and shuffles of each kind.
__global__ void WarpKernel(const int* in, int* sum, unsigned* ballot, int* any_all, int* moved) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = t / 32;
  const int v = in[t];
  const int total = cuda::WarpTreeSum(v);
  if (lane == 0) sum[warp] = total;
  const unsigned b = __ballot_sync(0xffffffffu, v % 2 != 0);
  if (lane == 0) ballot[warp] = b;
  const int any = __any_sync(0xffffffffu, v > 1000);
  const int all = __all_sync(0xffffffffu, v >= 0);
  if (lane == 0) any_all[warp] = any * 2 + all;
  moved[4 * t + 0] = __shfl_sync(0xffffffffu, v, 3);
  moved[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, 1);
  moved[4 * t + 2] = __shfl_xor_sync(0xffffffffu, v, 5);
  moved[4 * t + 3] = __shfl_down_sync(0xffffffffu, v, 2, 8);
}

__global__ void SyncCountKernel(const int* in, int* out) {
  const int p = in[threadIdx.x];
  const int count = __syncthreads_count(p);
  const int all = __syncthreads_and(p);
  const int any = __syncthreads_or(p);
  if (threadIdx.x == 0) {
    out[0] = count;
    out[1] = all;
    out[2] = any;
  }
}

// Writes the 2-D and 3-D indices every thread sees.
__global__ void IndexKernel(int* out) {
  const int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const int threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + thread] = block * 1000 + thread;
}

__global__ void AtomicKernel(int* count, unsigned long long* first, int* bits, float* fsum) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(count, 1);
  atomicMin(first, static_cast<unsigned long long>(1000 - t));
  atomicOr(bits, 1 << (t % 31));
  atomicAdd(fsum, 0.5f);
}

// --- kernels with a planted bug -----------------------------------------------------------------

// Half the block skips the barrier.
__global__ void DivergentBarrierKernel(int* out) {
  if (threadIdx.x < 128) {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// Two barriers in the two branches of an if: on a GPU, undefined.
__global__ void TwoBarriersKernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// The last 16 lanes of every warp return before a full-mask shuffle.
__global__ void ShuffleAfterExitKernel(const int* in, int* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, in[threadIdx.x], 1);
}

// A shuffle that reads a lane outside its mask.
__global__ void ShuffleOutsideMaskKernel(const int* in, int* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, in[threadIdx.x], 1);
}

__global__ void WriteKernel(int n, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = i;  // planted: <= instead of <
}

__global__ void NestedKernel(int* out);
__global__ void InnerKernel(int* out) { out[0] = 1; }
__global__ void NestedKernel(int* out) { OPFORGE_LAUNCH(1, 1, 0, nullptr, InnerKernel)(out); }

// Every block writes its index to one slot: the block that runs last wins.
__global__ void LastBlockWinsKernel(int* out) {
  if (threadIdx.x == 0) out[0] = static_cast<int>(blockIdx.x);
}

// Every thread of the block writes its index to one slot, with no barrier and no atomic.
__global__ void LastThreadWinsKernel(int* out) { out[0] = static_cast<int>(threadIdx.x); }

// In place: x[i] *= 2.
__global__ void DoubleKernel(int n, float* x) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] *= 2.0f;
}

// --- the tests
// ------------------------------------------------------------------------------------

class SimtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cudaGetLastError();
    ClearReport();
    SetBlockOrder(BlockOrder::kForward);
    order_check_ = GetOrderCheck();
  }
  void TearDown() override {
    SetBlockOrder(BlockOrder::kForward);
    SetOrderCheck(order_check_);
  }
  int order_check_ = 0;

  // The launch failed with `code` and a report that names the kernel and contains `what`.
  static void ExpectReport(cudaError_t code, const std::string& kernel, const std::string& what) {
    EXPECT_EQ(cudaGetLastError(), code);
    const std::string report = LastReport();
    EXPECT_NE(report.find("kernel " + kernel + " "), std::string::npos) << report;
    EXPECT_NE(report.find(what), std::string::npos) << report;
    EXPECT_NE(std::string(cudaGetErrorString(code)).find(kernel), std::string::npos);
  }
};

TEST_F(SimtTest, VectorAddOverSeveralBlocksAndAGridStride) {
  const int n = 5000;
  std::vector<float> a(n), b(n), out(n);
  for (int i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
    b[static_cast<size_t>(i)] = static_cast<float>(n - i);
  }
  DeviceBuffer da, db, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(a, &da));
  ASSERT_NO_FATAL_FAILURE(Upload(b, &db));
  ASSERT_NO_FATAL_FAILURE(Upload(out, &dout));
  for (BlockOrder order : {BlockOrder::kForward, BlockOrder::kReverse, BlockOrder::kShuffled}) {
    SetBlockOrder(order, 7);
    OPFORGE_LAUNCH(7, 128, 0, nullptr, AddKernel)
    (n, static_cast<const float*>(da.get()), static_cast<const float*>(db.get()),
     static_cast<float*>(dout.get()));
    ASSERT_NO_FATAL_FAILURE(test::Sync());
    ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(out[static_cast<size_t>(i)], a[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
    }
  }
}

TEST_F(SimtTest, SharedMemoryAndBarriers) {
  const int blocks = 5;
  std::vector<int> in(blocks * 256), out(blocks, 0);
  std::iota(in.begin(), in.end(), -300);
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(out, &dout));
  OPFORGE_LAUNCH(blocks, 256, 0, nullptr, BlockSumKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dout.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
  for (int b = 0; b < blocks; ++b) {
    EXPECT_EQ(out[static_cast<size_t>(b)],
              std::accumulate(in.begin() + b * 256, in.begin() + (b + 1) * 256, 0));
  }
}

TEST_F(SimtTest, WarpIntrinsics) {
  const int threads = 64 * 3;
  std::vector<int> in(threads);
  for (int t = 0; t < threads; ++t) in[static_cast<size_t>(t)] = (t * 37) % 101;
  in[40] = 5000;  // warp 1 has a value > 1000
  std::vector<int> sum(threads / 32), any_all(threads / 32), moved(4 * threads);
  std::vector<unsigned> ballot(threads / 32);
  DeviceBuffer din, dsum, dballot, dany, dmoved;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(sum, &dsum));
  ASSERT_NO_FATAL_FAILURE(Upload(ballot, &dballot));
  ASSERT_NO_FATAL_FAILURE(Upload(any_all, &dany));
  ASSERT_NO_FATAL_FAILURE(Upload(moved, &dmoved));
  OPFORGE_LAUNCH(3, 64, 0, nullptr, WarpKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dsum.get()),
   static_cast<unsigned*>(dballot.get()), static_cast<int*>(dany.get()),
   static_cast<int*>(dmoved.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dsum, &sum));
  ASSERT_NO_FATAL_FAILURE(Download(dballot, &ballot));
  ASSERT_NO_FATAL_FAILURE(Download(dany, &any_all));
  ASSERT_NO_FATAL_FAILURE(Download(dmoved, &moved));
  for (int w = 0; w < threads / 32; ++w) {
    int s = 0;
    unsigned b = 0;
    bool any = false;
    for (int l = 0; l < 32; ++l) {
      const int v = in[static_cast<size_t>(w * 32 + l)];
      s += v;
      if (v % 2 != 0) b |= 1u << l;
      any = any || v > 1000;
    }
    EXPECT_EQ(sum[static_cast<size_t>(w)], s) << "warp " << w;
    EXPECT_EQ(ballot[static_cast<size_t>(w)], b) << "warp " << w;
    EXPECT_EQ(any_all[static_cast<size_t>(w)], (any ? 2 : 0) + 1) << "warp " << w;
    for (int l = 0; l < 32; ++l) {
      const int t = w * 32 + l;
      auto at = [&](int lane) { return in[static_cast<size_t>(w * 32 + lane)]; };
      EXPECT_EQ(moved[static_cast<size_t>(4 * t)], at(3));
      EXPECT_EQ(moved[static_cast<size_t>(4 * t + 1)], l >= 1 ? at(l - 1) : at(l));
      EXPECT_EQ(moved[static_cast<size_t>(4 * t + 2)], at(l ^ 5));
      EXPECT_EQ(moved[static_cast<size_t>(4 * t + 3)], l % 8 + 2 < 8 ? at(l + 2) : at(l));
    }
  }
}

TEST_F(SimtTest, BarrierReductions) {
  std::vector<int> in(96, 1), out(3, -1);
  in[10] = 0;
  in[70] = 0;
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(out, &dout));
  OPFORGE_LAUNCH(1, 96, 0, nullptr, SyncCountKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dout.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
  EXPECT_EQ(out, (std::vector<int>{94, 0, 1}));
}

TEST_F(SimtTest, ThreeDimensionalGridsAndBlocks) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int threads = 24, blocks = 12;
  std::vector<int> out(threads * blocks, -1);
  DeviceBuffer dout;
  ASSERT_NO_FATAL_FAILURE(Upload(out, &dout));
  SetBlockOrder(BlockOrder::kShuffled, 3);
  OPFORGE_LAUNCH(grid, block, 0, nullptr, IndexKernel)(static_cast<int*>(dout.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(out[static_cast<size_t>(b * threads + t)], b * 1000 + t);
    }
  }
}

TEST_F(SimtTest, Atomics) {
  std::vector<int> count{0}, bits{0};
  std::vector<unsigned long long> first{~0ull};
  std::vector<float> fsum{0.0f};
  DeviceBuffer dc, df, db, ds;
  ASSERT_NO_FATAL_FAILURE(Upload(count, &dc));
  ASSERT_NO_FATAL_FAILURE(Upload(first, &df));
  ASSERT_NO_FATAL_FAILURE(Upload(bits, &db));
  ASSERT_NO_FATAL_FAILURE(Upload(fsum, &ds));
  OPFORGE_LAUNCH(4, 100, 0, nullptr, AtomicKernel)
  (static_cast<int*>(dc.get()), static_cast<unsigned long long*>(df.get()),
   static_cast<int*>(db.get()), static_cast<float*>(ds.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dc, &count));
  ASSERT_NO_FATAL_FAILURE(Download(df, &first));
  ASSERT_NO_FATAL_FAILURE(Download(db, &bits));
  ASSERT_NO_FATAL_FAILURE(Download(ds, &fsum));
  EXPECT_EQ(count[0], 400);
  EXPECT_EQ(first[0], 1000ull - 399);
  EXPECT_EQ(bits[0], 0x7fffffff);
  EXPECT_EQ(fsum[0], 200.0f);
}

TEST_F(SimtTest, CountsLaunchesPerKernel) {
  auto launches = [] {
    for (const KernelLaunches& k : LaunchCounts()) {
      if (k.kernel == "AddKernel" && k.file == "cc/common/simt/simt_test.cc") return k.launches;
    }
    return int64_t{0};
  };
  const int64_t before = launches();
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(4 * sizeof(float)));
  auto* p = static_cast<float*>(d.get());
  OPFORGE_LAUNCH(1, 32, 0, nullptr, AddKernel)(4, p, p, p);
  OPFORGE_LAUNCH(1, 32, 0, nullptr, AddKernel)(4, p, p, p);
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  EXPECT_EQ(launches(), before + 2);
}

// --- the checks ---------------------------------------------------------------------------------

TEST_F(SimtTest, ReportsABarrierThatHalfTheBlockSkips) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(256 * sizeof(int)));
  OPFORGE_LAUNCH(2, 256, 0, nullptr, DivergentBarrierKernel)(static_cast<int*>(d.get()));
  ExpectReport(cudaErrorLaunchFailure, "DivergentBarrierKernel", "exited without reaching it");
  EXPECT_NE(LastReport().find("__syncthreads at common/simt/simt_test.cc:"), std::string::npos)
      << LastReport();
}

TEST_F(SimtTest, ReportsDivergentBarriers) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(64 * sizeof(int)));
  OPFORGE_LAUNCH(1, 64, 0, nullptr, TwoBarriersKernel)(static_cast<int*>(d.get()));
  ExpectReport(cudaErrorLaunchFailure, "TwoBarriersKernel", "(divergent barriers)");
}

TEST_F(SimtTest, ReportsAShuffleALaneOfItsMaskNeverCalls) {
  std::vector<int> in(64, 3);
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(in, &dout));
  OPFORGE_LAUNCH(1, 64, 0, nullptr, ShuffleAfterExitKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dout.get()));
  ExpectReport(cudaErrorLaunchFailure, "ShuffleAfterExitKernel",
               "__shfl_down_sync at common/simt/simt_test.cc:");
  EXPECT_NE(LastReport().find("lane 16 (thread (16, 0, 0)) exited without calling it"),
            std::string::npos)
      << LastReport();
}

TEST_F(SimtTest, ReportsAShuffleThatReadsALaneOutsideItsMask) {
  std::vector<int> in(32, 3);
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(in, &dout));
  OPFORGE_LAUNCH(1, 32, 0, nullptr, ShuffleOutsideMaskKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dout.get()));
  ExpectReport(cudaErrorLaunchFailure, "ShuffleOutsideMaskKernel",
               "lane 15 reads lane 16, which is not in the mask 0x0000ffff");
}

TEST_F(SimtTest, ReportsResultsThatDependOnTheOrderOfBlocksOrThreads) {
  SetOrderCheck(2);
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(sizeof(int)));
  OPFORGE_LAUNCH(8, 32, 0, nullptr, LastBlockWinsKernel)(static_cast<int*>(d.get()));
  ExpectReport(cudaErrorLaunchFailure, "LastBlockWinsKernel", "depend on the order");
  EXPECT_NE(LastReport().find("the first at byte 0 (0x07, then 0x00)"), std::string::npos)
      << LastReport();
  ClearReport();
  SetBlockOrder(BlockOrder::kReverse);  // compared with forward
  OPFORGE_LAUNCH(1, 64, 0, nullptr, LastThreadWinsKernel)(static_cast<int*>(d.get()));
  ExpectReport(cudaErrorLaunchFailure, "LastThreadWinsKernel", "run reverse and forward");
}

TEST_F(SimtTest, TheOrderCheckRunsTheFirstLaunchesOfEachKernelFromTheSameMemory) {
  SetOrderCheck(2);
  const int n = 300;
  std::vector<float> x(n);
  std::iota(x.begin(), x.end(), 1.0f);
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &d));
  const int64_t before = OrderCheckedLaunches();
  for (int k = 0; k < 3; ++k) {
    OPFORGE_LAUNCH(3, 128, 0, nullptr, DoubleKernel)(n, static_cast<float*>(d.get()));
  }
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  EXPECT_EQ(OrderCheckedLaunches(), before + 2);  // the first two of the three
  std::vector<float> got(n);
  ASSERT_NO_FATAL_FAILURE(Download(d, &got));
  for (int i = 0; i < n; ++i) {
    // Doubled three times: each checked launch's second run started from the memory its
    // first run started from.
    ASSERT_EQ(got[static_cast<size_t>(i)], 8.0f * x[static_cast<size_t>(i)]) << i;
  }
  SetOrderCheck(0);
  OPFORGE_LAUNCH(8, 32, 0, nullptr, LastBlockWinsKernel)(static_cast<int*>(d.get()));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "with the check off, no report";
}

TEST_F(SimtTest, RefusesLaunchesPastTheDevicesLimits) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(sizeof(int)));
  int* p = static_cast<int*>(d.get());
  OPFORGE_LAUNCH(1, dim3(64, 32), 0, nullptr, WriteKernel)(0, p);
  ExpectReport(cudaErrorInvalidConfiguration, "WriteKernel",
               "the block has 2048 threads, more than the device's 1024");
  OPFORGE_LAUNCH(1, dim3(1, 1, 65), 0, nullptr, WriteKernel)(0, p);
  ExpectReport(cudaErrorInvalidConfiguration, "WriteKernel",
               "block z is 65, more than the device's 64");
  OPFORGE_LAUNCH(dim3(1, 65536), 1, 0, nullptr, WriteKernel)(0, p);
  ExpectReport(cudaErrorInvalidConfiguration, "WriteKernel",
               "grid y is 65536, more than the device's 65535");
  OPFORGE_LAUNCH(0, 1, 0, nullptr, WriteKernel)(0, p);
  ExpectReport(cudaErrorInvalidConfiguration, "WriteKernel", "grid x is 0");
  OPFORGE_LAUNCH(1, 1, 48 * 1024 + 1, nullptr, WriteKernel)(0, p);
  ExpectReport(cudaErrorInvalidValue, "WriteKernel",
               "49153 bytes of dynamic shared memory, more than the 49152");
  // The limits themselves launch.
  OPFORGE_LAUNCH(1, 1024, 48 * 1024, nullptr, WriteKernel)(-1, p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << LastReport();
}

TEST_F(SimtTest, RefusesALaunchFromAKernel) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(sizeof(int)));
  OPFORGE_LAUNCH(1, 1, 0, nullptr, NestedKernel)(static_cast<int*>(d.get()));
  ExpectReport(cudaErrorNotSupported, "InnerKernel", "dynamic parallelism");
}

TEST_F(SimtTest, AFailedBlockLeavesTheRuntimeUsable) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(256 * sizeof(int)));
  OPFORGE_LAUNCH(1, 256, 0, nullptr, DivergentBarrierKernel)(static_cast<int*>(d.get()));
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  // The fibers parked at the barrier start afresh: a right kernel runs after it.
  std::vector<int> in(256, 2), out(1, 0);
  DeviceBuffer din, dout;
  ASSERT_NO_FATAL_FAILURE(Upload(in, &din));
  ASSERT_NO_FATAL_FAILURE(Upload(out, &dout));
  OPFORGE_LAUNCH(1, 256, 0, nullptr, BlockSumKernel)
  (static_cast<const int*>(din.get()), static_cast<int*>(dout.get()));
  ASSERT_NO_FATAL_FAILURE(test::Sync());
  ASSERT_NO_FATAL_FAILURE(Download(dout, &out));
  EXPECT_EQ(out[0], 512);
}

TEST_F(SimtTest, RefusesCopiesThatNameNoDeviceMemory) {
  std::vector<int> host(4, 1), other(4, 0);
  EXPECT_EQ(cudaMemcpy(other.data(), host.data(), 16, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_NE(LastReport().find("not device memory"), std::string::npos);
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(12));
  EXPECT_EQ(cudaMemcpy(d.get(), host.data(), 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d.get(), host.data(), 12, cudaMemcpyHostToDevice), cudaSuccess);
  int x = 0;
  EXPECT_EQ(cudaFree(&x), cudaErrorInvalidValue);
  cudaGetLastError();
}

TEST_F(SimtTest, FreshDeviceMemoryIsNaN) {
  DeviceBuffer d;
  ASSERT_NO_FATAL_FAILURE(d.Allocate(2 * sizeof(float)));
  std::vector<float> out(2, 0.0f);
  ASSERT_NO_FATAL_FAILURE(Download(d, &out));
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
}

#if defined(__SANITIZE_ADDRESS__)
TEST_F(SimtTest, AddressSanitizerReportsAWritePastTheEnd) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceBuffer d;
        if (d.Allocate(100 * sizeof(int)) != cudaSuccess) return;
        OPFORGE_LAUNCH(1, 128, 0, nullptr, WriteKernel)(100, static_cast<int*>(d.get()));
      },
      "heap-buffer-overflow(.|\n)*WriteKernel");
}
#endif

}  // namespace
}  // namespace simt
}  // namespace opforge

namespace opforge {
namespace simt {
namespace {

// After the last test: the launches per kernel, to the file OPFORGE_SIMT_LAUNCHES names (one
// file per shard: .SHARD appended), for cmake/check_launches.py, which fails if a __global__
// kernel of cc/ was never launched, or never run in two orders by the order check.
class LaunchCountWriter : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* path = std::getenv("OPFORGE_SIMT_LAUNCHES");
    if (path == nullptr || path[0] == '\0') return;
    std::string file = path;
    if (const char* shard = std::getenv("GTEST_SHARD_INDEX")) file += std::string(".") + shard;
    FILE* f = std::fopen(file.c_str(), "w");
    if (f == nullptr) {
      ADD_FAILURE() << "cannot write " << file;
      return;
    }
    for (const KernelLaunches& k : LaunchCounts()) {
      std::fprintf(f, "%s\t%s\t%lld\t%lld\n", k.file.c_str(), k.kernel.c_str(),
                   static_cast<long long>(k.launches), static_cast<long long>(k.order_checked));
    }
    std::fclose(f);
  }
};
::testing::Environment* const kLaunchCountWriter =
    ::testing::AddGlobalTestEnvironment(new LaunchCountWriter);

}  // namespace
}  // namespace simt
}  // namespace opforge
