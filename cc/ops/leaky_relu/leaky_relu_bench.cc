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
  bench::Run(state, n * 2 * static_cast<int64_t>(sizeof(float)),
             [&] { LeakyReluForward<float>(params, x.data(), y.data(), nullptr, parallel); });
}

void BM_LeakyReluForwardWithMask(benchmark::State& state) {
  const int64_t n = state.range(0);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(n, 7);
  std::vector<float> y(x.size()), mask(x.size());
  LeakyReluParams params;
  params.size = n;
  bench::Run(state, n * 3 * static_cast<int64_t>(sizeof(float)),
             [&] { LeakyReluForward<float>(params, x.data(), y.data(), mask.data(), parallel); });
}

void BM_LeakyReluBackward(benchmark::State& state) {
  const int64_t n = state.range(0);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(n, 7);
  const auto g = bench::RandomFloats(n, 8);
  std::vector<float> dx(x.size());
  LeakyReluParams params;
  params.size = n;
  bench::Run(state, n * 3 * static_cast<int64_t>(sizeof(float)),
             [&] { LeakyReluBackward<float>(params, g.data(), x.data(), dx.data(), parallel); });
}

void Sizes(benchmark::internal::Benchmark* b) {
  bench::WithThreads(b, {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 22});
}

BENCHMARK(BM_LeakyReluForward)->Apply(Sizes);
BENCHMARK(BM_LeakyReluForwardWithMask)->Apply(Sizes);
BENCHMARK(BM_LeakyReluBackward)->Apply(Sizes);

}  // namespace
}  // namespace opforge
