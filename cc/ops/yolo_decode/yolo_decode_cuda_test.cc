// The YoloDecode CUDA kernels against the CPU kernels (SerialParallel), on random features with
// special values (signed zeros, infinities, NaNs, subnormals, the extremes) for every element
// type. Both sides run the same per-box maths (yolo_decode_math.h) in the same order without
// FMA contraction; they differ only where the device's exp/expf differ from glibc's, by a few
// ulps of the compute type. So every value must agree within a few ulps of the compute type plus
// one rounding to the element type, relative to the magnitude of the terms it is made of (the
// centre and the size of a box, the sum of the objectness gradient's terms); NaN must match NaN;
// the class index must be the CPU's except where the two classes' scores tie within that
// tolerance. Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/cuda_geometry.h"
#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_test_data.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::SyncStream;
using test::TestStream;
using test::TypeNames;
using test::UploadOn;
using test::Wide;

using test::yolo_decode::Case;
using test::yolo_decode::Describe;
using test::yolo_decode::NumBoxes;

// The validated params of `c`, with `format` in place of its box format where given.
YoloDecodeParams ParamsOf(Case c, const char* format = nullptr) {
  if (format != nullptr) c.format = format;
  YoloDecodeParams p;
  const Status s = test::yolo_decode::ParamsOf(c, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

std::vector<Case> Cases() {
  return {
      {2, 13, 13, 3, 80, 416, 416, "xyxy", false, 1.0f, false},
      {3, 5, 7, 2, 3, 160, 224, "yxyx", true, 1.05f, true},
      {1, 26, 20, 3, 1, 416, 320, "center_xywh", false, 1.05f, false},
      {4, 3, 2, 1, 7, 96, 64, "xyxy", true, 1.2f, true},
      {2, 1, 1, 3, 2, 32, 48, "yxyx", false, 1.0f, false},
      {1, 52, 52, 3, 4, 416, 416, "center_xywh", true, 1.0f, false},
      // torchvision's clamp of tw, th (the others: none, the default).
      {2, 4, 4, 3, 5, 128, 128, "xyxy", true, 1.0f, false, static_cast<float>(kYoloMaxLogScale)},
  };
}

// The compute type's and the element type's relative ulp (the largest in a binade).
template <typename T>
double UlpC() {
  return std::is_same_v<T, double> ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23);
}
template <typename T>
double UlpT() {
  if constexpr (std::is_same_v<T, double>) {
    return std::ldexp(1.0, -52);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::ldexp(1.0, -23);
  } else if constexpr (std::is_same_v<T, Eigen::half>) {
    return std::ldexp(1.0, -10);
  } else {
    return std::ldexp(1.0, -7);
  }
}

// A few ulps of the compute type and one rounding to T, relative to `mag`, plus a few of T's
// smallest subnormals and a little of the compute type's smallest normal (a product that went
// through a subnormal has lost relative precision: sigmoid(-100) holds 5 bits in float).
template <typename T>
double Tolerance(double mag) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  return (UlpT<T>() + 16 * UlpC<T>()) * mag + 4 * Wide(std::numeric_limits<T>::denorm_min()) +
         std::ldexp(static_cast<double>(std::numeric_limits<C>::min()), -8);
}

// NaN must match NaN and an infinity itself (none of the values compared here is near overflow,
// so rounding cannot make one side infinite); finite values agree within Tolerance(mag).
template <typename T>
bool Agree(T gpu, T cpu, double mag) {
  const double g = Wide(gpu), c = Wide(cpu);
  if (std::isnan(g) || std::isnan(c)) return std::isnan(g) && std::isnan(c);
  if (std::isinf(g) || std::isinf(c)) return g == c;
  return std::abs(g - c) <= Tolerance<T>(mag);
}

