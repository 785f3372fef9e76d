// The Conv2DTranspose CUDA kernels: forward pass, input gradient and filter gradient.
//
// Without a GPU the kernels' bodies (conv2d_transpose_gpu.h, the code the .cu runs) are run on
// the host: the element functions for every element, the filter gradient's blocks as 256
// cooperative fibers with a round of them for each __syncthreads (FiberBlock), in 32- and 64-bit
// index math, and the fibers in both orders (a race on shared memory would change the bits).
// With a GPU the kernels must give exactly those bits (same operations in the same order: the
// sums are fused multiply-adds, correctly rounded on both sides), on a non-blocking stream that
// alone is synchronised (as TensorFlow's).
//
// Accuracy, against a float64 reference of the definition (a scatter, independent of the
// kernels' gathers): a result is round_T(s_C), s_C the sum of its K terms in the accumulation
// type C (float for half, bfloat16 and float; double for double); half and bfloat16 products are
// exact in float. Summing K terms in any order in C errs by at most lambda * sqrt(K) * u_C *
// sum|terms| with probability 1 - 2K exp(-lambda^2 / 2) (Higham and Mary's probabilistic bound;
// lambda = 8 makes a false failure ~1e-11 per element); rounding to T adds half an ulp of T. So
// |result - reference| <= ulp_T(|reference| + e) + e, e = 8 sqrt(K) u_C sum|terms|. That is a
// few ulps of T where the old bound (1.6e-2 * (1 + |c|) * sqrt(K) for bfloat16) allowed whole
// terms to go missing: a host test checks that dropping one term of typical size fails it, and
// that the CPU kernel (another summation order) passes it. Terms with inf or NaN give inf or NaN
// in any order: those must match exactly.
//
// Large cases: over 2^20 filter elements; results past the grid-stride loops' first round
// (2^24 elements); over 2^31 elements (the int64 path) in half, with exact expectations,
// skipped when the device lacks the memory. Without a CUDA device the GPU tests say "skipped:
// no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <ucontext.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"
#include "ops/conv2d_transpose/conv2d_transpose_gpu.h"
#if defined(OPFORGE_SIMT_TEST)
#include "common/simt/simt_api.h"
#endif

namespace opforge {
namespace {

namespace gpu = conv2d_transpose_gpu;
using test::DeviceBuffer;
using test::DownloadOn;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::SyncStream;
using test::TestStream;
using test::TypeNames;
using test::UploadOn;
using test::Wide;

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// --- the kernels' bodies on the host ----------------------------------------------------------

// Element conversions on the host: exact widening, one round-to-nearest-even narrowing (as
// __half2float / __float2half_rn and their bfloat16 twins).
template <typename T>
struct HostCv {
  using C = Acc<T>;
  static C To(T v) { return static_cast<C>(Wide(v)); }
  static T From(C v) { return static_cast<T>(v); }
};

// One CUDA block's threads as cooperative fibers on the calling thread (ucontext): each runs
// until its next sync(), and one round of all of them is one __syncthreads (every thread
// finishes the code before a barrier before any runs the code after it). Rounds run the threads
// in index order, or with `reverse` from the last to the first: a block whose result depends on
// that order (a race on shared memory between two barriers) gives other bits. A thread that
// finishes while others still wait at a barrier (a barrier inside divergent code, which hangs
// or corrupts a real block) is reported by Run.
#if defined(OPFORGE_SIMT_TEST)
// On the SIMT runtime: its fibers (the same scheduling, without ucontext's system call and
// AddressSanitizer's stack clearing on every switch).
class FiberBlock {
 public:
  FiberBlock(int threads, bool reverse) : threads_(threads), reverse_(reverse) {}
  bool Run(const std::function<void(int)>& body) {
    const std::string report = simt::RunHostBlock(
        threads_, reverse_,
        [](int t, void* b) { (*static_cast<const std::function<void(int)>*>(b))(t); },
        const_cast<std::function<void(int)>*>(&body));
    return report.empty();
  }
  void Sync(int) { simt::HostSyncThreads(); }

 private:
  const int threads_;
  const bool reverse_;
};
#else
class FiberBlock {
 public:
  FiberBlock(int threads, bool reverse)
      : threads_(threads),
        reverse_(reverse),
        contexts_(static_cast<size_t>(threads)),
        stacks_(static_cast<size_t>(threads) * kStackBytes),
        done_(static_cast<size_t>(threads), false) {}

  // Runs body(thread) on every thread; false if the threads reached different barriers.
  bool Run(const std::function<void(int)>& body) {
    body_ = &body;
    for (int t = 0; t < threads_; ++t) {
      ucontext_t& c = contexts_[static_cast<size_t>(t)];
      getcontext(&c);
      c.uc_stack.ss_sp = stacks_.data() + static_cast<size_t>(t) * kStackBytes;
      c.uc_stack.ss_size = kStackBytes;
      c.uc_link = &scheduler_;
      makecontext(&c, &FiberBlock::Trampoline, 0);
    }
    FiberBlock* const outer = current_;
    current_ = this;
    bool uniform = true;
    for (int alive = threads_; alive > 0;) {
      int finished = 0;
      for (int k = 0; k < threads_; ++k) {
        const int t = reverse_ ? threads_ - 1 - k : k;
        if (done_[static_cast<size_t>(t)]) continue;
        running_ = t;
        swapcontext(&scheduler_, &contexts_[static_cast<size_t>(t)]);
        finished += done_[static_cast<size_t>(t)] ? 1 : 0;
      }
      uniform = uniform && (finished == 0 || finished == alive);
      alive -= finished;
    }
    current_ = outer;
    return uniform;
  }
  void Sync(int t) { swapcontext(&contexts_[static_cast<size_t>(t)], &scheduler_); }

 private:
  static constexpr size_t kStackBytes = 64 << 10;
  static void Trampoline() {
    FiberBlock* self = current_;
    const int t = self->running_;
    (*self->body_)(t);
    self->done_[static_cast<size_t>(t)] = true;
  }
  static thread_local FiberBlock* current_;

