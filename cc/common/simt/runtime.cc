// The SIMT runtime: CUDA threads as fibers on the launching OS thread, blocks one after another,
// and the CUDA runtime calls opforge's kernels and their tests make, over host memory.
//
// A block's threads are started in order on fibers. A thread that never waits runs to its end
// on the fiber that started it, which then starts the next thread, so a block without barriers
// costs two context switches. A thread that reaches a barrier or a warp intrinsic parks its
// fiber; a fresh one starts the next thread. When every thread has ended or parked, the runtime
// releases what can be released (a warp whose lanes all arrived, a block whose threads all
// reached __syncthreads) and resumes those threads in order. When nothing can be released the
// block cannot finish on a GPU either: the launch stops with a report naming the kernel, the
// launch, the barrier and the threads (instead of the hang a GPU would give).
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/simt/simt_api.h"

#if defined(__SANITIZE_ADDRESS__)
#define OPFORGE_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OPFORGE_SIMT_ASAN 1
#endif
#endif
#if defined(OPFORGE_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// The race check at the level of single accesses (OPFORGE_SIMT_TSAN, set by CMake in a
// ThreadSanitizer build, where this file is compiled without TSan's instrumentation and the
// kernels with it): every thread of a block is a fiber of TSan's, so that two threads touching
// one address between two barriers, one of them writing, no atomic, is a data race in TSan's
// report, as compute-sanitizer's racecheck reports it on a GPU. What orders the threads of a block
// on a GPU orders their fibers: the start of the block, __syncthreads (each generation of a
// block's barrier a sync object of its own), the warp intrinsics (among the warp's lanes). Blocks
// are ordered one after another (their shared memory is one array per OS thread here; a race
// between blocks is the order check's to find).
#if defined(OPFORGE_SIMT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

#if !defined(__x86_64__)
#error "the SIMT runtime's context switch is written for x86-64"
#endif

// Saves the callee-saved registers, the SSE and x87 control words and the stack pointer of the
// running context in *save, and continues the context whose stack pointer is `next`.
extern "C" void opforge_simt_switch(void** save, void* next);
// A fresh fiber's first frame: calls r12(r13) and never returns.
extern "C" void opforge_simt_trampoline();
asm(R"(
  .text
  .globl opforge_simt_switch
  .type opforge_simt_switch, @function
opforge_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size opforge_simt_switch, .-opforge_simt_switch
  .globl opforge_simt_trampoline
  .type opforge_simt_trampoline, @function
opforge_simt_trampoline:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size opforge_simt_trampoline, .-opforge_simt_trampoline
)");

namespace opforge {
namespace simt {
namespace internal {

__thread ThreadContext* g_current = nullptr;

namespace {

// --- fibers --------------------------------------------------------------------------------------

size_t StackBytes() {
  static const size_t bytes = [] {
    size_t kib = 256;
    if (const char* env = std::getenv("OPFORGE_SIMT_STACK_KIB")) {
      kib = std::max<size_t>(16, std::strtoull(env, nullptr, 10));
    }
    return kib * 1024;
  }();
  return bytes;
}

class Fiber {
 public:
  explicit Fiber(size_t bytes) : bytes_(bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes_ = (bytes_ + page - 1) / page * page;
    map_bytes_ = bytes_ + page;
    void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::fprintf(stderr, "opforge SIMT: cannot map a fiber stack of %zu bytes\n", bytes_);
      std::abort();
    }
    map_ = static_cast<char*>(m);
    mprotect(map_, page, PROT_NONE);  // a guard page below the stack: overflow faults
    bottom_ = map_ + page;
  }
  ~Fiber() { munmap(map_, map_bytes_); }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Makes the fiber start afresh at entry(arg) when next switched to.
  void Reset(void (*entry)(void*), void* arg) {
#if defined(OPFORGE_SIMT_ASAN)
    // Frames a stopped block left on this stack keep ASan's poison: clear it.
    __asan_unpoison_memory_region(bottom_, bytes_);
#endif
    auto top = reinterpret_cast<uintptr_t>(bottom_ + bytes_) & ~uintptr_t{15};
    auto* frame = reinterpret_cast<uint64_t*>(top - 80);
    uint32_t mxcsr = 0;
    uint16_t fpu_cw = 0;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpu_cw));
    frame[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpu_cw) << 32);
    frame[1] = 0;                                  // r15
    frame[2] = 0;                                  // r14
    frame[3] = reinterpret_cast<uint64_t>(arg);    // r13
    frame[4] = reinterpret_cast<uint64_t>(entry);  // r12
    frame[5] = 0;                                  // rbx
    frame[6] = 0;                                  // rbp
    frame[7] = reinterpret_cast<uint64_t>(&opforge_simt_trampoline);
    sp_ = frame;
  }

  void* sp_ = nullptr;
  char* bottom_ = nullptr;
  size_t bytes_ = 0;

 private:
  char* map_ = nullptr;
  size_t map_bytes_ = 0;
};

// --- a block's threads ---------------------------------------------------------------------------

enum class State { kNotStarted, kRunning, kParked, kReleased, kDone };
enum class Wait { kNone, kBlock, kWarp };

struct Thread : ThreadContext {
  int linear = 0;
  State state = State::kNotStarted;
  Fiber* fiber = nullptr;
  Wait wait = Wait::kNone;
  int kind = 0;  // BarrierKind or WarpKind
  const char* file = nullptr;
  int line = 0;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
};

std::string Where(const char* file, int line) {
  std::string f = file != nullptr ? file : "?";
  const size_t cc = f.rfind("/cc/");
  if (cc != std::string::npos) f = f.substr(cc + 4);
  return f + ":" + std::to_string(line);
}

std::string Dim(uint3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}
std::string Dim(dim3 d) { return Dim(uint3{d.x, d.y, d.z}); }

