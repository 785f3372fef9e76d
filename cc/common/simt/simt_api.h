// The SIMT runtime's own interface, beside the CUDA runtime calls it defines: how blocks are
// ordered, what was launched, what the last failed launch reported. Host code only; a test of
// CUDA kernels includes it to steer and read a SIMT run (common/simt/simt.h is the prelude of
// the kernels' build, and includes this).
#ifndef OPFORGE_COMMON_SIMT_SIMT_API_H_
#define OPFORGE_COMMON_SIMT_SIMT_API_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace opforge {
namespace simt {

// The order in which a launch runs its blocks (kReverse also starts each block's threads from
// the last to the first). A CUDA program may not depend on it; a kernel whose results do (a
// race between blocks or between the threads of a block, a missing atomic) gives different
// results in two orders, which the order check below compares.
enum class BlockOrder { kForward, kReverse, kShuffled };

// The order of this OS thread's next launches (kShuffled: a permutation drawn from `seed`).
// OPFORGE_SIMT_ORDER=forward|reverse|shuffle:SEED sets the starting order of every thread.
void SetBlockOrder(BlockOrder order, uint64_t seed = 0);
BlockOrder GetBlockOrder();

// The order check: the first `launches_per_kernel` launches of each kernel (each template
// instance at each launch site) run twice from the same device memory, in this thread's order
// and in the opposite one (reverse, whose blocks also start their threads from the last; forward
// after reverse), and fail, with a report naming the kernel and the first byte that differs,
// where the device memory they leave differs. 0 turns it off; OPFORGE_SIMT_ORDER_CHECK=N sets it
// at start (default 2). Launches while more than 256 MB of device memory is allocated are not
// checked; nor is memory outside the runtime's allocations. OrderCheckedLaunches() counts the
// launches checked so far.
void SetOrderCheck(int launches_per_kernel);
int GetOrderCheck();
int64_t OrderCheckedLaunches();

// Launches made so far, per kernel: `file` the source that launches it (cc/... relative),
// `kernel` its name without template arguments; `order_checked` of them ran in two orders.
struct KernelLaunches {
  std::string file;
  std::string kernel;
  int64_t launches = 0;
  int64_t order_checked = 0;
};
std::vector<KernelLaunches> LaunchCounts();

// The report of the last launch on this OS thread that the runtime refused or stopped (a
// barrier not every thread reached, a warp intrinsic a lane of its mask never called, a launch
// past the device's limits...), naming the kernel and the launch; "" when none has failed.
// cudaGetErrorString of the launch's error returns it too.
std::string LastReport();
void ClearReport();

// Memory the runtime did not allocate that stands for device memory from now on: a framework's
// buffers handed to a kernel's host code (TensorFlow's tensors, on the CPU device, when the ops'
// GPU kernels run on this runtime). The CUDA runtime calls then accept [p, p + bytes) as device
// memory, and the order check restores and compares it; cudaFree refuses it. A range that
// overlaps adopted ones (views of one buffer) merges with them. ReleaseDeviceMemory(q) for any q
// inside an adopted block forgets the whole block.
void AdoptDeviceMemory(const void* p, size_t bytes);
void ReleaseDeviceMemory(const void* p);

// The device a SIMT run stands for: an H200 (sm_90), whose launch limits it enforces.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_block_dim[3] = {1024, 1024, 64};
  int64_t max_grid_dim[3] = {2147483647, 65535, 65535};
  size_t shared_per_block = 48 * 1024;         // without opting in
  size_t shared_per_block_optin = 227 * 1024;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  int multiprocessors = 132;
  int compute_major = 9, compute_minor = 0;
};
const DeviceLimits& Limits();

// Runs body(t) for t in [0, threads) as the threads of one block on the SIMT runtime's fibers,
// started from the last thread to the first with `reverse`; HostSyncThreads() inside body is
// __syncthreads. For host code that emulates a block (a test of a kernel's body). Returns ""
// or the report of why the block could not finish (a barrier not every thread reached).
std::string RunHostBlock(int threads, bool reverse, void (*body)(int, void*), void* context);
void HostSyncThreads();

namespace internal {

struct LaunchSite {
  const char* kernel;  // the kernel expression of the launch, as written
  const char* file;
  int line;
};

struct BlockContext {
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};

struct ThreadContext {
  uint3 thread_idx;
  const BlockContext* block;
};

// The CUDA thread running on this OS thread (inside a kernel; null outside). __thread, not
// thread_local: a plain TLS load, no wrapper call, on every threadIdx.
extern __thread ThreadContext* g_current;
inline ThreadContext* Current() { return g_current; }

enum BarrierKind { kSync, kSyncAnd, kSyncOr, kSyncCount };
enum WarpKind { kWarpSync, kShflIdx, kShflDown, kShflUp, kShflXor, kBallot, kAny, kAll };

int BlockBarrier(BarrierKind kind, int predicate, const char* file, int line);
uint64_t WarpOp(WarpKind kind, unsigned mask, uint64_t value, int arg, int width, const char* file,
                int line);

// Runs `thread(context)` for every thread of the grid, block after block.
void RunGrid(const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes,
             cudaStream_t stream, void (*thread)(void*), void* context);

}  // namespace internal
}  // namespace simt
}  // namespace opforge

#endif  // OPFORGE_COMMON_SIMT_SIMT_API_H_