  const int threads_;
  const bool reverse_;
  std::vector<ucontext_t> contexts_;
  std::vector<char> stacks_;
  std::vector<bool> done_;
  ucontext_t scheduler_;
  int running_ = 0;
  const std::function<void(int)>* body_ = nullptr;
};
thread_local FiberBlock* FiberBlock::current_ = nullptr;
#endif

struct HostBlock {
  int index;
  FiberBlock* fibers;
  int thread() const { return index; }
  void sync() const { fibers->Sync(index); }
};

template <typename T, typename Index>
std::vector<T> HostForward(const Conv2DTransposeParams& p, const std::vector<T>& x,
                           const std::vector<T>& f) {
  const auto g = gpu::MakeGeometry<Index>(p);
  std::vector<T> y(static_cast<size_t>(p.OutputSize()));
  for (Index i = 0; i < static_cast<Index>(y.size()); ++i) {
    y[static_cast<size_t>(i)] = gpu::ForwardElement<Acc<T>, HostCv<T>>(g, i, x.data(), f.data());
  }
  return y;
}

template <typename T, typename Index>
std::vector<T> HostInputGrad(const Conv2DTransposeParams& p, const std::vector<T>& dy,
                             const std::vector<T>& f) {
  const auto g = gpu::MakeGeometry<Index>(p);
  std::vector<T> dx(static_cast<size_t>(p.InputSize()));
  for (Index i = 0; i < static_cast<Index>(dx.size()); ++i) {
    dx[static_cast<size_t>(i)] =
        gpu::InputGradElement<Acc<T>, HostCv<T>>(g, i, dy.data(), f.data());
  }
  return dx;
}

// The filter gradient as the GPU computes it: one emulated block of kFilterGradThreads threads
// takes every unit in turn (the grid does not change the result), then the slices are added.
// Fails the current test if the block's threads reach different barriers.
template <typename T, typename Index>
std::vector<T> HostFilterGrad(const Conv2DTransposeParams& p, const std::vector<T>& x,
                              const std::vector<T>& dy, bool reverse = false) {
  using C = Acc<T>;
  std::vector<T> df(static_cast<size_t>(p.FilterSize()), T(0));
  if (p.FilterSize() == 0 || p.batch * p.in_h * p.in_w == 0 || p.OutputSize() == 0) return df;
  const gpu::FilterGradPlan plan = gpu::MakeFilterGradPlan(p);
  const auto g = gpu::MakeGeometry<Index>(p);
  const auto args = gpu::MakeFilterGradArgs<Index>(plan, p);
  std::vector<C> partial(static_cast<size_t>(gpu::FilterGradScratchElements(plan, p)));
  std::vector<C> tile(gpu::kFilterGradTileElements);
  std::vector<Index> g_off(gpu::kFilterGradMaxStagePixels), in_off(gpu::kFilterGradMaxStagePixels);
  FiberBlock block(gpu::kFilterGradThreads, reverse);
  const bool uniform = block.Run([&](int t) {
    const HostBlock thread{t, &block};
    for (int64_t unit = 0; unit < plan.units; ++unit) {
      gpu::FilterGradUnit<C, HostCv<T>>(thread, g, args, unit, x.data(), dy.data(), df.data(),
                                        partial.empty() ? nullptr : partial.data(), tile.data(),
                                        g_off.data(), in_off.data());
    }
  });
  EXPECT_TRUE(uniform) << "the block's threads reached different barriers";
  if (!partial.empty()) {
    for (Index e = 0; e < static_cast<Index>(df.size()); ++e) {
      df[static_cast<size_t>(e)] = gpu::FilterGradSumElement<C, HostCv<T>, T>(
          e, static_cast<Index>(p.FilterSize()), static_cast<Index>(plan.slices), partial.data());
    }
  }
  return df;
}

// --- cases, data and the float64 reference ----------------------------------------------------

struct Case {
  std::vector<int64_t> input, filter, output;
  std::vector<int64_t> strides, dilations;
  std::string padding;
  std::vector<int64_t> explicit_paddings;
  std::string data_format;
};

std::string Describe(const Case& c) {
  return "input " + ShapeString(c.input) + " filter " + ShapeString(c.filter) + " output " +
         ShapeString(c.output) + " strides " + ShapeString(c.strides) + " dilations " +
         ShapeString(c.dilations) + " " + c.padding + " " + c.data_format;
}

Conv2DTransposeParams ParamsOf(const Case& c) {
  Conv2DTransposeAttrs a;
  a.strides = c.strides;
  a.dilations = c.dilations;
  a.padding = c.padding;
  a.explicit_paddings = c.explicit_paddings;
  a.data_format = c.data_format;
  Conv2DTransposeParams p;
  const Status s = ValidateConv2DTranspose(a, c.input, c.filter, c.output, &p);
  EXPECT_TRUE(s.ok()) << s.message() << " " << Describe(c);
  return p;
}

// Strides, dilations, paddings and both layouts, and the filter gradient's tilings: tiles of
// 32 x 32 channels (4 outputs a thread) with partial tiles, narrow tiles with several pixel
// lanes, 3x3x1x1 (256 lanes), and pixels split into several slices.
std::vector<Case> Cases() {
  const std::vector<int64_t> s1 = {1, 1, 1, 1}, s2 = {1, 2, 2, 1}, none = {};
  return {
      {{2, 13, 13, 32}, {4, 4, 16, 32}, {2, 26, 26, 16}, s2, s1, "SAME", none, "NHWC"},
      {{1, 5, 7, 3}, {3, 3, 4, 3}, {1, 11, 16, 4}, s2, s1, "VALID", none, "NHWC"},
      {{2, 6, 5, 4}, {5, 5, 3, 4}, {2, 6, 5, 3}, s1, {1, 2, 2, 1}, "SAME", none, "NHWC"},
      {{1, 4, 4, 3},
       {3, 3, 2, 3},
       {1, 8, 9, 2},
       s2,
       s1,
       "EXPLICIT",
       {0, 0, 1, 0, 0, 1, 0, 0},
       "NHWC"},
      {{2, 3, 5, 4}, {3, 3, 2, 3}, {2, 2, 9, 8}, {1, 1, 2, 2}, s1, "SAME", none, "NCHW"},
      {{1, 2, 4, 3},
       {2, 3, 3, 2},
       {1, 3, 9, 10},
       {1, 1, 2, 3},
       {1, 1, 2, 1},
       "VALID",
       none,
       "NCHW"},
      // 3x3x1x1 over 3200 pixels: 256 lanes, 4 slices.
      {{2, 40, 40, 1}, {3, 3, 1, 1}, {2, 40, 40, 1}, s1, s1, "SAME", none, "NHWC"},
      // 40 x 40 channels: 32 x 32 tiles and partial ones, 2 slices.
      {{2, 24, 24, 40}, {3, 3, 40, 40}, {2, 24, 24, 40}, s1, s1, "SAME", none, "NHWC"},
      // Narrow tiles (4 x 32: 2 lanes; 32 x 2: 4 lanes), NCHW loads, 2 slices.
      {{1, 30, 50, 35}, {2, 2, 3, 30}, {1, 3, 100, 70}, {1, 1, 2, 2}, s1, "VALID", none, "NCHW"},
      {{3, 21, 19, 2}, {3, 2, 33, 2}, {3, 21, 19, 33}, s1, s1, "SAME", none, "NHWC"},
  };
}

// Values uniform in [-1, 1]; with `specials`, a few of every tensor's elements replaced by
// +-inf, NaN, -0 and +-the smallest subnormal.
template <typename T>
std::vector<T> RandomTensor(std::mt19937_64& rng, int64_t n, bool specials) {
  std::vector<T> v = test::UniformVector<T>(rng, n, -1.0, 1.0);
  if (specials && n > 0) {
    using L = std::numeric_limits<T>;
    const std::vector<T> pool = {L::infinity(), -L::infinity(),  L::quiet_NaN(),
                                 T(-0.0f),      L::denorm_min(), -L::denorm_min()};
    std::uniform_int_distribution<int64_t> where(0, n - 1);
    const int64_t count = std::max<int64_t>(2, n / 300);
    for (int64_t k = 0; k < count; ++k) {
      v[static_cast<size_t>(where(rng))] = pool[static_cast<size_t>(k) % pool.size()];
    }
  }
  return v;
}

template <typename T>
struct Data {
  std::vector<T> x, f, dy;  // input, filter, the output's gradient
};

template <typename T>
Data<T> RandomData(const Conv2DTransposeParams& p, uint64_t seed, bool specials) {
  std::mt19937_64 rng(seed);
  Data<T> d;
  d.x = RandomTensor<T>(rng, p.InputSize(), specials);
  d.f = RandomTensor<T>(rng, p.FilterSize(), specials);
  d.dy = RandomTensor<T>(rng, p.OutputSize(), specials);
  return d;
}

// Per result element: the float64 sum of its terms, the sum of their magnitudes, their count.
struct Ref {
  std::vector<double> sum, abs_sum;
  std::vector<int64_t> terms;
  explicit Ref(int64_t n)
      : sum(static_cast<size_t>(n)),
        abs_sum(static_cast<size_t>(n)),
        terms(static_cast<size_t>(n)) {}
  void Add(int64_t i, double v) {
    sum[static_cast<size_t>(i)] += v;
    abs_sum[static_cast<size_t>(i)] += std::abs(v);
    ++terms[static_cast<size_t>(i)];
  }
};

struct Refs {
  Ref y, dx, df;
};

int64_t RefOffset(bool nchw, int64_t b, int64_t y, int64_t x, int64_t c, int64_t h, int64_t w,
                  int64_t ch) {
  return nchw ? ((b * ch + c) * h + y) * w + x : ((b * h + y) * w + x) * ch + c;
}

// The definition, as a scatter: input pixel (b, ih, iw) with tap (fh, fw) reaches output
// (b, ih*sh - pt + fh*dh, iw*sw - pl + fw*dw) when that is inside the output; every
// (co, ci) pair there is one term of the forward output, the input gradient and the filter
// gradient. With `filter_grad_only`, the filter gradient's sums alone (y and dx stay zero).
template <typename T>
Refs Reference(const Conv2DTransposeParams& p, const Data<T>& d, bool filter_grad_only = false) {
  Refs r{Ref(p.OutputSize()), Ref(p.InputSize()), Ref(p.FilterSize())};
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t ih = 0; ih < p.in_h; ++ih) {
      for (int64_t iw = 0; iw < p.in_w; ++iw) {
        for (int64_t fh = 0; fh < p.filter_h; ++fh) {
          const int64_t h = ih * p.stride_h - p.pad_top + fh * p.dilation_h;
          if (h < 0 || h >= p.out_h) continue;
          for (int64_t fw = 0; fw < p.filter_w; ++fw) {
            const int64_t w = iw * p.stride_w - p.pad_left + fw * p.dilation_w;
            if (w < 0 || w >= p.out_w) continue;
            for (int64_t co = 0; co < p.out_c; ++co) {
              const int64_t o = RefOffset(p.nchw, b, h, w, co, p.out_h, p.out_w, p.out_c);
              const double gv = Wide(d.dy[static_cast<size_t>(o)]);
              for (int64_t ci = 0; ci < p.in_c; ++ci) {
                const int64_t i = RefOffset(p.nchw, b, ih, iw, ci, p.in_h, p.in_w, p.in_c);
                const int64_t k = ((fh * p.filter_w + fw) * p.out_c + co) * p.in_c + ci;
                const double xv = Wide(d.x[static_cast<size_t>(i)]);
                r.df.Add(k, gv * xv);
                if (filter_grad_only) continue;
                const double fv = Wide(d.f[static_cast<size_t>(k)]);
                r.y.Add(o, xv * fv);
                r.dx.Add(i, gv * fv);
              }
            }
          }
        }
      }
    }
  }
  return r;
}

