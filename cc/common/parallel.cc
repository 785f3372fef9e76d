#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace opforge {

void ThreadParallel::For(int64_t total, double /*cost_per_unit*/, const Fn& fn) const {
  if (total <= 0) return;
  const int64_t shards = std::min<int64_t>(num_threads_, total);
  if (shards == 1) {
    fn(0, total);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(shards - 1));
  const int64_t block = (total + shards - 1) / shards;
  for (int64_t s = 1; s < shards; ++s) {
    const int64_t begin = s * block;
    const int64_t end = std::min(total, begin + block);
    if (begin >= end) break;
    threads.emplace_back([&fn, begin, end] { fn(begin, end); });
  }
  fn(0, std::min(total, block));
  for (auto& t : threads) t.join();
}

namespace {

inline void SpinPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One step's counters, each on its own cache line.
struct StepCounters {
  alignas(64) std::atomic<int64_t> claimed{0};
  alignas(64) std::atomic<int64_t> done{0};
};

}  // namespace

void RunSteps(const Parallel& parallel, const std::vector<int64_t>& tasks, double cost_per_task,
              const std::function<void(int64_t step, int64_t task)>& run) {
  const int64_t steps = static_cast<int64_t>(tasks.size());
  int64_t most = 0;
  for (int64_t n : tasks) most = std::max(most, n);
  if (most == 0) return;
  std::unique_ptr<StepCounters[]> counters(new StepCounters[static_cast<size_t>(steps)]);
  auto member = [&]() {
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t n = tasks[static_cast<size_t>(s)];
      StepCounters& c = counters[static_cast<size_t>(s)];
      for (;;) {
        const int64_t i = c.claimed.fetch_add(1, std::memory_order_relaxed);
        if (i >= n) break;
        run(s, i);
        c.done.fetch_add(1, std::memory_order_release);
      }
      // The step's last tasks, claimed by members that are running them.
      for (int spins = 0; c.done.load(std::memory_order_acquire) < n; ++spins) {
        if (spins < 4096) {
          SpinPause();
        } else {
          std::this_thread::yield();
        }
      }
    }
  };
  // One unit per member; the backend decides how many run at once, and a member that starts
  // after the others finished finds every step done. The cost is the whole sequence's, so that
  // a backend splits it wherever one step would have been split.
  const double total_cost = cost_per_task * static_cast<double>(most) * static_cast<double>(steps);
  parallel.For(most, total_cost / static_cast<double>(most), [&](int64_t, int64_t) { member(); });
}

}  // namespace opforge