const char* BarrierName(int kind) {
  switch (kind) {
    case kSyncAnd:
      return "__syncthreads_and";
    case kSyncOr:
      return "__syncthreads_or";
    case kSyncCount:
      return "__syncthreads_count";
    default:
      return "__syncthreads";
  }
}
const char* WarpName(int kind) {
  switch (kind) {
    case kShflIdx:
      return "__shfl_sync";
    case kShflDown:
      return "__shfl_down_sync";
    case kShflUp:
      return "__shfl_up_sync";
    case kShflXor:
      return "__shfl_xor_sync";
    case kBallot:
      return "__ballot_sync";
    case kAny:
      return "__any_sync";
    case kAll:
      return "__all_sync";
    default:
      return "__syncwarp";
  }
}

std::string KernelBaseName(const char* expression) {
  std::string s = expression;
  const size_t lt = s.find('<');
  if (lt != std::string::npos) s.resize(lt);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

// The stop of a launch: a report, and the error the launch returns.
struct LaunchError {
  cudaError_t code = cudaSuccess;
  std::string report;
};

// --- the scheduler of one OS thread --------------------------------------------------------------

class Scheduler {
 public:
  static Scheduler& Get() {
    static thread_local Scheduler scheduler;
    return scheduler;
  }

  // Runs one block; returns "" or the report of why it could not finish.
  std::string RunBlock(const BlockContext& block, void (*body)(void*), void* context,
                       bool reverse_threads) {
    reverse_threads_ = reverse_threads;
    body_ = body;
    context_ = context;
    const int n = static_cast<int>(block.block_dim.x * block.block_dim.y * block.block_dim.z);
    threads_.resize(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) {
      Thread& th = threads_[static_cast<size_t>(t)];
      th = Thread();
      th.linear = t;
      th.thread_idx.x = static_cast<unsigned>(t) % block.block_dim.x;
      th.thread_idx.y = static_cast<unsigned>(t) / block.block_dim.x % block.block_dim.y;
      th.thread_idx.z = static_cast<unsigned>(t) / (block.block_dim.x * block.block_dim.y);
      th.block = &block;
    }
    next_ = 0;
    done_ = 0;
#if defined(OPFORGE_SIMT_TSAN)
    tsan_host_ = __tsan_get_current_fiber();
    block_gen_ = 0;
    std::fill(std::begin(warp_gen_), std::end(warp_gen_), 0);
    __tsan_release(&tsan_block_begin_);  // what the launch's host code wrote, to every thread
#endif
    std::string report;
    for (;;) {
      // Run until every thread has ended or parked.
      for (;;) {
        Thread* ready = nullptr;
        for (; resume_ < released_.size(); ++resume_) {
          Thread* th = released_[resume_];
          if (th->state == State::kReleased) {
            ready = th;
            ++resume_;
            break;
          }
        }
        if (ready != nullptr) {
          ready->state = State::kRunning;
          SwitchTo(ready->fiber);
        } else if (next_ < n) {
          SwitchTo(FreshFiber());
        } else {
          break;
        }
      }
      released_.clear();
      resume_ = 0;
      if (done_ == n) break;
      const bool released = ReleaseWarps();
      if (pending_report_.empty()) {
        if (released || ReleaseBlock()) continue;
      }
      report = Deadlock();
      break;
    }
#if defined(OPFORGE_SIMT_TSAN)
    __tsan_acquire(&tsan_block_end_);  // what every thread wrote, to the host code after it
    if (!report.empty()) {
      // The parked threads never resume: what they did before parking (released at their
      // barrier or warp intrinsic) is ordered before the host's code that follows; their TSan
      // contexts (a call stack left open) go.
      for (char& sync : tsan_barrier_) __tsan_acquire(&sync);
      for (char& sync : tsan_warp_) __tsan_acquire(&sync);
      for (void*& f : tsan_threads_) {
        if (f != nullptr) __tsan_destroy_fiber(f);
        f = nullptr;
      }
    }
#endif
#if defined(OPFORGE_SIMT_TSAN)
    free_.insert(free_.end(), used_.begin(), used_.end());
    used_.clear();
#endif
    if (!report.empty()) {
      // The parked threads never resume: every fiber starts afresh.
      free_.clear();
      for (auto& f : fibers_) {
        f->Reset(&Scheduler::FiberMain, this);
        free_.push_back(f.get());
      }
    }
    running_ = nullptr;
    g_current = nullptr;
    return report;
  }

  bool InKernel() const { return running_ != nullptr; }

  int Barrier(BarrierKind kind, int predicate, const char* file, int line) {
    Thread* th = running_;
    th->wait = Wait::kBlock;
    th->kind = kind;
    th->file = file;
    th->line = line;
    th->value = predicate != 0 ? 1 : 0;
#if defined(OPFORGE_SIMT_TSAN)
    char* sync = &tsan_barrier_[block_gen_ & 1];
    __tsan_release(sync);
    Park(th);
    __tsan_acquire(sync);
#else
    Park(th);
#endif
    return static_cast<int>(th->result);
  }

  uint64_t Warp(WarpKind kind, unsigned mask, uint64_t value, int arg, int width, const char* file,
                int line) {
    Thread* th = running_;
    th->wait = Wait::kWarp;
    th->kind = kind;
    th->file = file;
    th->line = line;
    th->mask = mask;
    th->value = value;
    th->arg = arg;
    th->width = width;
#if defined(OPFORGE_SIMT_TSAN)
    const int warp = th->linear / 32;
    char* sync = &tsan_warp_[2 * warp + (warp_gen_[warp] & 1)];
    __tsan_release(sync);
    Park(th);
    __tsan_acquire(sync);
#else
    Park(th);
#endif
    return th->result;
  }

 private:
  Scheduler() = default;

  Fiber* FreshFiber() {
    if (!free_.empty()) {
      Fiber* f = free_.back();
      free_.pop_back();
      return f;
    }
    fibers_.push_back(std::make_unique<Fiber>(StackBytes()));
    Fiber* f = fibers_.back().get();
    f->Reset(&Scheduler::FiberMain, this);
    return f;
  }

  // Continues `fiber` until it parks a thread or runs out of threads to start.
  void SwitchTo(Fiber* fiber) {
    entering_ = fiber;
#if defined(OPFORGE_SIMT_ASAN)
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, fiber->bottom_, fiber->bytes_);
    opforge_simt_switch(&main_sp_, fiber->sp_);
    __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
    opforge_simt_switch(&main_sp_, fiber->sp_);
#endif
  }

  // From a fiber back to the scheduler (the OS thread's own stack).
  void SwitchToMain(Fiber* from) {
#if defined(OPFORGE_SIMT_ASAN)
    void* fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&fake_stack, main_bottom_, main_size_);
    opforge_simt_switch(&from->sp_, main_sp_);
    __sanitizer_finish_switch_fiber(fake_stack, &main_bottom_, &main_size_);
#else
    opforge_simt_switch(&from->sp_, main_sp_);
#endif
  }

  static void FiberMain(void* arg) {
    auto* self = static_cast<Scheduler*>(arg);
#if defined(OPFORGE_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &self->main_bottom_, &self->main_size_);
#endif
    self->FiberLoop();
  }

  [[noreturn]] void FiberLoop() {
    Fiber* const me = entering_;  // a fiber never changes stacks: this is the one for good
    for (;;) {
      const int n = static_cast<int>(threads_.size());
      while (next_ < n) {
        const int t = next_++;
        Thread* th = &threads_[static_cast<size_t>(reverse_threads_ ? n - 1 - t : t)];
        th->fiber = me;
        th->state = State::kRunning;
        running_ = th;
        g_current = th;
#if defined(OPFORGE_SIMT_TSAN)
        TsanThreadBegin(th);
        body_(context_);
        __tsan_release(&tsan_block_end_);
        __tsan_switch_to_fiber(tsan_host_, __tsan_switch_to_fiber_no_sync);
#else
        body_(context_);
#endif
        th->state = State::kDone;
        th->fiber = nullptr;
        running_ = nullptr;
        g_current = nullptr;
        ++done_;
#if defined(OPFORGE_SIMT_TSAN)
        // One thread per stack in a block: two threads' locals at one address would be a race
        // to TSan. The fiber serves again in the next block (ordered after this one).
        break;
#endif
      }
#if defined(OPFORGE_SIMT_TSAN)
      used_.push_back(me);
#else
      free_.push_back(me);
#endif
      SwitchToMain(me);
    }
  }