// --- the tolerance ----------------------------------------------------------------------------

template <typename T>
int MantissaBits() {
  if constexpr (std::is_same_v<T, double>) return 52;
  if constexpr (std::is_same_v<T, float>) return 23;
  if constexpr (std::is_same_v<T, Eigen::half>) return 10;
  return 7;
}

// The spacing of T's values at magnitude x (its subnormals' below the smallest normal).
template <typename T>
double UlpOf(double x) {
  const double min_normal = Wide(std::numeric_limits<T>::min());
  if (x < min_normal) return Wide(std::numeric_limits<T>::denorm_min());
  int e = 0;
  std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 1 - MantissaBits<T>());
}

// See the top: ulp_T(|ref| + e) + e, e = 8 sqrt(K) u_C sum|terms|.
template <typename T>
double Tolerance(double ref, double abs_sum, int64_t terms) {
  const double u = std::is_same_v<Acc<T>, double> ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const double e = 8.0 * std::sqrt(static_cast<double>(std::max<int64_t>(terms, 1))) * u * abs_sum;
  return UlpOf<T>(std::abs(ref) + e) + e;
}

template <typename T>
bool WithinTolerance(T got, const Ref& ref, size_t i) {
  const double r = ref.sum[i], g = Wide(got);
  if (std::isnan(r)) return std::isnan(g);
  if (std::isinf(r)) return g == r;
  return std::isfinite(g) && std::abs(g - r) <= Tolerance<T>(r, ref.abs_sum[i], ref.terms[i]);
}

