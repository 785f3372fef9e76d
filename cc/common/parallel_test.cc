#include "common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace opforge {
namespace {

// A backend that runs its units one at a time on the calling thread, in reverse order: a team
// member that starts after the others must find every step done.
class ReverseSerial final : public Parallel {
 public:
  void For(int64_t total, double, const Fn& fn) const override {
    for (int64_t i = total - 1; i >= 0; --i) fn(i, i + 1);
  }
};

// Every task of every step runs exactly once, and no task of a step starts before all of the
// previous step's tasks are done (each task reads the previous step's results).
void CheckSteps(const Parallel& parallel) {
  const std::vector<int64_t> tasks{5, 0, 17, 1, 64, 3};
  std::vector<std::vector<int64_t>> value(tasks.size());
  std::vector<std::vector<std::atomic<int>>> runs(tasks.size());
  for (size_t s = 0; s < tasks.size(); ++s) {
    value[s].assign(static_cast<size_t>(tasks[s]), -1);
    runs[s] = std::vector<std::atomic<int>>(static_cast<size_t>(tasks[s]));
  }
  RunSteps(parallel, tasks, 1e6, [&](int64_t step, int64_t task) {
    runs[step][task].fetch_add(1);
    int64_t sum = 0;
    // The nearest earlier step with tasks: all of them must be finished.
    for (int64_t s = step - 1; s >= 0; --s) {
      if (tasks[s] == 0) continue;
      for (int64_t v : value[s]) {
        EXPECT_GE(v, 0) << "step " << step << " ran before step " << s << " was done";
        sum += v;
      }
      break;
    }
    std::this_thread::yield();
    value[step][task] = sum + task + 1;
  });
  for (size_t s = 0; s < tasks.size(); ++s) {
    for (int64_t t = 0; t < tasks[s]; ++t) {
      EXPECT_EQ(runs[s][t].load(), 1) << "step " << s << " task " << t;
    }
  }
  // The last step's values follow from the sums of the steps before: the same on any backend.
  int64_t sum = 0;
  for (size_t s = 0; s < tasks.size(); ++s) {
    if (tasks[s] == 0) continue;
    int64_t next = 0;
    for (int64_t t = 0; t < tasks[s]; ++t) {
      EXPECT_EQ(value[s][t], sum + t + 1);
      next += value[s][t];
    }
    sum = next;
  }
}

TEST(RunSteps, EveryTaskOnceStepsInOrderOnAnyBackend) {
  CheckSteps(SerialParallel());
  CheckSteps(ReverseSerial());
  CheckSteps(ThreadParallel(2));
  CheckSteps(ThreadParallel(7));
}

TEST(RunSteps, NoTasksRunsNothing) {
  int calls = 0;
  RunSteps(ThreadParallel(2), {}, 1.0, [&](int64_t, int64_t) { ++calls; });
  RunSteps(ThreadParallel(2), {0, 0}, 1.0, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace opforge