// Element-wise Agree with mag[i] (or |cpu[i]| where mag is empty); names the first few failures.
template <typename T>
::testing::AssertionResult AllAgree(const std::vector<T>& gpu, const std::vector<T>& cpu,
                                    const std::vector<double>& mag = {}) {
  if (gpu.size() != cpu.size()) {
    return ::testing::AssertionFailure() << "size " << gpu.size() << " vs " << cpu.size();
  }
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double m = mag.empty() ? std::abs(Wide(cpu[i])) : mag[i];
    if (Agree(gpu[i], cpu[i], m)) continue;
    if (count++ < 8) {
      failure << "\n  [" << i << "] gpu " << test::Describe(gpu[i]) << ", cpu "
              << test::Describe(cpu[i]) << " (magnitude " << m << ")";
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << gpu.size() << " elements differ";
}

template <typename T>
struct Inputs {
  std::vector<T> features, anchors, grad_boxes, grad_scores, grad_class_scores;
};

// About 2% of v replaced by +-inf, NaN, -0 and the smallest subnormal.
template <typename T>
void SprinkleSpecials(std::mt19937_64& rng, std::vector<T>* v) {
  using L = std::numeric_limits<T>;
  const T pool[] = {L::infinity(), -L::infinity(), L::quiet_NaN(), T(-0.0f), L::denorm_min()};
  for (auto& x : *v) {
    if (rng() % 50 == 0) x = pool[rng() % 5];
  }
}

// Features with special values and far-out logits; gradients with special values too.
template <typename T>
Inputs<T> RandomInputs(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t boxes = NumBoxes(c);
  Inputs<T> in;
  in.features = test::RandomVector<T>(rng, boxes * (5 + c.classes), test::SpecialValues<T>());
  // Some logits far out, where exp under- or overflows and boxes saturate.
  std::uniform_int_distribution<int> percent(0, 99);
  std::uniform_real_distribution<double> far(-120.0, 120.0);
  for (auto& x : in.features) {
    if (percent(rng) < 5) x = static_cast<T>(static_cast<float>(far(rng)));
  }
  in.anchors = test::UniformVector<T>(rng, 2 * c.anchors, 10.0, 120.0);
  in.grad_boxes = test::UniformVector<T>(rng, boxes * 4, -1.0, 1.0);
  in.grad_scores = test::UniformVector<T>(rng, boxes, -1.0, 1.0);
  in.grad_class_scores = test::UniformVector<T>(rng, boxes * c.classes, -1.0, 1.0);
  SprinkleSpecials(rng, &in.grad_boxes);
  SprinkleSpecials(rng, &in.grad_scores);
  SprinkleSpecials(rng, &in.grad_class_scores);
  return in;
}

template <typename T>
struct Outputs {
  std::vector<T> boxes, scores, class_scores;
  std::vector<int32_t> indices;
  explicit Outputs(const YoloDecodeParams& p) {
    const int64_t n = p.batch * p.boxes_per_image();
    boxes.resize(static_cast<size_t>(n * 4));
    scores.resize(static_cast<size_t>(n));
    indices.resize(static_cast<size_t>(n));
    class_scores.resize(static_cast<size_t>(n * p.num_classes));
  }
};

template <typename T>
Outputs<T> CpuForward(const YoloDecodeParams& p, const Inputs<T>& in,
                      const Parallel& parallel = SerialParallel()) {
  Outputs<T> o(p);
  YoloDecodeForward<T>(p, in.features.data(), in.anchors.data(), o.boxes.data(), o.scores.data(),
                       o.indices.data(), o.class_scores.data(), parallel);
  return o;
}

// |v|, or 0 for NaN (a NaN centre makes its corners NaN, checked as such, not the size).
template <typename T>
double AbsOrZero(T v) {
  const double w = Wide(v);
  return std::isnan(w) ? 0.0 : std::abs(w);
}

// The magnitude of each box coordinate: |centre| + |size| on its axis, from the CPU's
// center_xywh boxes of the same features.
template <typename T>
std::vector<double> BoxMagnitudes(const Case& c, const Inputs<T>& in,
                                  const Parallel& parallel = SerialParallel()) {
  const Outputs<T> centre = CpuForward(ParamsOf(c, "center_xywh"), in, parallel);
  const bool yx = c.format == "yxyx";
  std::vector<double> mag(centre.boxes.size());
  for (size_t box = 0; box < mag.size() / 4; ++box) {
    const double mx = AbsOrZero(centre.boxes[4 * box]) + AbsOrZero(centre.boxes[4 * box + 2]);
    const double my = AbsOrZero(centre.boxes[4 * box + 1]) + AbsOrZero(centre.boxes[4 * box + 3]);
    for (size_t k = 0; k < 4; ++k) mag[4 * box + k] = ((k % 2 == 0) != yx) ? mx : my;
  }
  return mag;
}

double Sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// |v| for a finite v, else 0: an infinite or NaN incoming gradient makes the results it reaches
// infinite or NaN, which must match exactly (Agree); it must not loosen the others' tolerance.
template <typename T>
double FiniteAbs(T v) {
  const double w = Wide(v);
  return std::isfinite(w) ? std::abs(w) : 0.0;
}

// The magnitude of each feature's gradient: the sum of the magnitudes of the terms it is made
// of, where sigmoid' = s * (1 - s) counts as s (1 - s cancels: an ulp of s is a large part of
// it), and the objectness's gradient sums over classes. An upper bound is fine: |gx| <= the sum
// of |grad_boxes|. `indices`: the classes the forward chose. The size channels are products
// of exact values and one exp: their own magnitude.
template <typename T>
std::vector<double> GradMagnitudes(const Case& c, const Inputs<T>& in,
                                   const std::vector<int32_t>& indices, bool boxes, bool scores,
                                   bool classes, const std::vector<T>& cpu) {
  const size_t per_anchor = static_cast<size_t>(5 + c.classes), nc = static_cast<size_t>(c.classes);
  const double scale = c.scale_x_y;
  double sx = static_cast<double>(c.input_w) / static_cast<double>(c.width);
  double sy = static_cast<double>(c.input_h) / static_cast<double>(c.height);
  if (c.normalized) {
    const double divisor = static_cast<double>(std::min(c.input_w, c.input_h));
    sx /= divisor;
    sy /= divisor;
  }
  std::vector<double> mag(cpu.size());
  for (size_t box = 0; box < indices.size(); ++box) {
    const T* f = &in.features[box * per_anchor];
    double gb = 0;
    for (size_t k = 0; k < 4 && boxes; ++k) gb += FiniteAbs(in.grad_boxes[4 * box + k]);
    double* m = &mag[box * per_anchor];
    m[0] = gb * sx * scale * Sig(Wide(f[0]));
    m[1] = gb * sy * scale * Sig(Wide(f[1]));
    m[2] = std::abs(Wide(cpu[box * per_anchor + 2]));
    m[3] = std::abs(Wide(cpu[box * per_anchor + 3]));
    const double obj = Sig(Wide(f[4]));
    m[4] = 0;
    for (size_t k = 0; k < nc; ++k) {
      double gc = classes ? FiniteAbs(in.grad_class_scores[box * nc + k]) : 0.0;
      if (scores && static_cast<int32_t>(k) == indices[box]) {
        gc += FiniteAbs(in.grad_scores[box]);
      }
      const double s = Sig(Wide(f[5 + k]));
      m[5 + k] = gc * obj * s;
      m[4] += gc * s * obj;
    }
  }
  return mag;
}

template <typename T>
class YoloDecodeCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(YoloDecodeCudaTest, test::FloatTypes, TypeNames);

// The GPU's forward outputs of `in` on `stream` (every buffer filled with 0xFF bytes first: an
// element left unwritten shows).
template <typename T>
void GpuForward(const YoloDecodeParams& p, const Inputs<T>& in, cudaStream_t stream,
                Outputs<T>* gpu) {
  DeviceBuffer df, scratch, db, ds, di, dc;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, in.features, &df));
  const int64_t scratch_bytes = YoloDecodeGpuScratchBytes(DTypeOf<T>::value, p);
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  const std::pair<DeviceBuffer*, size_t> outputs[] = {{&db, gpu->boxes.size() * sizeof(T)},
                                                      {&ds, gpu->scores.size() * sizeof(T)},
                                                      {&di, gpu->indices.size() * sizeof(int32_t)},
                                                      {&dc, gpu->class_scores.size() * sizeof(T)}};
  for (const auto& [buffer, bytes] : outputs) {
    OPFORGE_ASSERT_CUDA(buffer->Allocate(bytes));
    if (bytes > 0) OPFORGE_ASSERT_CUDA(cudaMemsetAsync(buffer->get(), 0xFF, bytes, stream));
  }
  // The anchors from host memory (the binding registers them HostMemory).
  OPFORGE_ASSERT_OK(YoloDecodeForwardGpu(DTypeOf<T>::value, p, df.get(), in.anchors.data(),
                                         db.get(), ds.get(), static_cast<int32_t*>(di.get()),
                                         dc.get(), scratch.get(), scratch_bytes, stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, db, &gpu->boxes));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, ds, &gpu->scores));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, di, &gpu->indices));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dc, &gpu->class_scores));
}