template <typename T>
::testing::AssertionResult Close(const std::vector<T>& got, const Ref& ref) {
  if (got.size() != ref.sum.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.sum.size();
  }
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (WithinTolerance(got[i], ref, i)) continue;
    if (count++ < 8) {
      failure << "\n  [" << i << "] got " << test::Describe(got[i]) << ", float64 " << ref.sum[i]
              << " (" << ref.terms[i] << " terms, sum of magnitudes " << ref.abs_sum[i]
              << ", tolerance " << Tolerance<T>(ref.sum[i], ref.abs_sum[i], ref.terms[i]) << ")";
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << got.size() << " elements off";
}

// --- host tests (no GPU needed) ---------------------------------------------------------------

template <typename T>
class Conv2DTransposeGpuBodiesOnHost : public ::testing::Test {};
TYPED_TEST_SUITE(Conv2DTransposeGpuBodiesOnHost, FloatTypes, TypeNames);

// The kernels' bodies, run on the host in both index types, are within the tolerance of the
// float64 reference, ordinary and special values alike; so is the CPU kernel (which sums in
// other orders: the tolerance is not tighter than rounding).
TYPED_TEST(Conv2DTransposeGpuBodiesOnHost, MatchFloat64Reference) {
  using T = TypeParam;
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    for (bool specials : {false, true}) {
      SCOPED_TRACE(Describe(c) + (specials ? " with inf, NaN, -0, subnormals" : ""));
      const Conv2DTransposeParams p = ParamsOf(c);
      const Data<T> d = RandomData<T>(p, seed++, specials);
      const Refs ref = Reference(p, d);
      const auto y = HostForward<T, int32_t>(p, d.x, d.f);
      const auto dx = HostInputGrad<T, int32_t>(p, d.dy, d.f);
      const auto df = HostFilterGrad<T, int32_t>(p, d.x, d.dy);
      EXPECT_TRUE(Close(y, ref.y)) << "forward";
      EXPECT_TRUE(Close(dx, ref.dx)) << "input gradient";
      EXPECT_TRUE(Close(df, ref.df)) << "filter gradient";
      // On the SIMT runtime the kernels themselves run these two checks: the order check
      // reverses every block's threads, and the large case takes the 64-bit path.
      if (!cuda::kSimtGeometry) {
        // The same operations in 64-bit index math: the same bits.
        EXPECT_TRUE(SameBitsOrBothNan((HostForward<T, int64_t>(p, d.x, d.f)), y));
        EXPECT_TRUE(SameBitsOrBothNan((HostInputGrad<T, int64_t>(p, d.dy, d.f)), dx));
        EXPECT_TRUE(SameBitsOrBothNan((HostFilterGrad<T, int64_t>(p, d.x, d.dy)), df));
        // The block's threads in the opposite order between barriers: the same bits (no race
        // on shared memory).
        EXPECT_TRUE(SameBitsOrBothNan((HostFilterGrad<T, int32_t>(p, d.x, d.dy, true)), df));
      }

      std::vector<T> cy(y.size()), cdx(dx.size()), cdf(df.size());
      Conv2DTransposeForward<T>(p, d.x.data(), d.f.data(), cy.data(), SerialParallel());
      Conv2DTransposeInputGrad<T>(p, d.dy.data(), d.f.data(), cdx.data(), SerialParallel());
      Conv2DTransposeFilterGrad<T>(p, d.x.data(), d.dy.data(), cdf.data(), SerialParallel());
      EXPECT_TRUE(Close(cy, ref.y)) << "CPU forward";
      EXPECT_TRUE(Close(cdx, ref.dx)) << "CPU input gradient";
      EXPECT_TRUE(Close(cdf, ref.df)) << "CPU filter gradient";
    }
  }
}

