// Tests of the MfccToMel core: validation messages; the forward against
// librosa.feature.inverse.mfcc_to_mel 0.11 (testdata/mfcc_to_mel_refs.inc, written by
// testdata/make_mfcc_to_mel_refs.py) for DCT types 2 and 3, norm "ortho" and none, with and
// without a lifter, in float32 and float64, to 1e-5 relative; the gradient against central
// differences in float64; batches; identical bits for every thread count.
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

#include "ops/mfcc_to_mel/testdata/mfcc_to_mel_refs.inc"

using test::Contains;
using test::NamesWord;

// max_i |a_i - ref_i| / |ref_i| <= tol.
template <typename T, typename R>
::testing::AssertionResult RelativelyClose(const std::vector<T>& a, const R* ref, size_t n,
                                           double tol) {
  if (a.size() != n) return ::testing::AssertionFailure() << "size " << a.size() << " vs " << n;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::abs(double(a[i]) - double(ref[i])) / std::abs(double(ref[i]));
    if (!(d <= worst)) worst = d, at = i;
  }
  if (worst <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative difference " << worst << " at " << at << ": "
                                       << a[at] << " vs librosa " << ref[at];
}

template <typename T>
std::vector<T> Forward(MfccToMelParams p, const std::vector<int64_t>& shape,
                       const std::vector<T>& mfcc, int threads = 2) {
  const Status s = ValidateMfccToMel(shape, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<T> mel(static_cast<size_t>(p.batch * p.n_mels * p.n_frames));
  MfccToMelForward<T>(p, mfcc.data(), mel.data(), ThreadParallel(threads));
  return mel;
}

MfccToMelParams ParamsOf(const RefCase& c, int64_t n_mels) {
  MfccToMelParams p;
  p.n_mels = n_mels;
  p.dct_type = c.dct_type;
  p.norm = c.ortho ? DctNorm::kOrtho : DctNorm::kNone;
  p.lifter = c.lifter;
  p.ref = c.ref;
  return p;
}

// --- validation ---------------------------------------------------------------------------------

TEST(MfccToMelValidate, FillsShapes) {
  MfccToMelParams p;
  OPFORGE_ASSERT_OK(ValidateMfccToMel({2, 3, 20, 216}, &p));
  EXPECT_EQ(p.batch, 6);
  EXPECT_EQ(p.n_mfcc, 20);
  EXPECT_EQ(p.n_frames, 216);
  OPFORGE_ASSERT_OK(ValidateMfccToMel({0, 20, 216}, &p));  // an empty batch is fine
  EXPECT_EQ(p.batch, 0);
}

TEST(MfccToMelValidate, Errors) {
  struct Bad {
    MfccToMelParams p;
    std::vector<int64_t> shape;
    const char* argument;
    const char* fragment;
  };
  auto with = [](auto set) {
    MfccToMelParams p;
    set(p);
    return p;
  };
  const std::vector<Bad> bad = {
      {MfccToMelParams(), {20}, "mfcc", "rank >= 2"},
      {MfccToMelParams(), {129, 10}, "mfcc", "at most n_mels = 128"},
      {MfccToMelParams(), {0, 10}, "mfcc", "at least one coefficient"},
      {MfccToMelParams(), {20, 0}, "mfcc", "non-empty time axis"},
      {with([](MfccToMelParams& p) { p.dct_type = 1; }), {20, 10}, "dct_type", "2 or 3"},
      {with([](MfccToMelParams& p) { p.dct_type = 4; }), {20, 10}, "dct_type", "got 4"},
      {with([](MfccToMelParams& p) { p.n_mels = 0; }), {20, 10}, "n_mels", "positive"},
      {with([](MfccToMelParams& p) { p.ref = 0; }), {20, 10}, "ref", "> 0"},
      {with([](MfccToMelParams& p) { p.ref = std::nan(""); }), {20, 10}, "ref", "finite"},
      {with([](MfccToMelParams& p) { p.lifter = -1; }), {20, 10}, "lifter", ">= 0"},
  };
  for (const Bad& b : bad) {
    MfccToMelParams p = b.p;
    const Status s = ValidateMfccToMel(b.shape, &p);
    ASSERT_FALSE(s.ok()) << b.argument;
    EXPECT_TRUE(NamesWord(s.message(), "MfccToMel"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument)) << s.message();
    EXPECT_TRUE(Contains(s.message(), b.fragment)) << s.message();
  }
  DctNorm norm;
  OPFORGE_ASSERT_OK(ParseDctNorm("ortho", &norm));
  EXPECT_EQ(norm, DctNorm::kOrtho);
  OPFORGE_ASSERT_OK(ParseDctNorm("none", &norm));
  EXPECT_EQ(norm, DctNorm::kNone);
  const Status s = ParseDctNorm("forward", &norm);
  EXPECT_TRUE(NamesWord(s.message(), "norm") && Contains(s.message(), "\"forward\""));
}

TEST(MfccToMelValidate, GradShapes) {
  MfccToMelParams p;
  p.n_mels = 8;
  OPFORGE_ASSERT_OK(ValidateMfccToMelGrad({2, 8, 5}, {2, 8, 5}, {2, 4, 5}, &p));
  EXPECT_EQ(p.n_mfcc, 4);
  Status s = ValidateMfccToMelGrad({2, 8, 6}, {2, 8, 5}, {2, 4, 5}, &p);
  EXPECT_TRUE(NamesWord(s.message(), "grad")) << s.message();
  s = ValidateMfccToMelGrad({2, 8, 5}, {1, 8, 5}, {2, 4, 5}, &p);
  EXPECT_TRUE(NamesWord(s.message(), "mel")) << s.message();
}

// --- against librosa ----------------------------------------------------------------------------

TEST(MfccToMelLibrosa, EveryTypeNormAndLifter) {
  const std::vector<double> mfcc64(std::begin(kRefMfcc), std::end(kRefMfcc));
  std::vector<float> mfcc32(mfcc64.begin(), mfcc64.end());
  const size_t n = static_cast<size_t>(kRefNMels * kRefFrames);
  for (const RefCase& c : kRefCases) {
    SCOPED_TRACE(::testing::Message() << "dct_type " << c.dct_type << " ortho " << c.ortho
                                      << " lifter " << c.lifter << " ref " << c.ref);
    const MfccToMelParams p = ParamsOf(c, kRefNMels);
    EXPECT_TRUE(RelativelyClose(Forward(p, {kRefNMfcc, kRefFrames}, mfcc32), c.mel32, n, 1e-5));
    EXPECT_TRUE(RelativelyClose(Forward(p, {kRefNMfcc, kRefFrames}, mfcc64), c.mel64, n, 1e-12));
  }
}

TEST(MfccToMelLibrosa, RealMfcc) {
  const std::vector<float> mfcc(std::begin(kRealMfcc), std::end(kRealMfcc));
  MfccToMelParams p;  // librosa's defaults: 128 bands, type 2, ortho, ref 1, no lifter
  EXPECT_TRUE(RelativelyClose(Forward(p, {kRealNMfcc, kRealFrames}, mfcc), kRealMel,
                              std::size(kRealMel), 1e-5));
}

// --- batches, threads, gradient -----------------------------------------------------------------

std::vector<double> RandomMfcc(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 5.0);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

TEST(MfccToMelForward, BatchesAndThreads) {
  MfccToMelParams p;
  p.n_mels = 40;
  p.lifter = 10;
  const int64_t n_mfcc = 13, frames = 150;  // several frame blocks, one partial
  const std::vector<double> x = RandomMfcc(3 * n_mfcc * frames, 1);
  const std::vector<double> all = Forward(p, {3, n_mfcc, frames}, x, 1);
  EXPECT_EQ(all, Forward(p, {3, n_mfcc, frames}, x, 2));
  EXPECT_EQ(all, Forward(p, {3, n_mfcc, frames}, x, 5));
  for (int64_t b = 0; b < 3; ++b) {
    const std::vector<double> item(x.begin() + b * n_mfcc * frames,
                                   x.begin() + (b + 1) * n_mfcc * frames);
    const std::vector<double> one = Forward(p, {n_mfcc, frames}, item, 1);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), all.begin() + b * p.n_mels * frames));
  }
}