// The GPU's gradient of the features, from the given incoming gradients (the others null).
template <typename T>
void GpuBackward(const YoloDecodeParams& p, const Inputs<T>& in, bool boxes, bool scores,
                 bool classes, cudaStream_t stream, std::vector<T>* gpu) {
  DeviceBuffer df, scratch, dgb, dgs, dgc, dout;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, in.features, &df));
  const int64_t scratch_bytes = YoloDecodeGpuScratchBytes(DTypeOf<T>::value, p);
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  if (boxes) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, in.grad_boxes, &dgb));
  }
  if (scores) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, in.grad_scores, &dgs));
  }
  if (classes) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, in.grad_class_scores, &dgc));
  }
  gpu->assign(in.features.size(), T(0.0f));
  OPFORGE_ASSERT_CUDA(dout.Allocate(gpu->size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dout.get(), 0xFF, gpu->size() * sizeof(T), stream));
  OPFORGE_ASSERT_OK(YoloDecodeBackwardGpu(DTypeOf<T>::value, p, dgb.get(), dgs.get(), dgc.get(),
                                          df.get(), in.anchors.data(), dout.get(), scratch.get(),
                                          scratch_bytes, stream));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dout, gpu));
}

// Every forward output agrees; a class index may differ only where the two classes' scores
// tie within the tolerance (and then in few boxes).
template <typename T>
void ExpectForwardAgrees(const Case& c, const Inputs<T>& in, const Outputs<T>& gpu,
                         const Outputs<T>& cpu, const Parallel& parallel = SerialParallel()) {
  EXPECT_TRUE(AllAgree(gpu.boxes, cpu.boxes, BoxMagnitudes(c, in, parallel))) << Describe(c);
  EXPECT_TRUE(AllAgree(gpu.class_scores, cpu.class_scores)) << Describe(c);
  EXPECT_TRUE(AllAgree(gpu.scores, cpu.scores)) << Describe(c);
  int64_t ties = 0;
  for (size_t box = 0; box < cpu.indices.size(); ++box) {
    const int32_t gi = gpu.indices[box], ci = cpu.indices[box];
    if (gi == ci) continue;
    ++ties;
    ASSERT_TRUE(gi >= 0 && gi < c.classes) << Describe(c) << " box " << box << ": " << gi;
    const size_t row = box * static_cast<size_t>(c.classes);
    EXPECT_TRUE(Agree(cpu.class_scores[row + gi], cpu.class_scores[row + ci],
                      std::abs(Wide(cpu.scores[box]))) &&
                !std::isnan(Wide(cpu.scores[box])))
        << Describe(c) << " box " << box << ": gpu class " << gi << ", cpu class " << ci;
  }
  EXPECT_LE(ties, static_cast<int64_t>(cpu.indices.size()) / 20) << Describe(c);
}