#if defined(OPFORGE_SIMT_TSAN)
  // TSan's context of thread `th` (one per thread index, kept from block to block), named after
  // the kernel, the thread and the block (TSan keeps 63 characters of a name); the block's start
  // acquired. Called in the host's context; nothing here allocates after the switch.
  void TsanThreadBegin(Thread* th) {
    const auto t = static_cast<size_t>(th->linear);
    if (tsan_threads_.size() <= t) tsan_threads_.resize(t + 1, nullptr);
    if (tsan_threads_[t] == nullptr) tsan_threads_[t] = __tsan_create_fiber(0);
    const uint3 i = th->thread_idx, b = th->block->block_idx;
    std::snprintf(tsan_name_, sizeof(tsan_name_), "%s thread (%u,%u,%u) block (%u,%u,%u)",
                  tsan_launch_.c_str(), i.x, i.y, i.z, b.x, b.y, b.z);
    __tsan_set_fiber_name(tsan_threads_[t], tsan_name_);
    __tsan_switch_to_fiber(tsan_threads_[t], __tsan_switch_to_fiber_no_sync);
    __tsan_acquire(&tsan_block_begin_);
  }

 public:
  // The launch the next blocks belong to, for the names of their threads in TSan's reports.
  void SetTsanLaunch(std::string name) { tsan_launch_ = std::move(name); }

 private:
