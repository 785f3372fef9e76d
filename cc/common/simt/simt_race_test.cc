// The race check at the level of single accesses: the SIMT runtime under ThreadSanitizer (the
// kernels instrumented, each thread of a block a TSan fiber; runtime.cc, OPFORGE_SIMT_TSAN). A
// kernel in which two threads of a block touch one address between two barriers, one of them
// writing, without an atomic, is reported as a data race naming the kernel, its launch and the
// two threads, as compute-sanitizer's racecheck reports it on a GPU; the same kernels with the
// barrier, the atomic or the warp exchange that orders them are not (this binary fails on any
// report outside the death tests below). Built and run by `make cuda-test` without a GPU
// (target opforge_simt_race_test of a ThreadSanitizer build, build/simt-tsan).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "common/simt/simt.h"  // the kernels below are CUDA

namespace opforge {
namespace simt {
namespace {

// --- kernels with a planted race ----------------------------------------------------------------

// Each thread writes its slot of shared memory and reads its neighbour's with no barrier between.
__global__ void SharedRaceKernel(const int* in, int* out) {
  __shared__ int s[64];
  const int t = threadIdx.x;
  s[t] = in[t];
  out[t] = s[(t + 1) % 64];
}

// Every thread of the block writes one global element (a sum without an atomic).
__global__ void GlobalRaceKernel(const int* in, int* total) { *total = *total + in[threadIdx.x]; }

// --- the same work, ordered --------------------------------------------------------------------

__global__ void SharedSyncedKernel(const int* in, int* out) {
  __shared__ int s[64];
  const int t = threadIdx.x;
  s[t] = in[t];
  __syncthreads();
  out[t] = s[(t + 1) % 64];
  __syncthreads();
  s[t] = -out[t];  // a write after the second barrier: ordered after every read above
  __syncthreads();
  out[t] += s[(t + 63) % 64];
}

__global__ void GlobalAtomicKernel(const int* in, int* total) { atomicAdd(total, in[threadIdx.x]); }

// A warp's lanes exchange through shared memory around __syncwarp, and through a shuffle.
__global__ void WarpSyncedKernel(const int* in, int* out) {
  __shared__ int s[32];
  const int lane = threadIdx.x;
  s[lane] = in[lane];
  __syncwarp();
  const int v = s[31 - lane] + __shfl_xor_sync(0xffffffffu, in[lane], 1);
  __syncwarp();
  s[lane] = v;
  __syncwarp();
  out[lane] = s[(lane + 1) % 32];
}

// Threads with no barrier would run one after another on one fiber's stack, their locals at the
// same addresses (here written by the C library's sincos, which TSan intercepts): under TSan each
// thread of a block has a stack of its own, so that this is not a race (griffin_lim.cu's
// InitKernel showed it).
__global__ void StackLocalsKernel(const int* in, int* out) {
  double sine = 0, cosine = 0;
  sincos(static_cast<double>(in[threadIdx.x]), &sine, &cosine);
  out[threadIdx.x] = sine * sine + cosine * cosine > 0.5 ? 1 : 0;
}

// --- helpers ----------------------------------------------------------------------------------

struct Buffers {
  int* in = nullptr;
  int* out = nullptr;
  Buffers() {
    std::vector<int> host(64);
    for (int i = 0; i < 64; ++i) host[static_cast<size_t>(i)] = i + 1;
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&in), 64 * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 64 * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(in, host.data(), 64 * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemset(out, 0, 64 * sizeof(int)), cudaSuccess);
  }
  ~Buffers() {
    cudaFree(in);
    cudaFree(out);
  }
  std::vector<int> Out(int n) const {
    std::vector<int> host(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(host.data(), out, host.size() * sizeof(int), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
};

// Runs launch(buffers) in a child (this binary again, for the one test: a process with threads
// may not fork safely) that TSan stops at its first report, and expects that report.
template <typename Launch>
void ExpectRaceReport(Launch launch, const char* report) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("TSAN_OPTIONS", "halt_on_error=1 exitcode=66", 1);
  EXPECT_EXIT(
      {
        Buffers b;
        launch(b);
        cudaDeviceSynchronize();
        std::exit(0);
      },
      ::testing::ExitedWithCode(66), report);
}

// --- the planted races are reported -----------------------------------------------------------

TEST(SimtRaceCheck, SharedMemoryRaceIsReportedWithTheKernelAndTheThreads) {
  ExpectRaceReport(
      [](const Buffers& b) {
        OPFORGE_LAUNCH(1, 64, 0, nullptr, SharedRaceKernel)
        (b.in, b.out);
      },
      "ThreadSanitizer: data race.*SharedRaceKernel.*Thread T[0-9]+ 'SharedRaceKernel thread "
      "\\([0-9]+,0,0\\) block \\(0,0,0\\)'");
}

TEST(SimtRaceCheck, GlobalMemoryRaceIsReportedWithTheKernel) {
  ExpectRaceReport(
      [](const Buffers& b) {
        OPFORGE_LAUNCH(1, 64, 0, nullptr, GlobalRaceKernel)
        (b.in, b.out);
      },
      "ThreadSanitizer: data race.*GlobalRaceKernel.*Thread T[0-9]+ 'GlobalRaceKernel thread");
}

// --- what orders the threads is not a race (a report here fails the binary) --------------------

TEST(SimtRaceCheck, BarriersOrderSharedMemory) {
  Buffers b;
  OPFORGE_LAUNCH(1, 64, 0, nullptr, SharedSyncedKernel)(b.in, b.out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> out = b.Out(64);
  for (int t = 0; t < 64; ++t) {
    // in[t + 1], then minus the left neighbour's first value, in[t].
    EXPECT_EQ(out[static_cast<size_t>(t)], ((t + 1) % 64 + 1) - (t + 1)) << t;
  }
}

TEST(SimtRaceCheck, ThreadsSharingAFibersStackAreNotRaces) {
  Buffers b;
  OPFORGE_LAUNCH(2, 64, 0, nullptr, StackLocalsKernel)(b.in, b.out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int v : b.Out(64)) EXPECT_EQ(v, 1);
}

TEST(SimtRaceCheck, AtomicsAreNotRaces) {
  Buffers b;
  OPFORGE_LAUNCH(3, 64, 0, nullptr, GlobalAtomicKernel)(b.in, b.out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(b.Out(1)[0], 3 * 64 * 65 / 2);
}

TEST(SimtRaceCheck, WarpSynchronousExchangesAreNotRaces) {
  Buffers b;
  OPFORGE_LAUNCH(1, 32, 0, nullptr, WarpSyncedKernel)(b.in, b.out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int> out = b.Out(32);
  for (int lane = 0; lane < 32; ++lane) {
    const int next = (lane + 1) % 32;
    EXPECT_EQ(out[static_cast<size_t>(lane)], (31 - next + 1) + ((next ^ 1) + 1)) << lane;
  }
}

}  // namespace
}  // namespace simt
}  // namespace opforge
