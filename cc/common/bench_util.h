// Helpers shared by the Google Benchmark files (cc/ops/<op>/<op>_bench.cc).
#ifndef OPFORGE_COMMON_BENCH_UTIL_H_
#define OPFORGE_COMMON_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

namespace opforge {
namespace bench {

// n standard-normal floats (random signs, so branchy kernels cannot hide behind prediction).
inline std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  for (auto& x : v) x = dist(rng);
  return v;
}

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Registers Args({c, threads}) for each c of `cases` with 1 and 2 threads, timed in real time
// (the kernels run on the ThreadParallel's threads, not the benchmark's).
inline void WithThreads(benchmark::internal::Benchmark* b, std::initializer_list<int64_t> cases) {
  for (int64_t c : cases) {
    for (int64_t threads : {1, 2}) b->Args({c, threads});
  }
  b->UseRealTime();
}

// Times `fn` (one kernel call) and reports `bytes` moved per call.
template <typename Fn>
void Run(benchmark::State& state, int64_t bytes, Fn&& fn) {
  for (auto _ : state) {
    fn();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

}  // namespace bench
}  // namespace opforge

#endif  // OPFORGE_COMMON_BENCH_UTIL_H_