TEST(MfccToMelBackward, MatchesCentralDifferences) {
  for (int64_t dct_type : {2, 3}) {
    for (DctNorm norm : {DctNorm::kOrtho, DctNorm::kNone}) {
      MfccToMelParams p;
      p.n_mels = 10;
      p.dct_type = dct_type;
      p.norm = norm;
      p.lifter = 4;
      p.ref = 1.5;
      const int64_t n_mfcc = 5, frames = 3;
      const std::vector<int64_t> shape = {2, n_mfcc, frames};
      const std::vector<double> x = RandomMfcc(2 * n_mfcc * frames, 2);
      const std::vector<double> g = RandomMfcc(2 * p.n_mels * frames, 3);
      const std::vector<double> mel = Forward(p, shape, x);
      MfccToMelParams q = p;
      OPFORGE_ASSERT_OK(
          ValidateMfccToMelGrad({2, p.n_mels, frames}, {2, p.n_mels, frames}, shape, &q));
      std::vector<double> dx(x.size());
      MfccToMelBackward<double>(q, g.data(), mel.data(), dx.data(), ThreadParallel(2));
      for (size_t i = 0; i < x.size(); ++i) {
        const double h = 1e-5;
        std::vector<double> xp = x, xm = x;
        xp[i] += h;
        xm[i] -= h;
        const std::vector<double> fp = Forward(p, shape, xp), fm = Forward(p, shape, xm);
        double numeric = 0;
        for (size_t k = 0; k < g.size(); ++k) numeric += g[k] * (fp[k] - fm[k]) / (2 * h);
        EXPECT_NEAR(dx[i], numeric, 1e-6 * (1 + std::abs(numeric)))
            << "dct_type " << dct_type << " element " << i;
      }
    }
  }
}

TEST(MfccToMelForward, NanPropagates) {
  MfccToMelParams p;
  p.n_mels = 8;
  std::vector<float> x(4 * 3, 1.0f);
  x[4] = std::numeric_limits<float>::quiet_NaN();  // coefficient 1, frame 1
  const std::vector<float> mel = Forward(p, {4, 3}, x);
  for (int64_t k = 0; k < 8; ++k) {
    EXPECT_TRUE(std::isnan(mel[k * 3 + 1]));
    EXPECT_FALSE(std::isnan(mel[k * 3 + 0]));
  }
}

}  // namespace
}  // namespace opforge