// Boxes whose best class score ties with another within the forward's tolerance: the GPU may
// route the score's gradient to the other class (and the objectness's gradient follows).
template <typename T>
std::vector<bool> NearTies(const Case& c, const Outputs<T>& forward) {
  std::vector<bool> near_tie(forward.scores.size(), false);
  int64_t near_ties = 0;
  for (size_t box = 0; box < near_tie.size(); ++box) {
    const size_t row = box * static_cast<size_t>(c.classes);
    const T best = forward.scores[box];
    for (int64_t k = 0; k < c.classes && !near_tie[box]; ++k) {
      if (k == forward.indices[box]) continue;
      const T v = forward.class_scores[row + static_cast<size_t>(k)];
      near_tie[box] = !std::isnan(Wide(best)) && Agree(v, best, std::abs(Wide(best)));
    }
    near_ties += near_tie[box];
  }
  EXPECT_LT(near_ties, static_cast<int64_t>(near_tie.size()) / 2) << Describe(c);
  return near_tie;
}

// The feature gradients agree; where the scores' gradient is given, near ties are compared in
// their box channels only. In a box with an infinite or NaN incoming gradient, a non-finite
// result matches any non-finite one: inf times a factor that is 0 on one device and an ulp
// above on the other (a saturated sigmoid's s * (1 - s), the devices' exp differing by ulps) is
// NaN against inf.
template <typename T>
void ExpectBackwardAgrees(const Case& c, const Inputs<T>& in, const Outputs<T>& forward, bool boxes,
                          bool scores, bool classes, std::vector<T> gpu,
                          const std::vector<T>& cpu) {
  const std::vector<double> mag =
      GradMagnitudes(c, in, forward.indices, boxes, scores, classes, cpu);
  const size_t per_anchor = static_cast<size_t>(5 + c.classes), nc = static_cast<size_t>(c.classes);
  auto finite = [](T v) { return std::isfinite(Wide(v)); };
  for (size_t box = 0; box < forward.scores.size(); ++box) {
    bool special = scores && !finite(in.grad_scores[box]);
    for (size_t k = 0; k < 4 && boxes; ++k)
      special = special || !finite(in.grad_boxes[4 * box + k]);
    for (size_t k = 0; k < nc && classes; ++k) {
      special = special || !finite(in.grad_class_scores[box * nc + k]);
    }
    if (!special) continue;
    for (size_t k = 0; k < per_anchor; ++k) {
      const size_t i = box * per_anchor + k;
      if (!finite(gpu[i]) && !finite(cpu[i])) gpu[i] = cpu[i];
    }
  }
  if (scores) {
    const std::vector<bool> near_tie = NearTies(c, forward);
    for (size_t box = 0; box < near_tie.size(); ++box) {
      if (!near_tie[box]) continue;
      for (size_t k = 4; k < per_anchor; ++k) gpu[box * per_anchor + k] = cpu[box * per_anchor + k];
    }
  }
  EXPECT_TRUE(AllAgree(gpu, cpu, mag)) << Describe(c) << " gradients given: boxes " << boxes
                                       << ", scores " << scores << ", class scores " << classes;
}

