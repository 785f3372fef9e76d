// Google Benchmark of the ElementMul core, no TensorFlow in the process: `make core-bench`.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/bench_util.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

// range(0): case (0 same shape [4M], 1 row broadcast [2048,2048]*[2048],
// 2 column broadcast [2048,2048]*[2048,1]); range(1): threads.
struct Case {
  explicit Case(int64_t c) {
    std::vector<int64_t> sa = {2048, 2048}, sb = {2048, 1};
    if (c == 0) sa = sb = {1 << 22};
    if (c == 1) sb = {2048};
    ok = ValidateElementMul(sa, sb, &plan).ok();
    a = bench::RandomFloats(bench::NumElements(sa), 11);
    b = bench::RandomFloats(bench::NumElements(sb), 12);
  }
  // Elements of a and b together.
  int64_t operands() const { return static_cast<int64_t>(a.size() + b.size()); }

  bool ok;
  BroadcastPlan plan;
  std::vector<float> a, b;
};

void BM_ElementMulForward(benchmark::State& state) {
  const Case c(state.range(0));
  if (!c.ok) return state.SkipWithError("bad case");
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  std::vector<float> out(static_cast<size_t>(c.plan.out_size));
  bench::Run(state, (c.operands() + c.plan.out_size) * 4, [&] {
    ElementMulForward<float>(c.plan, c.a.data(), c.b.data(), out.data(), parallel);
  });
}

void BM_ElementMulBackward(benchmark::State& state) {
  const Case c(state.range(0));
  if (!c.ok) return state.SkipWithError("bad case");
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto g = bench::RandomFloats(c.plan.out_size, 13);
  std::vector<float> ga(c.a.size()), gb(c.b.size());
  bench::Run(state, (c.plan.out_size + 2 * c.operands()) * 4, [&] {
    ElementMulBackward<float>(c.plan, g.data(), c.a.data(), c.b.data(), ga.data(), gb.data(),
                              parallel);
  });
}

void Cases(benchmark::internal::Benchmark* b) { bench::WithThreads(b, {0, 1, 2}); }

BENCHMARK(BM_ElementMulForward)->Apply(Cases);
BENCHMARK(BM_ElementMulBackward)->Apply(Cases);

}  // namespace
}  // namespace opforge