#endif

  void Park(Thread* th) {
    th->state = State::kParked;
    Fiber* me = th->fiber;
    running_ = nullptr;
    g_current = nullptr;
#if defined(OPFORGE_SIMT_TSAN)
    __tsan_switch_to_fiber(tsan_host_, __tsan_switch_to_fiber_no_sync);
    SwitchToMain(me);
    __tsan_switch_to_fiber(tsan_threads_[static_cast<size_t>(th->linear)],
                           __tsan_switch_to_fiber_no_sync);
#else
    SwitchToMain(me);
#endif
    // Resumed: the scheduler set th->result and th->state.
    running_ = th;
    g_current = th;
    th->wait = Wait::kNone;
  }

  void Release(Thread* th, uint64_t result) {
    th->result = result;
    th->state = State::kReleased;
    released_.push_back(th);
  }

  bool Waiting(const Thread& th, Wait w) const {
    return th.state == State::kParked && th.wait == w;
  }

  // Completes every warp intrinsic whose mask's lanes have all arrived at it.
  bool ReleaseWarps() {
    bool progress = false;
    const int n = static_cast<int>(threads_.size());
    for (int base = 0; base < n; base += 32) {
      const int lanes = std::min(32, n - base);
      for (int l = 0; l < lanes; ++l) {
        Thread& th = threads_[static_cast<size_t>(base + l)];
        if (!Waiting(th, Wait::kWarp) || (th.mask >> l & 1u) == 0) continue;
        bool all = true;
        for (int m = 0; m < 32 && all; ++m) {
          if ((th.mask >> m & 1u) == 0) continue;
          if (m >= lanes) {
            all = false;
            break;
          }
          const Thread& o = threads_[static_cast<size_t>(base + m)];
          all = Waiting(o, Wait::kWarp) && o.kind == th.kind && o.mask == th.mask;
        }
        if (!all) continue;
        if (!CompleteWarp(base, th.mask)) return false;
        progress = true;
      }
    }
    return progress;
  }

  // The lanes of `mask` in the warp at `base` all wait at one intrinsic: give each its result.
  bool CompleteWarp(int base, unsigned mask) {
    const Thread& first = threads_[static_cast<size_t>(base + __builtin_ctz(mask))];
    const int kind = first.kind;
    unsigned ballot = 0;
    for (int m = 0; m < 32; ++m) {
      if ((mask >> m & 1u) != 0 && threads_[static_cast<size_t>(base + m)].value != 0) {
        ballot |= 1u << m;
      }
    }
    std::vector<uint64_t> results(32, 0);
    for (int m = 0; m < 32; ++m) {
      if ((mask >> m & 1u) == 0) continue;
      const Thread& th = threads_[static_cast<size_t>(base + m)];
      uint64_t r = 0;
      switch (kind) {
        case kWarpSync:
          break;
        case kBallot:
          r = ballot;
          break;
        case kAny:
          r = ballot != 0 ? 1 : 0;
          break;
        case kAll:
          r = ballot == mask ? 1 : 0;
          break;
        default: {
          const int width = th.width;
          if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
            pending_report_ = std::string(WarpName(kind)) + " at " + Where(th.file, th.line) +
                              ": width " + std::to_string(width) +
                              " is not a power of two from 1 to 32";
            return false;
          }
          const int segment = m / width * width;
          int src = m;
          if (kind == kShflIdx) {
            src = segment + ((th.arg % width) + width) % width;
          } else if (kind == kShflDown) {
            src = m + th.arg < segment + width ? m + th.arg : m;
          } else if (kind == kShflUp) {
            src = m - th.arg >= segment ? m - th.arg : m;
          } else if (kind == kShflXor) {
            src = m ^ th.arg;
            if (src < segment || src >= segment + width) src = m;
          }
          if ((mask >> src & 1u) == 0) {
            pending_report_ = std::string(WarpName(kind)) + " at " + Where(th.file, th.line) +
                              ": lane " + std::to_string(m) + " reads lane " + std::to_string(src) +
                              ", which is not in the mask " + Hex(mask) +
                              " (its value is undefined on a GPU)";
            return false;
          }
          r = threads_[static_cast<size_t>(base + src)].value;
        }
      }
      results[static_cast<size_t>(m)] = r;
    }
    for (int m = 0; m < 32; ++m) {
      if ((mask >> m & 1u) != 0) {
        Release(&threads_[static_cast<size_t>(base + m)], results[static_cast<size_t>(m)]);
      }
    }
#if defined(OPFORGE_SIMT_TSAN)
    ++warp_gen_[base / 32];
#endif
    return true;
  }

  // Releases __syncthreads when every thread of the block waits at one.
  bool ReleaseBlock() {
    if (done_ != 0) return false;
    const Thread& first = threads_[0];
    for (const Thread& th : threads_) {
      if (!Waiting(th, Wait::kBlock) || th.kind != first.kind || th.file != first.file ||
          th.line != first.line) {
        return false;
      }
    }
    int count = 0;
    for (const Thread& th : threads_) count += static_cast<int>(th.value);
    const int total = static_cast<int>(threads_.size());
    uint64_t result = 0;
    switch (first.kind) {
      case kSyncAnd:
        result = count == total ? 1 : 0;
        break;
      case kSyncOr:
        result = count != 0 ? 1 : 0;
        break;
      case kSyncCount:
        result = static_cast<uint64_t>(count);
        break;
      default:
        break;
    }
    for (Thread& th : threads_) Release(&th, result);
#if defined(OPFORGE_SIMT_TSAN)
    ++block_gen_;
#endif
    return true;
  }

  static std::string Hex(unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "0x%08x", v);
    return buf;
  }

  std::string ThreadName(const Thread& th) const { return "thread " + Dim(th.thread_idx); }

  // Nothing can be released: say why, in the terms of the first thread that waits.
  std::string Deadlock() {
    if (!pending_report_.empty()) {
      std::string r = std::move(pending_report_);
      pending_report_.clear();
      return r;
    }
    std::ostringstream s;
    // A warp intrinsic whose mask names a lane that is not there with it.
    const int n = static_cast<int>(threads_.size());
    for (int t = 0; t < n; ++t) {
      const Thread& th = threads_[static_cast<size_t>(t)];
      if (!Waiting(th, Wait::kWarp)) continue;
      const int base = t / 32 * 32, lane = t % 32;
      const int lanes = std::min(32, n - base);
      s << WarpName(th.kind) << " at " << Where(th.file, th.line) << " with mask " << Hex(th.mask)
        << ", called by " << ThreadName(th) << " (lane " << lane << "): ";
      if ((th.mask >> lane & 1u) == 0) {
        s << "the calling lane is not in its mask";
        return s.str();
      }
      for (int m = 0; m < 32; ++m) {
        if ((th.mask >> m & 1u) == 0) continue;
        if (m >= lanes) {
          s << "lane " << m << " of the mask does not exist (the block has " << n << " threads)";
          return s.str();
        }
        const Thread& o = threads_[static_cast<size_t>(base + m)];
        if (o.state == State::kDone) {
          s << "lane " << m << " (" << ThreadName(o) << ") exited without calling it";
          return s.str();
        }
        if (Waiting(o, Wait::kBlock)) {
          s << "lane " << m << " (" << ThreadName(o) << ") waits at " << BarrierName(o.kind)
            << " at " << Where(o.file, o.line) << " instead";
          return s.str();
        }
        if (o.kind != th.kind || o.mask != th.mask) {
          s << "lane " << m << " (" << ThreadName(o) << ") waits at " << WarpName(o.kind) << " at "
            << Where(o.file, o.line) << " with mask " << Hex(o.mask) << " instead";
          return s.str();
        }
      }
    }
    // __syncthreads that not every thread reached.
    for (const Thread& th : threads_) {
      if (!Waiting(th, Wait::kBlock)) continue;
      s << BarrierName(th.kind) << " at " << Where(th.file, th.line) << " is not reached by every "
        << "thread of the block: " << ThreadName(th) << " waits there, ";
      for (const Thread& o : threads_) {
        if (o.state == State::kDone) {
          s << "while " << ThreadName(o) << " exited without reaching it";
          return s.str();
        }
        if (Waiting(o, Wait::kBlock) &&
            (o.file != th.file || o.line != th.line || o.kind != th.kind)) {
          s << "while " << ThreadName(o) << " waits at " << BarrierName(o.kind) << " at "
            << Where(o.file, o.line) << " (divergent barriers)";
          return s.str();
        }
      }
      s << "and no thread can go on";
      return s.str();
    }
    return "the block cannot go on";
  }

  void (*body_)(void*) = nullptr;
  void* context_ = nullptr;
  std::vector<Thread> threads_;
  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<Fiber*> free_;
