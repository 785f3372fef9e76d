// Google Benchmark of the Conv2DTranspose core, no TensorFlow in the process: `make core-bench`.
// The YOLO-neck shapes (SAME, stride 2), forward and each gradient, 1 and 2 threads
// (ThreadParallel). Reports floating-point operations per second (2 per multiply-add).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "common/bench_util.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace {

// Shape index: 0 = [8,13,13,512] 4x4 -> 256, 1 = [8,26,26,256] 4x4 -> 128,
// 2 = [1,104,104,64] 3x3 -> 64.
Conv2DTransposeParams Shape(int64_t index) {
  struct S {
    int64_t n, h, ci, k, co;
  };
  const S s[] = {{8, 13, 512, 4, 256}, {8, 26, 256, 4, 128}, {1, 104, 64, 3, 64}};
  const S& c = s[index];
  Conv2DTransposeAttrs attrs;
  attrs.strides = {1, 2, 2, 1};
  Conv2DTransposeParams p;
  const Status st = ValidateConv2DTranspose(attrs, {c.n, c.h, c.h, c.ci}, {c.k, c.k, c.co, c.ci},
                                            {c.n, 2 * c.h, 2 * c.h, c.co}, &p);
  if (!st.ok()) std::abort();
  return p;
}

enum Which { kForward, kInputGrad, kFilterGrad };

template <Which kWhich>
void BM_Conv2DTranspose(benchmark::State& state) {
  const Conv2DTransposeParams p = Shape(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const auto x = bench::RandomFloats(p.InputSize(), 1);
  const auto f = bench::RandomFloats(p.FilterSize(), 2);
  const auto g = bench::RandomFloats(p.OutputSize(), 3);
  std::vector<float> out(std::max({p.InputSize(), p.OutputSize(), p.FilterSize()}));
  for (auto _ : state) {
    if constexpr (kWhich == kForward) {
      Conv2DTransposeForward<float>(p, x.data(), f.data(), out.data(), parallel);
    } else if constexpr (kWhich == kInputGrad) {
      Conv2DTransposeInputGrad<float>(p, g.data(), f.data(), out.data(), parallel);
    } else {
      Conv2DTransposeFilterGrad<float>(p, x.data(), g.data(), out.data(), parallel);
    }
    benchmark::DoNotOptimize(out.data());
  }
  // Every (input pixel, tap, co, ci) is one multiply-add (edge taps included: an upper bound).
  const double flops = 2.0 * p.InputSize() * p.filter_h * p.filter_w * p.out_c;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void Shapes(benchmark::internal::Benchmark* b) {
  bench::WithThreads(b, {0, 1, 2});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_Conv2DTranspose<kForward>)->Apply(Shapes);
BENCHMARK(BM_Conv2DTranspose<kInputGrad>)->Apply(Shapes);
BENCHMARK(BM_Conv2DTranspose<kFilterGrad>)->Apply(Shapes);

}  // namespace
}  // namespace opforge
