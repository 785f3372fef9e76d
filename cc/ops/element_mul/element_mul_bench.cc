// Google Benchmark of the ElementMul core, no TensorFlow in the process: `make core-bench`.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/bench_util.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

// range(0): case (0 same shape [4M], 1 row broadcast [2048,2048]*[2048],
// 2 column broadcast [2048,2048]*[2048,1]); range(1): threads.
std::pair<std::vector<int64_t>, std::vector<int64_t>> Case(int64_t c) {
  if (c == 0) return {{1 << 22}, {1 << 22}};
  if (c == 1) return {{2048, 2048}, {2048}};
  return {{2048, 2048}, {2048, 1}};
}

void BM_ElementMulForward(benchmark::State& state) {
  const auto [sa, sb] = Case(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  BroadcastPlan plan;
  if (!ValidateElementMul(sa, sb, &plan).ok()) return state.SkipWithError("bad case");
  const auto a = bench::RandomFloats(bench::NumElements(sa), 11);
  const auto b = bench::RandomFloats(bench::NumElements(sb), 12);
  std::vector<float> out(static_cast<size_t>(plan.out_size));
  bench::Run(state, (bench::NumElements(sa) + bench::NumElements(sb) + plan.out_size) * 4,
             [&] { ElementMulForward<float>(plan, a.data(), b.data(), out.data(), parallel); });
}

void BM_ElementMulBackward(benchmark::State& state) {
  const auto [sa, sb] = Case(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  BroadcastPlan plan;
  if (!ValidateElementMul(sa, sb, &plan).ok()) return state.SkipWithError("bad case");
  const auto a = bench::RandomFloats(bench::NumElements(sa), 11);
  const auto b = bench::RandomFloats(bench::NumElements(sb), 12);
  const auto g = bench::RandomFloats(plan.out_size, 13);
  std::vector<float> ga(a.size()), gb(b.size());
  bench::Run(state, (plan.out_size + 2 * (bench::NumElements(sa) + bench::NumElements(sb))) * 4,
             [&] {
               ElementMulBackward<float>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(),
                                         parallel);
             });
}

void Cases(benchmark::internal::Benchmark* b) { bench::WithThreads(b, {0, 1, 2}); }

BENCHMARK(BM_ElementMulForward)->Apply(Cases);
BENCHMARK(BM_ElementMulBackward)->Apply(Cases);

}  // namespace
}  // namespace opforge