// The tolerance catches a missing term: with one term of median size left out of each sum of
// the filter gradient (correctly rounded to T, as a kernel that skipped it would at best give),
// at least 90% of the elements fail it, in every type.
TYPED_TEST(Conv2DTransposeGpuBodiesOnHost, ToleranceCatchesADroppedTerm) {
  using T = TypeParam;
  uint64_t seed = 50;
  int64_t checked = 0, caught = 0;
  for (const Case& c : Cases()) {
    const Conv2DTransposeParams p = ParamsOf(c);
    const Data<T> d = RandomData<T>(p, seed++, false);
    const Refs ref = Reference(p, d);
    // Each filter element's terms, gathered again.
    std::vector<std::vector<double>> terms(static_cast<size_t>(p.FilterSize()));
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t ih = 0; ih < p.in_h; ++ih) {
        for (int64_t iw = 0; iw < p.in_w; ++iw) {
          for (int64_t fh = 0; fh < p.filter_h; ++fh) {
            for (int64_t fw = 0; fw < p.filter_w; ++fw) {
              const int64_t h = ih * p.stride_h - p.pad_top + fh * p.dilation_h;
              const int64_t w = iw * p.stride_w - p.pad_left + fw * p.dilation_w;
              if (h < 0 || h >= p.out_h || w < 0 || w >= p.out_w) continue;
              for (int64_t co = 0; co < p.out_c; ++co) {
                for (int64_t ci = 0; ci < p.in_c; ++ci) {
                  const int64_t o = RefOffset(p.nchw, b, h, w, co, p.out_h, p.out_w, p.out_c);
                  const int64_t i = RefOffset(p.nchw, b, ih, iw, ci, p.in_h, p.in_w, p.in_c);
                  const int64_t k = ((fh * p.filter_w + fw) * p.out_c + co) * p.in_c + ci;
                  terms[static_cast<size_t>(k)].push_back(Wide(d.dy[static_cast<size_t>(o)]) *
                                                          Wide(d.x[static_cast<size_t>(i)]));
                }
              }
            }
          }
        }
      }
    }
    for (size_t k = 0; k < terms.size(); ++k) {
      std::vector<double>& t = terms[k];
      if (t.size() < 4) continue;
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end(),
                       [](double a, double b) { return std::abs(a) < std::abs(b); });
      const T dropped = static_cast<T>(ref.df.sum[k] - t[t.size() / 2]);
      ++checked;
      caught += !WithinTolerance(dropped, ref.df, k);
    }
  }
  ASSERT_GT(checked, 1000);
  EXPECT_GE(static_cast<double>(caught), 0.9 * static_cast<double>(checked))
      << caught << " of " << checked << " sums with a term missing fail the tolerance";
}

// The filter gradient's tiling covers every pixel, channel and tap once, within its shared
// memory, with bounded scratch, and gives even a 3x3x1x1 filter ~1024 blocks.
TEST(Conv2DTransposeGpuPlan, CoversEverythingOnce) {
  struct Shape {
    int64_t n, h, w, co, ci, fh, fw;
  };
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 1, 1},         {64, 128, 128, 1, 1, 3, 3}, {2, 13, 13, 16, 32, 4, 4},
      {8, 52, 52, 512, 512, 3, 3},   {1, 6, 6, 512, 256, 3, 3},  {3, 21, 19, 33, 2, 3, 2},
      {1, 46342, 46342, 1, 1, 1, 1}, {1, 7, 7, 3, 1000, 5, 5},   {16, 26, 26, 255, 128, 1, 1},
      {1, 1, 1, 4096, 4096, 1, 1},   {4, 100, 100, 1, 64, 2, 2}, {2, 3, 3, 7, 5, 11, 13},
  };
  for (const Shape& s : shapes) {
    Conv2DTransposeParams p;
    p.batch = s.n;
    p.in_h = p.out_h = s.h;
    p.in_w = p.out_w = s.w;
    p.out_c = s.co;
    p.in_c = s.ci;
    p.filter_h = s.fh;
    p.filter_w = s.fw;
    const gpu::FilterGradPlan plan = gpu::MakeFilterGradPlan(p);
    SCOPED_TRACE(::testing::Message() << s.n << "x" << s.h << "x" << s.w << " co " << s.co << " ci "
                                      << s.ci << " filter " << s.fh << "x" << s.fw);
    const int tm = 1 << plan.log_tm, tn = 1 << plan.log_tn, kp = 1 << plan.log_kp;
    const int e = 1 << plan.log_e, r = 1 << plan.log_r;
    EXPECT_EQ(e * r, gpu::kFilterGradThreads);
    EXPECT_EQ((tm / plan.jm) * (tn / plan.jn), e);
    EXPECT_LE(tm, 32);
    EXPECT_LE(tn, 32);
    EXPECT_EQ(kp % r, 0);
    EXPECT_LE(kp, gpu::kFilterGradMaxStagePixels);
    EXPECT_LE(kp * (tm + 1) + kp * (tn + 1), gpu::kFilterGradTileElements);
    EXPECT_GE(gpu::kFilterGradTileElements, gpu::kFilterGradThreads);  // the lanes' tree
    EXPECT_GE(plan.co_tiles * tm, s.co);
    EXPECT_LT((plan.co_tiles - 1) * tm, s.co);
    EXPECT_GE(plan.ci_tiles * tn, s.ci);
    EXPECT_LT((plan.ci_tiles - 1) * tn, s.ci);
    EXPECT_EQ(plan.slice_pixels % kp, 0);
    EXPECT_GE(plan.slices * plan.slice_pixels, plan.pixels);
    EXPECT_LT((plan.slices - 1) * plan.slice_pixels, plan.pixels);
    EXPECT_EQ(plan.units, s.fh * s.fw * plan.co_tiles * plan.ci_tiles * plan.slices);
    EXPECT_LE(gpu::FilterGradScratchElements(plan, p) * 8, int64_t{64} << 20);
    if (plan.pixels >= 1 << 20) {
      EXPECT_GE(plan.units, 1000);
    }
    // 32-bit index math exactly where everything fits (here: all but the 2^31-pixel shape).
    EXPECT_EQ(gpu::LargestIndex(p, gpu::FilterGradScratchElements(plan, p)) > INT32_MAX,
              p.OutputSize() > INT32_MAX);
  }
}

