// Google Benchmark of the ElementMul core, no TensorFlow in the process: `make core-bench`.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace {

std::vector<float> RandomFloats(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(11);
  std::normal_distribution<float> dist;
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

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
  const auto a = RandomFloats(Count(sa));
  const auto b = RandomFloats(Count(sb));
  std::vector<float> out(static_cast<size_t>(plan.out_size));
  for (auto _ : state) {
    ElementMulForward<float>(plan, a.data(), b.data(), out.data(), parallel);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * (Count(sa) + Count(sb) + plan.out_size) * 4);
}

void BM_ElementMulBackward(benchmark::State& state) {
  const auto [sa, sb] = Case(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  BroadcastPlan plan;
  if (!ValidateElementMul(sa, sb, &plan).ok()) return state.SkipWithError("bad case");
  const auto a = RandomFloats(Count(sa));
  const auto b = RandomFloats(Count(sb));
  const auto g = RandomFloats(plan.out_size);
  std::vector<float> ga(a.size()), gb(b.size());
  for (auto _ : state) {
    ElementMulBackward<float>(plan, g.data(), a.data(), b.data(), ga.data(), gb.data(), parallel);
    benchmark::DoNotOptimize(gb.data());
  }
  state.SetBytesProcessed(state.iterations() * (plan.out_size + 2 * (Count(sa) + Count(sb))) * 4);
}

void Cases(benchmark::internal::Benchmark* b) {
  for (int64_t c : {0, 1, 2}) {
    for (int64_t threads : {1, 2}) b->Args({c, threads});
  }
  b->UseRealTime();
}

BENCHMARK(BM_ElementMulForward)->Apply(Cases);
BENCHMARK(BM_ElementMulBackward)->Apply(Cases);

}  // namespace
}  // namespace opforge
