// opforge::Parallel: the one interface through which core kernels use CPU threads.
//
// The TensorFlow binding backs it with the op's intra-op thread pool (so
// tf.config.threading settings are respected); core tests and benchmarks back it with plain
// std::threads. Kernels must produce identical results for any partition of the range: each
// output element is computed by exactly one call, in an order that does not depend on the
// partition. That is what makes results identical across thread counts.
#ifndef OPFORGE_COMMON_PARALLEL_H_
#define OPFORGE_COMMON_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace opforge {

class Parallel {
 public:
  using Fn = std::function<void(int64_t begin, int64_t end)>;
  virtual ~Parallel() = default;

  // Calls fn(begin, end) on disjoint subranges that together cover [0, total).
  // cost_per_unit: rough cost of one unit of work in cycles; the backend uses it to decide how
  // finely to split (small total work runs inline on the calling thread).
  virtual void For(int64_t total, double cost_per_unit, const Fn& fn) const = 0;
};

// Runs everything on the calling thread.
class SerialParallel final : public Parallel {
 public:
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override {
    if (total > 0) fn(0, total);
  }
};

// Splits the range evenly over `num_threads` std::threads (tests and benchmarks of the core).
class ThreadParallel final : public Parallel {
 public:
  explicit ThreadParallel(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {}
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override;

 private:
  int num_threads_;
};

// Runs a sequence of steps, each a set of tasks: run(step, task) for every task in
// [0, tasks[step]), step after step, each starting once the previous one's tasks are all done.
// One team does all the steps: the calling thread and whichever of the backend's threads join
// (one parallel.For for the whole sequence), each claiming the next task of the current step;
// a member that finds no task left waits, spinning, only for tasks other members have claimed
// and are running, so a pool thread that never joins holds nothing up. Against one
// parallel.For per step, the pool's threads are woken once instead of once per step (on a
// virtual machine a sleeping core can take a hundred microseconds to wake). A task is the
// same unit whichever member runs it, so results do not depend on the partition.
// cost_per_task: cycles, as for Parallel::For (below ~one task of work everything runs on the
// calling thread).
void RunSteps(const Parallel& parallel, const std::vector<int64_t>& tasks, double cost_per_task,
              const std::function<void(int64_t step, int64_t task)>& run);

// Cost hints (cycles per element) shared by the element-wise kernels.
constexpr double kCostElementwise = 2.0;

}  // namespace opforge

#endif  // OPFORGE_COMMON_PARALLEL_H_
