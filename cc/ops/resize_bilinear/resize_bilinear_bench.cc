// Google Benchmark of the ResizeBilinear core, no TensorFlow in the process: `make core-bench`.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/bench_util.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

// range(0): case (0: [8,52,52,128] -> 104x104, 1: [16,224,224,3] -> 512x512,
// 2: [8,416,416,32] -> 208x208), all half-pixel; range(1): threads.
ResizeBilinearParams Case(int64_t c) {
  const ResizeBilinearParams cases[3] = {{8, 52, 52, 128, 104, 104, false, true},
                                         {16, 224, 224, 3, 512, 512, false, true},
                                         {8, 416, 416, 32, 208, 208, false, true}};
  return cases[c];
}

int64_t InSize(const ResizeBilinearParams& p) {
  return p.batch * p.in_height * p.in_width * p.channels;
}
int64_t OutSize(const ResizeBilinearParams& p) {
  return p.batch * p.out_height * p.out_width * p.channels;
}

void BM_ResizeBilinearForward(benchmark::State& state) {
  const ResizeBilinearParams p = Case(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(InSize(p), 11);
  std::vector<float> out(static_cast<size_t>(OutSize(p)));
  bench::Run(state, (InSize(p) + OutSize(p)) * 4,
             [&] { ResizeBilinearForward<float>(p, x.data(), out.data(), parallel); });
}

void BM_ResizeBilinearBackward(benchmark::State& state) {
  const ResizeBilinearParams p = Case(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto g = bench::RandomFloats(OutSize(p), 12);
  std::vector<float> out(static_cast<size_t>(InSize(p)));
  bench::Run(state, (InSize(p) + OutSize(p)) * 4,
             [&] { ResizeBilinearBackward<float>(p, g.data(), out.data(), parallel); });
}

void Cases(benchmark::internal::Benchmark* b) {
  bench::WithThreads(b, {0, 1, 2});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_ResizeBilinearForward)->Apply(Cases);
BENCHMARK(BM_ResizeBilinearBackward)->Apply(Cases);

}  // namespace
}  // namespace opforge