// Too little scratch memory is an error (no launch: no GPU needed).
TEST(Conv2DTransposeGpuPlan, TooLittleScratchIsAnError) {
  const Conv2DTransposeParams p = ParamsOf(Cases()[6]);  // 4 slices
  const int64_t need = Conv2DTransposeFilterGradGpuScratchBytes(DType::kFloat, p);
  ASSERT_GT(need, 0);
  EXPECT_EQ(Conv2DTransposeFilterGradGpuScratchBytes(DType::kDouble, p), 2 * need);
  const Status s = Conv2DTransposeFilterGradGpu(DType::kFloat, p, nullptr, nullptr, nullptr,
                                                nullptr, need - 1, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(test::Contains(s.message(), std::to_string(need) + " bytes of scratch"))
      << s.message();
  // One slice: none needed.
  EXPECT_EQ(Conv2DTransposeFilterGradGpuScratchBytes(DType::kFloat, ParamsOf(Cases()[0])), 0);
}

// --- GPU tests --------------------------------------------------------------------------------

template <typename T>
struct Results {
  std::vector<T> y, dx, df;
};

// The three kernels on `stream`, from inputs copied on it; outputs filled with 0xFF bytes first
// (NaN in every float type: an element left unwritten shows). With `filter_grad_only`, the
// filter gradient's kernels alone (y and dx stay NaN).
template <typename T>
void RunGpu(const Conv2DTransposeParams& p, const Data<T>& d, cudaStream_t stream, Results<T>* out,
            bool filter_grad_only = false) {
  const DType dtype = DTypeOf<T>::value;
  DeviceBuffer x, f, dy, y, dx, df, scratch;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, d.x, &x));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, d.f, &f));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, d.dy, &dy));
  out->y.assign(static_cast<size_t>(p.OutputSize()), T(0));
  out->dx.assign(static_cast<size_t>(p.InputSize()), T(0));
  out->df.assign(static_cast<size_t>(p.FilterSize()), T(0));
  const std::pair<DeviceBuffer*, size_t> outputs[] = {{&y, out->y.size() * sizeof(T)},
                                                      {&dx, out->dx.size() * sizeof(T)},
                                                      {&df, out->df.size() * sizeof(T)}};
  for (const auto& [buffer, bytes] : outputs) {
    OPFORGE_ASSERT_CUDA(buffer->Allocate(bytes));
    if (bytes > 0) OPFORGE_ASSERT_CUDA(cudaMemsetAsync(buffer->get(), 0xFF, bytes, stream));
  }
  const int64_t scratch_bytes = Conv2DTransposeFilterGradGpuScratchBytes(dtype, p);
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  if (!filter_grad_only) {
    OPFORGE_ASSERT_OK(Conv2DTransposeForwardGpu(dtype, p, x.get(), f.get(), y.get(), stream));
    OPFORGE_ASSERT_OK(Conv2DTransposeInputGradGpu(dtype, p, dy.get(), f.get(), dx.get(), stream));
  }
  OPFORGE_ASSERT_OK(Conv2DTransposeFilterGradGpu(dtype, p, x.get(), dy.get(), df.get(),
                                                 scratch.get(), scratch_bytes, stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, y, &out->y));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dx, &out->dx));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, df, &out->df));
}

template <typename T>
class Conv2DTransposeCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(Conv2DTransposeCudaTest, FloatTypes, TypeNames);

// Every case, with and without special values in every input: the bits of the kernels' bodies
// run on the host, the same bits on a second run. (Within the tolerance of the float64
// reference, then: MatchFloat64Reference above compares those host runs with it, over the same
// cases and the same random data.)
TYPED_TEST(Conv2DTransposeCudaTest, SameBitsAsTheHostRunAndEveryRun) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    for (bool specials : {false, true}) {
      SCOPED_TRACE(Describe(c) + (specials ? " with inf, NaN, -0, subnormals" : ""));
      const Conv2DTransposeParams p = ParamsOf(c);
      const Data<T> d = RandomData<T>(p, seed++, specials);
      Results<T> gpu, again;
      ASSERT_NO_FATAL_FAILURE(RunGpu(p, d, stream.get(), &gpu));
      EXPECT_TRUE(SameBitsOrBothNan(gpu.y, (HostForward<T, int32_t>(p, d.x, d.f)))) << "forward";
      EXPECT_TRUE(SameBitsOrBothNan(gpu.dx, (HostInputGrad<T, int32_t>(p, d.dy, d.f))))
          << "input gradient";
      EXPECT_TRUE(SameBitsOrBothNan(gpu.df, (HostFilterGrad<T, int32_t>(p, d.x, d.dy))))
          << "filter gradient";
      // A second run (on the SIMT runtime the same bits by construction; its order check runs
      // each kernel's first launches in two orders instead).
      if (!cuda::kSimtGeometry) {
        ASSERT_NO_FATAL_FAILURE(RunGpu(p, d, stream.get(), &again));
        EXPECT_TRUE(SameBitsOrBothNan(again.df, gpu.df)) << "filter gradient, second run";
      }
    }
  }
}

// A filter gradient made of a single nonzero term (all else exact zeros) at the first and last
// pixel of stages and slices: it arrives whole, in every element it belongs to and nowhere
// else (a lost partial sum or a pixel counted twice shows as a wrong integer).
TYPED_TEST(Conv2DTransposeCudaTest, FilterGradKeepsASingleTerm) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  for (int which : {6, 7, 8}) {  // 4 slices of 256-pixel stages; 2 slices; NCHW, 2 slices
    const Case c = Cases()[static_cast<size_t>(which)];  // a copy: Cases() is a temporary
    const Conv2DTransposeParams p = ParamsOf(c);
    const gpu::FilterGradPlan plan = gpu::MakeFilterGradPlan(p);
    const int64_t kp = int64_t{1} << plan.log_kp, l = plan.slice_pixels;
    for (int64_t q : {int64_t{0}, kp - 1, kp, l - 1, l, 2 * l - 1, plan.pixels - 1}) {
      if (q >= plan.pixels) continue;
      SCOPED_TRACE(::testing::Message() << Describe(c) << ": pixel " << q);
      Data<T> d;
      d.x.assign(static_cast<size_t>(p.InputSize()), T(1.0f));
      d.f.assign(static_cast<size_t>(p.FilterSize()), T(0.0f));
      d.dy.assign(static_cast<size_t>(p.OutputSize()), T(0.0f));
      // The output position of pixel q under tap (0, 0), if inside; else under the centre tap.
      const int64_t b = q / (p.in_h * p.in_w), ih = (q / p.in_w) % p.in_h, iw = q % p.in_w;
      for (int64_t fh : {int64_t{0}, p.filter_h / 2}) {
        const int64_t h = ih * p.stride_h - p.pad_top + fh * p.dilation_h;
        const int64_t w = iw * p.stride_w - p.pad_left + fh * p.dilation_w;
        if (h < 0 || h >= p.out_h || w < 0 || w >= p.out_w) continue;
        d.dy[static_cast<size_t>(RefOffset(p.nchw, b, h, w, 0, p.out_h, p.out_w, p.out_c))] =
            T(3.0f);
        break;
      }
      Results<T> gpu;
      ASSERT_NO_FATAL_FAILURE(RunGpu(p, d, stream.get(), &gpu, /*filter_grad_only=*/true));
      const Refs ref = Reference(p, d, /*filter_grad_only=*/true);
      std::vector<T> want(ref.df.sum.size());
      double total = 0;
      for (size_t k = 0; k < want.size(); ++k) {
        want[k] = static_cast<T>(ref.df.sum[k]);  // small integers: exact in every type
        total += ref.df.sum[k];
      }
      EXPECT_GT(total, 0.0);
      EXPECT_TRUE(test::SameBits(gpu.df, want));
    }
  }
}