#if defined(OPFORGE_SIMT_TSAN)
  std::vector<Fiber*> used_;  // fibers whose stack a thread of this block used
#endif
  std::vector<Thread*> released_;
  size_t resume_ = 0;
  int next_ = 0;  // threads started so far
  int done_ = 0;
  bool reverse_threads_ = false;
  Thread* running_ = nullptr;
  Fiber* entering_ = nullptr;  // the fiber SwitchTo enters (a fresh one reads it to know itself)
  void* main_sp_ = nullptr;
  const void* main_bottom_ = nullptr;
  size_t main_size_ = 0;
  std::string pending_report_;
#if defined(OPFORGE_SIMT_TSAN)
  void* tsan_host_ = nullptr;               // the OS thread's own TSan context
  std::vector<void*> tsan_threads_;         // one TSan context per thread index of a block
  std::string tsan_launch_ = "host block";  // the kernel's name
  char tsan_name_[160] = {};
  // Sync objects (their addresses): the block's start and end, its barrier by generation parity,
  // each warp's intrinsics by generation parity.
  char tsan_block_begin_ = 0, tsan_block_end_ = 0;
  char tsan_barrier_[2] = {};
  char tsan_warp_[64] = {};
  uint64_t block_gen_ = 0;
  uint64_t warp_gen_[32] = {};
#endif
};

}  // namespace
}  // namespace internal
}  // namespace simt
}  // namespace opforge

// --- launches ----------------------------------------------------------------------------------

namespace opforge {
namespace simt {
namespace internal {

// The bytes of every device allocation (the CUDA runtime section below tracks them), for the
// order check: taken before a launch's first run, put back before its second.
struct MemoryImage {
  std::vector<std::pair<uintptr_t, std::vector<unsigned char>>> blocks;
};
// Whether the device allocations hold at most max_bytes (else the image is left empty).
bool TakeImage(MemoryImage* image, size_t max_bytes);
void RestoreImage(const MemoryImage& image);
// "" when device memory holds what `image` holds, else where it first differs.
std::string DiffImage(const MemoryImage& image);

}  // namespace internal

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, int64_t> launches;
  std::map<void (*)(void*), int> order_checks;  // per kernel instance and launch site
  std::map<std::pair<std::string, std::string>, int64_t> order_checked;  // launches, per kernel
};
Registry& GetRegistry() {
  static Registry* registry = new Registry();  // outlives every thread that launches
  return *registry;
}

std::string RelativeSource(const char* file) {
  std::string f = file != nullptr ? file : "?";
  const size_t cc = f.rfind("/cc/");
  if (cc != std::string::npos) return f.substr(cc + 1);
  return f;
}

BlockOrder StartingOrder(uint64_t* seed) {
  *seed = 0;
  const char* env = std::getenv("OPFORGE_SIMT_ORDER");
  if (env == nullptr) return BlockOrder::kForward;
  const std::string v = env;
  if (v == "reverse") return BlockOrder::kReverse;
  if (v.rfind("shuffle", 0) == 0) {
    const size_t colon = v.find(':');
    if (colon != std::string::npos) *seed = std::strtoull(v.c_str() + colon + 1, nullptr, 10);
    return BlockOrder::kShuffled;
  }
  return BlockOrder::kForward;
}

int StartingOrderCheck() {
  const char* env = std::getenv("OPFORGE_SIMT_ORDER_CHECK");
  return env != nullptr ? std::atoi(env) : 2;
}
std::atomic<int>& OrderCheckLaunches() {
  static std::atomic<int> n{StartingOrderCheck()};
  return n;
}

// Device memory past which a launch is not checked (three copies of it are made).
constexpr size_t kOrderCheckMaxBytes = size_t{256} << 20;

struct ThreadState {
  ThreadState() { order = StartingOrder(&seed); }
  BlockOrder order;
  uint64_t seed;
  uint64_t launches = 0;
  std::string report;
  cudaError_t last_error = cudaSuccess;
};
ThreadState& Tls() {
  static thread_local ThreadState state;
  return state;
}

bool AbortOnReport() {
  static const bool abort = [] {
    const char* env = std::getenv("OPFORGE_SIMT_ABORT");
    return env != nullptr && env[0] == '1';
  }();
  return abort;
}

void Fail(cudaError_t code, const std::string& report) {
  ThreadState& st = Tls();
  st.report = report;
  st.last_error = code;
  std::fprintf(stderr, "opforge SIMT: %s\n", report.c_str());
  if (AbortOnReport()) std::abort();
}

std::string LaunchName(const internal::LaunchSite& site, dim3 grid, dim3 block) {
  return "kernel " + internal::KernelBaseName(site.kernel) + " (" + site.kernel + ", launched at " +
         internal::Where(site.file, site.line) + " with grid " + internal::Dim(grid) + ", block " +
         internal::Dim(block) + ")";
}

// The reason a launch of this shape cannot start on the device, or "".
std::string LimitProblem(dim3 grid, dim3 block, size_t shared_bytes) {
  const DeviceLimits& lim = Limits();
  const unsigned g[3] = {grid.x, grid.y, grid.z};
  const unsigned b[3] = {block.x, block.y, block.z};
  const char* axis[3] = {"x", "y", "z"};
  for (int i = 0; i < 3; ++i) {
    if (g[i] == 0) return std::string("grid ") + axis[i] + " is 0";
    if (b[i] == 0) return std::string("block ") + axis[i] + " is 0";
    if (static_cast<int64_t>(g[i]) > lim.max_grid_dim[i]) {
      return std::string("grid ") + axis[i] + " is " + std::to_string(g[i]) +
             ", more than the device's " + std::to_string(lim.max_grid_dim[i]);
    }
    if (static_cast<int>(b[i]) > lim.max_block_dim[i]) {
      return std::string("block ") + axis[i] + " is " + std::to_string(b[i]) +
             ", more than the device's " + std::to_string(lim.max_block_dim[i]);
    }
  }
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads > static_cast<uint64_t>(lim.max_threads_per_block)) {
    return "the block has " + std::to_string(threads) + " threads, more than the device's " +
           std::to_string(lim.max_threads_per_block);
  }
  if (shared_bytes > lim.shared_per_block) {
    return std::to_string(shared_bytes) + " bytes of dynamic shared memory, more than the " +
           std::to_string(lim.shared_per_block) + " a block may use without opting in";
  }
  return "";
}

