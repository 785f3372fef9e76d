// Helpers shared by the Google Benchmark files (cc/ops/<op>/<op>_bench.cc).
#ifndef OPFORGE_COMMON_BENCH_UTIL_H_
#define OPFORGE_COMMON_BENCH_UTIL_H_

#include <cstdint>
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

}  // namespace bench
}  // namespace opforge

#endif  // OPFORGE_COMMON_BENCH_UTIL_H_