// The empty batch: the forward pass and the input gradient have nothing to write, the filter
// gradient is zero (and written: its buffer starts as NaN).
TYPED_TEST(Conv2DTransposeCudaTest, EmptyBatch) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  Conv2DTransposeAttrs a;
  for (const std::string format : {"NHWC", "NCHW"}) {
    a.data_format = format;
    a.strides =
        format == "NHWC" ? std::vector<int64_t>{1, 2, 2, 1} : std::vector<int64_t>{1, 1, 2, 2};
    Conv2DTransposeParams p;
    OPFORGE_ASSERT_OK(ValidateConv2DTranspose(
        a, format == "NHWC" ? std::vector<int64_t>{0, 3, 3, 2} : std::vector<int64_t>{0, 2, 3, 3},
        {2, 2, 3, 2},
        format == "NHWC" ? std::vector<int64_t>{0, 6, 6, 3} : std::vector<int64_t>{0, 3, 6, 6},
        &p));
    Data<T> d;
    d.f.assign(static_cast<size_t>(p.FilterSize()), T(1.0f));
    Results<T> gpu;
    ASSERT_NO_FATAL_FAILURE(RunGpu(p, d, stream.get(), &gpu));
    EXPECT_TRUE(gpu.y.empty());
    EXPECT_TRUE(gpu.dx.empty());
    EXPECT_TRUE(test::SameBits(gpu.df, std::vector<T>(gpu.df.size(), T(0.0f))));
    EXPECT_EQ(gpu.df.size(), 24u);
  }
}

TEST(Conv2DTransposeCudaErrorTest, IntegerTypesHaveNoKernel) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  Conv2DTransposeAttrs a;
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a, {1, 2, 2, 1}, {1, 1, 1, 1}, {1, 2, 2, 1}, &p));
  const Status s = Conv2DTransposeForwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s.message();
}

// Large cases (float): more than 2^20 filter elements (1152 tiles, one slice), and results
// past the first round of the grid-stride loops (Blocks() stops at 2^16 blocks of 256 threads:
// 2^24 elements) with a filter gradient of 1M terms per element in 256 slices. On the SIMT
// runtime the grids stop at cuda::kMaxGridBlocks (64) blocks and the filter gradient's at 8, so
// smaller shapes take the same paths: 36 tiles over 8 blocks (each block loops over units), and
// outputs of 5 grid-stride rounds with a filter gradient in 4 slices.
TEST(Conv2DTransposeCudaLarge, OverTwoTo20FilterElementsAndGridStrideLoops) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = float;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
#if defined(OPFORGE_SIMT_TEST)
  const int64_t channels = 64, side = 64;
#else
  const int64_t channels = 256, side = 1024;
#endif
  const std::vector<Case> cases = {
      {{1, 6, 6, channels},
       {3, 3, 2 * channels, channels},
       {1, 6, 6, 2 * channels},
       {1, 1, 1, 1},
       {1, 1, 1, 1},
       "SAME",
       {},
       "NHWC"},
      {{1, side, side, 17},
       {2, 2, 5, 17},
       {1, 2 * side, 2 * side, 5},
       {1, 2, 2, 1},
       {1, 1, 1, 1},
       "VALID",
       {},
       "NHWC"},
  };
  uint64_t seed = 7;
  for (const Case& c : cases) {
    SCOPED_TRACE(Describe(c));
    const Conv2DTransposeParams p = ParamsOf(c);
    const Data<T> d = RandomData<T>(p, seed++, false);
    Results<T> gpu;
    ASSERT_NO_FATAL_FAILURE(RunGpu(p, d, stream.get(), &gpu));
    const Refs ref = Reference(p, d);
    EXPECT_TRUE(Close(gpu.y, ref.y)) << "forward";
    EXPECT_TRUE(Close(gpu.dx, ref.dx)) << "input gradient";
    EXPECT_TRUE(Close(gpu.df, ref.df)) << "filter gradient";
  }
}