// Block i of the launch's order, over `total` blocks.
class Order {
 public:
  Order(BlockOrder order, uint64_t seed, uint64_t launch, uint64_t total)
      : order_(order), total_(total) {
    if (order_ == BlockOrder::kShuffled && total_ > 1) {
      // i -> (a * i + b) mod total, a coprime with total: a permutation drawn from the seed
      // and the launch's number, in constant memory however large the grid.
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + launch);
      b_ = rng() % total_;
      do {
        a_ = rng() % total_;
      } while (a_ == 0 || std::gcd(a_, total_) != 1);
    }
  }
  uint64_t operator[](uint64_t i) const {
    switch (order_) {
      case BlockOrder::kReverse:
        return total_ - 1 - i;
      case BlockOrder::kShuffled:
        return total_ > 1
                   ? static_cast<uint64_t>((static_cast<unsigned __int128>(a_) * i + b_) % total_)
                   : i;
      default:
        return i;
    }
  }

 private:
  BlockOrder order_;
  uint64_t total_;
  uint64_t a_ = 1, b_ = 0;
};

}  // namespace

namespace internal {

void RunGrid(const LaunchSite& site, dim3 grid, dim3 block, size_t shared_bytes,
             cudaStream_t stream, void (*thread)(void*), void* context) {
  (void)stream;  // every stream is the launching thread: work runs in issue order
  Scheduler& scheduler = Scheduler::Get();
  if (scheduler.InKernel()) {
    Fail(cudaErrorNotSupported, LaunchName(site, grid, block) +
                                    ": launched from inside a kernel (dynamic parallelism), "
                                    "which the SIMT runtime does not run");
    return;
  }
  const std::string problem = LimitProblem(grid, block, shared_bytes);
  if (!problem.empty()) {
    Fail(shared_bytes > Limits().shared_per_block ? cudaErrorInvalidValue
                                                  : cudaErrorInvalidConfiguration,
         LaunchName(site, grid, block) + ": cannot launch: " + problem);
    return;
  }
  bool check = false;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.launches[{RelativeSource(site.file), KernelBaseName(site.kernel)}];
    int& checks = r.order_checks[thread];
    if (checks < OrderCheckLaunches().load(std::memory_order_relaxed)) {
      ++checks;
      check = true;
    }
  }
  ThreadState& st = Tls();
  const uint64_t total = uint64_t{grid.x} * grid.y * grid.z;
  const uint64_t launch = st.launches++;
#if defined(OPFORGE_SIMT_TSAN)
  scheduler.SetTsanLaunch(KernelBaseName(site.kernel));
#endif
  // Runs the grid in `order`; false (after a report) where a block could not finish.
  auto run = [&](BlockOrder order_kind) {
    const Order order(order_kind, st.seed, launch, total);
    BlockContext ctx{};
    ctx.block_dim = block;
    ctx.grid_dim = grid;
    for (uint64_t i = 0; i < total; ++i) {
      const uint64_t b = order[i];
      ctx.block_idx.x = static_cast<unsigned>(b % grid.x);
      ctx.block_idx.y = static_cast<unsigned>(b / grid.x % grid.y);
      ctx.block_idx.z = static_cast<unsigned>(b / (uint64_t{grid.x} * grid.y));
      const std::string report =
          scheduler.RunBlock(ctx, thread, context, order_kind == BlockOrder::kReverse);
      if (!report.empty()) {
        Fail(cudaErrorLaunchFailure,
             LaunchName(site, grid, block) + ", block " + Dim(ctx.block_idx) + ": " + report);
        return false;
      }
    }
    return true;
  };
  // The order check: the launch runs in this thread's order, and again from the same device
  // memory in the opposite one (reverse, whose blocks also start their threads from the last;
  // forward after reverse); the memory both leave must be the same.
  MemoryImage before, after;
  if (check && !TakeImage(&before, kOrderCheckMaxBytes)) check = false;
  if (!run(st.order) || !check) return;
  TakeImage(&after, kOrderCheckMaxBytes);
  RestoreImage(before);
  const BlockOrder other =
      st.order == BlockOrder::kReverse ? BlockOrder::kForward : BlockOrder::kReverse;
  if (!run(other)) return;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    ++r.order_checked[{RelativeSource(site.file), KernelBaseName(site.kernel)}];
  }
  const std::string diff = DiffImage(after);
  if (!diff.empty()) {
    auto name = [](BlockOrder o) {
      return o == BlockOrder::kForward   ? "forward"
             : o == BlockOrder::kReverse ? "reverse"
                                         : "shuffled";
    };
    Fail(cudaErrorLaunchFailure,
         LaunchName(site, grid, block) +
             ": its results depend on the order of its blocks or of "
             "their threads (a race, or a missing atomic): run " +
             name(st.order) + " and " + name(other) +
             " from the same device memory, it left different bytes: " + diff);
  }
}