TYPED_TEST(YoloDecodeCudaTest, ForwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  using T = TypeParam;
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    const YoloDecodeParams p = ParamsOf(c);
    const Inputs<T> in = RandomInputs<T>(c, seed++);
    Outputs<T> gpu(p);
    ASSERT_NO_FATAL_FAILURE(GpuForward(p, in, stream.get(), &gpu));
    ExpectForwardAgrees(c, in, gpu, CpuForward(p, in));
  }
}

// Null outputs are skipped on the GPU as on the CPU.
TYPED_TEST(YoloDecodeCudaTest, NullOutputsAreSkipped) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  using T = TypeParam;
  const Case c = Cases()[1];
  const YoloDecodeParams p = ParamsOf(c);
  const Inputs<T> in = RandomInputs<T>(c, 77);
  const Outputs<T> cpu = CpuForward(p, in);
  DeviceBuffer df, scratch, db, ds, di;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), in.features, &df));
  const int64_t scratch_bytes = YoloDecodeGpuScratchBytes(DTypeOf<T>::value, p);
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  OPFORGE_ASSERT_CUDA(ds.Allocate(cpu.scores.size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(di.Allocate(cpu.indices.size() * sizeof(int32_t)));
  Status s = YoloDecodeForwardGpu(DTypeOf<T>::value, p, df.get(), in.anchors.data(), nullptr,
                                  ds.get(), static_cast<int32_t*>(di.get()), nullptr, scratch.get(),
                                  scratch_bytes, stream.get());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream.get()));
  Outputs<T> gpu(p);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), ds, &gpu.scores));
  EXPECT_TRUE(AllAgree(gpu.scores, cpu.scores));
  OPFORGE_ASSERT_CUDA(db.Allocate(cpu.boxes.size() * sizeof(T)));
  s = YoloDecodeForwardGpu(DTypeOf<T>::value, p, df.get(), in.anchors.data(), db.get(), nullptr,
                           nullptr, nullptr, scratch.get(), scratch_bytes, stream.get());
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream.get()));
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), db, &gpu.boxes));
  EXPECT_TRUE(AllAgree(gpu.boxes, cpu.boxes, BoxMagnitudes(c, in)));
}