// Over 2^31 elements, in half (the int64 index path), with exact expectations:
//   forward: input [1, 23171, 23171, 1] of small integers, a 2x2 filter {1, 2, 3, 4}, stride 2:
//     output [1, 46342, 46342, 1] (2^31 + 97316 elements), y[2i + a, 2j + b] = x[i, j] * f[a, b];
//   input gradient of that output: dx = x * (1 + 4 + 9 + 16), read from past 2^31;
//   filter gradient, 1x1, stride 1, over the 2^31 + 97316 pixels of y as the input and a grad
//     that is zero but for 1s at pixels on both sides of 2^31: the sum of y there.
// Skipped, saying so, when the device cannot hold the ~11 GB. On the SIMT runtime the 64-bit path
// starts past cuda::kInt32IndexLimit (2^22 - 1): input [1, 1030, 1030, 1], output 2^22 + 49296.
TEST(Conv2DTransposeCudaLarge, OverTwoTo31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = Eigen::half;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
#if defined(OPFORGE_SIMT_TEST)
  const int64_t in_side = 1030;
#else
  const int64_t in_side = 23171;
#endif
  const int64_t out_side = 2 * in_side;
  Conv2DTransposeAttrs a;
  a.strides = {1, 2, 2, 1};
  a.padding = "VALID";
  Conv2DTransposeParams p;
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a, {1, in_side, in_side, 1}, {2, 2, 1, 1},
                                            {1, out_side, out_side, 1}, &p));
  ASSERT_GT(p.OutputSize(), cuda::kInt32IndexLimit + 1);
  const size_t n_in = static_cast<size_t>(p.InputSize()),
               n_out = static_cast<size_t>(p.OutputSize());

  DeviceBuffer x, f, y, dx, dy2, df2;
  if (!test::TryAllocate(&y, n_out * sizeof(T)) || !test::TryAllocate(&dy2, n_out * sizeof(T)) ||
      !test::TryAllocate(&x, n_in * sizeof(T)) || !test::TryAllocate(&dx, n_in * sizeof(T))) {
    GTEST_SKIP() << "skipped: the device cannot hold the ~11 GB of this case";
  }
  auto value = [](size_t i) { return static_cast<int>((i * 7 + i / 23171) % 61); };
  {
    std::vector<T> host_x(n_in);
    for (size_t i = 0; i < n_in; ++i) host_x[i] = T(static_cast<float>(value(i)));
    OPFORGE_ASSERT_CUDA(cudaMemcpyAsync(x.get(), host_x.data(), n_in * sizeof(T),
                                        cudaMemcpyHostToDevice, stream.get()));
    ASSERT_NO_FATAL_FAILURE(SyncStream(stream.get()));
  }
  ASSERT_NO_FATAL_FAILURE(
      UploadOn(stream.get(), std::vector<T>{T(1.0f), T(2.0f), T(3.0f), T(4.0f)}, &f));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(y.get(), 0xFF, n_out * sizeof(T), stream.get()));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dx.get(), 0xFF, n_in * sizeof(T), stream.get()));
  OPFORGE_ASSERT_OK(
      Conv2DTransposeForwardGpu(DType::kHalf, p, x.get(), f.get(), y.get(), stream.get()));
  OPFORGE_ASSERT_OK(
      Conv2DTransposeInputGradGpu(DType::kHalf, p, y.get(), f.get(), dx.get(), stream.get()));

  // The bits of the small integers 0..2048 in half, to compare without converting.
  std::vector<uint16_t> bits(2049);
  for (int v = 0; v <= 2048; ++v)
    bits[static_cast<size_t>(v)] = test::Bits(T(static_cast<float>(v)));
  auto check_rows = [&](const std::vector<uint16_t>& got, int64_t rows, int64_t side,
                        auto expected) {
    // Rows split over the host's threads; returns the first mismatch (or -1).
    const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<int64_t> first(static_cast<size_t>(threads), -1);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int64_t r = t; r < rows && first[static_cast<size_t>(t)] < 0; r += threads) {
          for (int64_t c = 0; c < side; ++c) {
            const size_t i = static_cast<size_t>(r * side + c);
            if (got[i] != bits[static_cast<size_t>(expected(r, c))]) {
              first[static_cast<size_t>(t)] = static_cast<int64_t>(i);
              break;
            }
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    int64_t bad = -1;
    for (int64_t v : first) {
      if (v >= 0 && (bad < 0 || v < bad)) bad = v;
    }
    return bad;
  };
  {
    std::vector<uint16_t> got(n_out);
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), y, &got));
    const int64_t bad = check_rows(got, out_side, out_side, [&](int64_t r, int64_t c) {
      return value(static_cast<size_t>((r / 2) * in_side + c / 2)) *
             static_cast<int>(1 + (r % 2) * 2 + c % 2);
    });
    EXPECT_EQ(bad, -1) << "forward: first wrong element " << bad;
  }
  {
    std::vector<uint16_t> got(n_in);
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dx, &got));
    const int64_t bad = check_rows(got, in_side, in_side, [&](int64_t r, int64_t c) {
      return value(static_cast<size_t>(r * in_side + c)) * 30;
    });
    EXPECT_EQ(bad, -1) << "input gradient: first wrong element " << bad;
  }

  // The filter gradient over all the pixels of y (2^31 + 97316 on a GPU).
  Conv2DTransposeAttrs a1;
  a1.strides = {1, 1, 1, 1};
  a1.padding = "VALID";
  Conv2DTransposeParams p1;
  OPFORGE_ASSERT_OK(ValidateConv2DTranspose(a1, {1, out_side, out_side, 1}, {1, 1, 1, 1},
                                            {1, out_side, out_side, 1}, &p1));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dy2.get(), 0, n_out * sizeof(T), stream.get()));
  const int64_t two31 = cuda::kInt32IndexLimit + 1;  // 2^31 on a GPU
  const std::vector<int64_t> ones = {
      0, 12345, two31 - 1, two31, two31 + 1, two31 + 4097, static_cast<int64_t>(n_out) - 1};
  double want = 0;
  const T one(1.0f);
  for (int64_t q : ones) {
    OPFORGE_ASSERT_CUDA(cudaMemcpyAsync(static_cast<T*>(dy2.get()) + q, &one, sizeof(T),
                                        cudaMemcpyHostToDevice, stream.get()));
    const int64_t r = q / out_side, c = q % out_side;
    want += value(static_cast<size_t>((r / 2) * in_side + c / 2)) * (1 + (r % 2) * 2 + c % 2);
  }
  const int64_t scratch_bytes = Conv2DTransposeFilterGradGpuScratchBytes(DType::kHalf, p1);
  DeviceBuffer scratch;
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  OPFORGE_ASSERT_CUDA(df2.Allocate(sizeof(T)));
  OPFORGE_ASSERT_OK(Conv2DTransposeFilterGradGpu(DType::kHalf, p1, y.get(), dy2.get(), df2.get(),
                                                 scratch.get(), scratch_bytes, stream.get()));
  std::vector<T> got(1);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), df2, &got));
  EXPECT_EQ(Wide(got[0]), want);
}

}  // namespace
}  // namespace opforge