int BlockBarrier(BarrierKind kind, int predicate, const char* file, int line) {
  return Scheduler::Get().Barrier(kind, predicate, file, line);
}

uint64_t WarpOp(WarpKind kind, unsigned mask, uint64_t value, int arg, int width, const char* file,
                int line) {
  return Scheduler::Get().Warp(kind, mask, value, arg, width, file, line);
}

}  // namespace internal

void SetBlockOrder(BlockOrder order, uint64_t seed) {
  Tls().order = order;
  Tls().seed = seed;
}
BlockOrder GetBlockOrder() { return Tls().order; }

void SetOrderCheck(int launches_per_kernel) {
  OrderCheckLaunches().store(launches_per_kernel, std::memory_order_relaxed);
}
int GetOrderCheck() { return OrderCheckLaunches().load(std::memory_order_relaxed); }
int64_t OrderCheckedLaunches() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  int64_t total = 0;
  for (const auto& [key, n] : r.order_checked) total += n;
  return total;
}

std::vector<KernelLaunches> LaunchCounts() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<KernelLaunches> out;
  for (const auto& [key, n] : r.launches) {
    const auto checked = r.order_checked.find(key);
    out.push_back(
        {key.first, key.second, n, checked == r.order_checked.end() ? 0 : checked->second});
  }
  return out;
}

std::string RunHostBlock(int threads, bool reverse, void (*body)(int, void*), void* context) {
  internal::Scheduler& scheduler = internal::Scheduler::Get();
  if (scheduler.InKernel()) return "RunHostBlock called from inside a block";
  internal::BlockContext ctx{};
  ctx.block_dim = dim3(static_cast<unsigned>(threads));
  ctx.grid_dim = dim3(1);
#if defined(OPFORGE_SIMT_TSAN)
  scheduler.SetTsanLaunch("host block");
#endif
  struct Call {
    void (*body)(int, void*);
    void* context;
  } call{body, context};
  return scheduler.RunBlock(
      ctx,
      [](void* p) {
        auto* c = static_cast<Call*>(p);
        c->body(static_cast<int>(internal::Current()->thread_idx.x), c->context);
      },
      &call, reverse);
}

void HostSyncThreads() { internal::BlockBarrier(internal::kSync, 0, "host", 0); }

std::string LastReport() { return Tls().report; }
void ClearReport() { Tls().report.clear(); }

const DeviceLimits& Limits() {
  static const DeviceLimits limits;
  return limits;
}

}  // namespace simt
}  // namespace opforge

// --- the CUDA runtime API ------------------------------------------------------------------------
//
// Device memory is host memory; every stream is the calling thread, so a kernel or a copy has
// finished when its call returns. Allocations are tracked, so that a copy or a free that names
// no device allocation is refused as CUDA refuses it; fresh allocations are filled with 0xff
// bytes (a NaN in every float format), so that a kernel that reads memory nothing wrote gives
// NaN instead of a plausible zero.

struct CUstream_st {
  unsigned flags = 0;
};

namespace {

using opforge::simt::Tls;

struct Allocations {
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;  // start -> bytes
  std::set<uintptr_t> adopted;         // the blocks AdoptDeviceMemory added (not cudaMalloc's)
};
Allocations& GetAllocations() {
  static Allocations* a = new Allocations();
  return *a;
}

// Whether [p, p + bytes) lies in one device allocation.
bool IsDevice(const void* p, size_t bytes) {
  Allocations& a = GetAllocations();
  std::lock_guard<std::mutex> lock(a.mu);
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = a.blocks.upper_bound(u);
  if (it == a.blocks.begin()) return false;
  --it;
  return u >= it->first && u + bytes <= it->first + std::max<size_t>(it->second, 1);
}

}  // namespace

