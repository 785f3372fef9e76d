// Google Benchmark of the LeakyRelu core, no TensorFlow in the process: `make core-bench`.
// Arguments: elements, threads (ThreadParallel). Reports bytes moved per second.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/bench_util.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace {

void BM_LeakyReluForward(benchmark::State& state) {
  const int64_t n = state.range(0);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(n, 7);
  std::vector<float> y(x.size());
  LeakyReluParams params;
  params.size = n;
  for (auto _ : state) {
    LeakyReluForward<float>(params, x.data(), y.data(), nullptr, parallel);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 2 * static_cast<int64_t>(sizeof(float)));
}

void BM_LeakyReluForwardWithMask(benchmark::State& state) {
  const int64_t n = state.range(0);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(n, 7);
  std::vector<float> y(x.size()), mask(x.size());
  LeakyReluParams params;
  params.size = n;
  for (auto _ : state) {
    LeakyReluForward<float>(params, x.data(), y.data(), mask.data(), parallel);
    benchmark::DoNotOptimize(mask.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 3 * static_cast<int64_t>(sizeof(float)));
}

void BM_LeakyReluBackward(benchmark::State& state) {
  const int64_t n = state.range(0);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(n, 7);
  const auto g = bench::RandomFloats(n, 8);
  std::vector<float> dx(x.size());
  LeakyReluParams params;
  params.size = n;
  for (auto _ : state) {
    LeakyReluBackward<float>(params, g.data(), x.data(), dx.data(), parallel);
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 3 * static_cast<int64_t>(sizeof(float)));
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22}) {
    for (int64_t threads : {1, 2}) b->Args({n, threads});
  }
  b->UseRealTime();
}

BENCHMARK(BM_LeakyReluForward)->Apply(Sizes);
BENCHMARK(BM_LeakyReluForwardWithMask)->Apply(Sizes);
BENCHMARK(BM_LeakyReluBackward)->Apply(Sizes);

}  // namespace
}  // namespace opforge