// With inf, NaN, -0 and subnormals among the features and every incoming gradient.
TYPED_TEST(YoloDecodeCudaTest, BackwardMatchesCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  using T = TypeParam;
  uint64_t seed = 100;
  for (const Case& c : Cases()) {
    const YoloDecodeParams p = ParamsOf(c);
    const Inputs<T> in = RandomInputs<T>(c, seed++);
    const Outputs<T> forward = CpuForward(p, in);
    // Which gradients are given: all, then each alone (the others null).
    for (int given = 0; given < 4; ++given) {
      const bool boxes = given == 0 || given == 1, scores = given == 0 || given == 2,
                 classes = given == 0 || given == 3;
      std::vector<T> cpu(in.features.size()), gpu;
      YoloDecodeBackward<T>(p, boxes ? in.grad_boxes.data() : nullptr,
                            scores ? in.grad_scores.data() : nullptr,
                            classes ? in.grad_class_scores.data() : nullptr, in.features.data(),
                            in.anchors.data(), cpu.data(), SerialParallel());
      ASSERT_NO_FATAL_FAILURE(GpuBackward(p, in, boxes, scores, classes, stream.get(), &gpu));
      ExpectBackwardAgrees(c, in, forward, boxes, scores, classes, gpu, cpu);
    }
  }
}

// The last image of `c` (its elements of `full`, laid out image after image).
template <typename T>
std::vector<T> LastImage(const std::vector<T>& full, const Case& c) {
  const size_t per_image = full.size() / static_cast<size_t>(c.batch);
  return std::vector<T>(full.end() - static_cast<std::ptrdiff_t>(per_image), full.end());
}

// A large case: every image on the GPU, the last one (which lies past 2^31 elements in the
// half case) against the CPU, forward and gradient (of boxes and scores; class scores null).
template <typename T>
void CheckLargeCase(const Case& c, uint64_t seed) {
  const ThreadParallel parallel(static_cast<int>(std::thread::hardware_concurrency()));
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  const YoloDecodeParams p = ParamsOf(c);
  const int64_t boxes = NumBoxes(c);
  Inputs<T> in;
  // Logits in [-3, 3]: over [-6, 6] the 80 class scores of a box saturate the sigmoid, and in
  // half 84% of the boxes have a near tie (NearTies), leaving the scores' gradient unchecked.
  in.features = test::HashedUniform<T>(boxes * (5 + c.classes), seed, -3.0, 3.0);
  in.anchors = test::HashedUniform<T>(2 * c.anchors, seed + 1, 10.0, 120.0);
  in.grad_boxes = test::HashedUniform<T>(boxes * 4, seed + 2, -1.0, 1.0);
  in.grad_scores = test::HashedUniform<T>(boxes, seed + 3, -1.0, 1.0);
  Outputs<T> gpu(p);
  ASSERT_NO_FATAL_FAILURE(GpuForward(p, in, stream.get(), &gpu));
  std::vector<T> gpu_grad;
  ASSERT_NO_FATAL_FAILURE(GpuBackward(p, in, true, true, false, stream.get(), &gpu_grad));

  Case last = c;
  last.batch = 1;
  const YoloDecodeParams lp = ParamsOf(last);
  Inputs<T> lin;
  lin.features = LastImage(in.features, c);
  lin.anchors = in.anchors;
  lin.grad_boxes = LastImage(in.grad_boxes, c);
  lin.grad_scores = LastImage(in.grad_scores, c);
  in = Inputs<T>();  // the host's memory
  Outputs<T> lgpu(lp);
  lgpu.boxes = LastImage(gpu.boxes, c);
  lgpu.scores = LastImage(gpu.scores, c);
  lgpu.indices = LastImage(gpu.indices, c);
  lgpu.class_scores = LastImage(gpu.class_scores, c);
  gpu = Outputs<T>(lp);
  const Outputs<T> cpu = CpuForward(lp, lin, parallel);
  ExpectForwardAgrees(last, lin, lgpu, cpu, parallel);
  std::vector<T> cpu_grad(lin.features.size());
  YoloDecodeBackward<T>(lp, lin.grad_boxes.data(), lin.grad_scores.data(), nullptr,
                        lin.features.data(), lin.anchors.data(), cpu_grad.data(), parallel);
  ExpectBackwardAgrees(last, lin, cpu, true, true, false, LastImage(gpu_grad, c), cpu_grad);
}

// 17.3M boxes in one image: past the first round of the grid-stride loops (Blocks() stops at
// 2^16 blocks of 256 threads: 2^24 boxes). On the SIMT runtime the grids stop at
// cuda::kMaxGridBlocks (64) blocks: 76 x 76 x 3 boxes, past 16384.
TEST(YoloDecodeCudaLarge, GridStrideLoops) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const int64_t side = cuda::kSimtGeometry ? 76 : 2400;
  ASSERT_GT(side * side * 3, cuda::kMaxGridBlocks * 256);
  CheckLargeCase<float>({1, side, side, 3, 1, 416, 416, "center_xywh", true, 1.05f, false}, 11);
}