namespace opforge {
namespace simt {
namespace internal {

bool TakeImage(MemoryImage* image, size_t max_bytes) {
  Allocations& a = GetAllocations();
  std::lock_guard<std::mutex> lock(a.mu);
  image->blocks.clear();
  size_t total = 0;
  for (const auto& [start, bytes] : a.blocks) total += bytes;
  if (total > max_bytes) return false;
  image->blocks.reserve(a.blocks.size());
  for (const auto& [start, bytes] : a.blocks) {
    const auto* p = reinterpret_cast<const unsigned char*>(start);
    image->blocks.emplace_back(start, std::vector<unsigned char>(p, p + bytes));
  }
  return true;
}

void RestoreImage(const MemoryImage& image) {
  for (const auto& [start, bytes] : image.blocks) {
    if (!bytes.empty()) std::memcpy(reinterpret_cast<void*>(start), bytes.data(), bytes.size());
  }
}

std::string DiffImage(const MemoryImage& image) {
  for (const auto& [start, bytes] : image.blocks) {
    const auto* p = reinterpret_cast<const unsigned char*>(start);
    if (bytes.empty() || std::memcmp(p, bytes.data(), bytes.size()) == 0) continue;
    size_t first = 0, count = 0;
    for (size_t i = bytes.size(); i-- > 0;) {
      if (p[i] != bytes[i]) {
        first = i;
        ++count;
      }
    }
    char at[256];
    std::snprintf(at, sizeof(at),
                  "in the allocation of %zu bytes at %p, %zu bytes differ, the first at byte "
                  "%zu (0x%02x, then 0x%02x)",
                  bytes.size(), reinterpret_cast<const void*>(start), count, first,
                  static_cast<unsigned>(bytes[first]), static_cast<unsigned>(p[first]));
    return at;
  }
  return "";
}

}  // namespace internal

void AdoptDeviceMemory(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
  Allocations& a = GetAllocations();
  std::lock_guard<std::mutex> lock(a.mu);
  uintptr_t start = reinterpret_cast<uintptr_t>(p), end = start + bytes;
  // A range inside one block already counts; one that overlaps adopted blocks (views of one
  // buffer) merges with them into one block.
  auto it = a.blocks.upper_bound(start);
  if (it != a.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second >= end) return;
    if (prev->first + prev->second > start && a.adopted.count(prev->first) != 0) it = prev;
  }
  while (it != a.blocks.end() && it->first < end) {
    if (a.adopted.count(it->first) == 0) break;  // never merge with cudaMalloc's memory
    start = std::min(start, it->first);
    end = std::max(end, it->first + it->second);
    a.adopted.erase(it->first);
    it = a.blocks.erase(it);
  }
  a.blocks[start] = end - start;
  a.adopted.insert(start);
}

void ReleaseDeviceMemory(const void* p) {
  if (p == nullptr) return;
  Allocations& a = GetAllocations();
  std::lock_guard<std::mutex> lock(a.mu);
  const auto u = reinterpret_cast<uintptr_t>(p);
  auto it = a.blocks.upper_bound(u);
  if (it == a.blocks.begin()) return;
  --it;
  if (a.adopted.count(it->first) == 0 || u >= it->first + std::max<size_t>(it->second, 1)) return;
  a.adopted.erase(it->first);
  a.blocks.erase(it);
}

}  // namespace simt
}  // namespace opforge

namespace {

cudaError_t Set(cudaError_t e) {
  if (e != cudaSuccess) Tls().last_error = e;
  return e;
}

cudaError_t Refuse(cudaError_t e, const std::string& what) {
  Tls().report = what;
  return Set(e);
}

// The errors the SIMT runtime returns: CUDA's name and text for each.
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
};
const ErrorText& TextOf(cudaError_t error) {
  static constexpr ErrorText kUnknown{cudaErrorUnknown, "cudaErrorUnknown", "unknown error"};
  for (const ErrorText& e : kErrors) {
    if (e.code == error) return e;
  }
  return kUnknown;
}

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return Set(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return Set(cudaErrorMemoryAllocation);
  std::memset(p, 0xff, bytes);
  Allocations& a = GetAllocations();
  {
    std::lock_guard<std::mutex> lock(a.mu);
    a.blocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Allocations& a = GetAllocations();
  {
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.blocks.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == a.blocks.end() || a.adopted.count(it->first) != 0) {
      return Refuse(cudaErrorInvalidValue,
                    "cudaFree: the pointer is not the start of a device allocation");
    }
    a.blocks.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t) {
  return cudaMalloc(ptr, bytes);
}
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (count == 0) return cudaSuccess;
  const bool dst_device = IsDevice(dst, count), src_device = IsDevice(src, count);
  const char* problem = nullptr;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_device) problem = "the destination of a host-to-device copy is not device memory";
      break;
    case cudaMemcpyDeviceToHost:
      if (!src_device) problem = "the source of a device-to-host copy is not device memory";
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_device || !src_device) {
        problem = "a device-to-device copy names memory that is not device memory";
      }
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      break;
    default:
      return Set(cudaErrorInvalidMemcpyDirection);
  }
  if (problem != nullptr) {
    return Refuse(cudaErrorInvalidValue, std::string("cudaMemcpy of ") + std::to_string(count) +
                                             " bytes: " + problem +
                                             " (or the range passes its allocation's end)");
  }
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!IsDevice(ptr, count)) {
    return Refuse(cudaErrorInvalidValue,
                  "cudaMemset of " + std::to_string(count) +
                      " bytes: not device memory (or the range passes its allocation's end)");
  }
  std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t) {
  return cudaMemset(ptr, value, count);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr) return Set(cudaErrorInvalidValue);
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamGetDevice(cudaStream_t, int* device) {
  if (device == nullptr) return Set(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Set(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Set(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : Set(cudaErrorInvalidDevice);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (total_bytes != nullptr) *total_bytes = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page;
  if (free_bytes != nullptr) *free_bytes = static_cast<size_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr || device != 0) return Set(cudaErrorInvalidValue);
  const opforge::simt::DeviceLimits& lim = opforge::simt::Limits();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = lim.max_threads_per_block;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = lim.max_block_dim[0];
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = lim.max_block_dim[1];
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = lim.max_block_dim[2];
      break;
    case cudaDevAttrMaxGridDimX:
      *value = static_cast<int>(lim.max_grid_dim[0]);
      break;
    case cudaDevAttrMaxGridDimY:
      *value = static_cast<int>(lim.max_grid_dim[1]);
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = static_cast<int>(lim.max_grid_dim[2]);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(lim.shared_per_block);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(lim.shared_per_block_optin);
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = lim.multiprocessors;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = lim.compute_major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = lim.compute_minor;
      break;
    default:
      return Refuse(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " +
                                               std::to_string(static_cast<int>(attr)) +
                                               " is not modelled by the SIMT runtime");
  }
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return Set(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return Set(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = Tls().last_error;
  Tls().last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return Tls().last_error; }

const char* cudaGetErrorName(cudaError_t error) { return TextOf(error).name; }

// The error's CUDA text, with the SIMT runtime's report of it where there is one.
const char* cudaGetErrorString(cudaError_t error) {
  if (error == cudaSuccess) return "no error";
  static thread_local std::string text;
  const std::string& report = Tls().report;
  text = TextOf(error).text;
  if (!report.empty()) text += " (SIMT: " + report + ")";
  return text.c_str();
}

}  // extern "C"