// 8 images of 3.3M boxes x 85 channels in half: 2^31 + 101M feature elements (the int64 index
// path); the last image is read and written past 2^31. On the SIMT runtime, 8 images of 46 x 46
// whose last one lies past cuda::kInt32IndexLimit (2^22 - 1). Skipped, saying so, when the device
// lacks the memory (~8 bytes a feature: 16 GB on a GPU).
TEST(YoloDecodeCudaLarge, OverTwoTo31Elements) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const int64_t side = cuda::kSimtGeometry ? 46 : 1050;
  const Case c = {8, side, side, 3, 80, 416, 416, "xyxy", false, 1.0f, false};
  ASSERT_GT(test::yolo_decode::NumFeatures(c), cuda::kInt32IndexLimit + 1);
  const size_t need = static_cast<size_t>(test::yolo_decode::NumFeatures(c)) * 8;
  size_t free_bytes = 0, total_bytes = 0;
  OPFORGE_ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < need) {
    GTEST_SKIP() << "skipped: needs " << (need >> 20) << " MB of free device memory, "
                 << (free_bytes >> 20) << " MB free";
  }
  CheckLargeCase<Eigen::half>(c, 21);
}

TEST(YoloDecodeCuda, EmptyIsANoOpAndBadDTypeIsAnError) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  YoloDecodeParams p = ParamsOf({0, 3, 3, 2, 4, 96, 96, "xyxy", false, 1.0f, false});
  EXPECT_TRUE(YoloDecodeForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr, nullptr,
                                   nullptr, nullptr, 0, nullptr)
                  .ok());
  EXPECT_TRUE(YoloDecodeBackwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr, nullptr,
                                    nullptr, nullptr, 0, nullptr)
                  .ok());
  p.batch = 1;
  const Status s = YoloDecodeForwardGpu(DType::kInt32, p, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, nullptr, 0, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(test::NamesWord(s.message(), "YoloDecode")) << s.message();
  EXPECT_FALSE(YoloDecodeBackwardGpu(DType::kInt64, p, nullptr, nullptr, nullptr, nullptr, nullptr,
                                     nullptr, nullptr, 0, nullptr)
                   .ok());
}

// The anchors come from host memory and are staged when the call returns: the caller's buffer
// may change or go at once (TensorFlow frees a host input after Compute). Too little scratch
// for them is an error that says how much is needed.
TYPED_TEST(YoloDecodeCudaTest, AnchorsAreStagedFromHostMemory) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  using T = TypeParam;
  const Case c = Cases()[1];
  const YoloDecodeParams p = ParamsOf(c);
  const Inputs<T> in = RandomInputs<T>(c, 78);
  const Outputs<T> cpu = CpuForward(p, in);
  DeviceBuffer df, scratch, db;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), in.features, &df));
  const int64_t scratch_bytes = YoloDecodeGpuScratchBytes(DTypeOf<T>::value, p);
  EXPECT_EQ(scratch_bytes, 2 * c.anchors * static_cast<int64_t>(sizeof(T)));
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  OPFORGE_ASSERT_CUDA(db.Allocate(cpu.boxes.size() * sizeof(T)));
  {
    std::vector<T> anchors = in.anchors;
    const Status s =
        YoloDecodeForwardGpu(DTypeOf<T>::value, p, df.get(), anchors.data(), db.get(), nullptr,
                             nullptr, nullptr, scratch.get(), scratch_bytes, stream.get());
    ASSERT_TRUE(s.ok()) << s.message();
    std::fill(anchors.begin(), anchors.end(), T(0.0f));  // before the kernel may have run
  }
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream.get()));
  Outputs<T> gpu(p);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), db, &gpu.boxes));
  EXPECT_TRUE(AllAgree(gpu.boxes, cpu.boxes, BoxMagnitudes(c, in)));
  const Status s =
      YoloDecodeForwardGpu(DTypeOf<T>::value, p, df.get(), in.anchors.data(), db.get(), nullptr,
                           nullptr, nullptr, scratch.get(), scratch_bytes - 1, stream.get());
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_TRUE(test::Contains(s.message(), std::to_string(scratch_bytes) + " bytes of scratch"))
      << s.message();
}

}  // namespace
}  // namespace opforge
