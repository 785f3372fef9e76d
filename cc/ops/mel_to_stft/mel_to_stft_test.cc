// Tests of the MelToStft core: validation messages; the Mel filter banks against
// librosa.filters.mel 0.11 (Slaney and HTK scales, Slaney and no normalisation, fmin/fmax, a bank
// with empty bands), float32 and float64; the NNLS objective against the one
// librosa.feature.inverse.mel_to_stft reaches (testdata/mel_to_stft_refs.inc, written by
// testdata/make_mel_to_stft_refs.py) on a reachable Mel spectrogram, the smooth spectrum of
// mfcc_to_mel, a loud one and an unreachable one: never worse than librosa's by more than 1e-3
// relative; power; batches; identical bits for every thread count; non-finite input; a filter bank
// given by the caller (shapes, the triangular structure and values it must have, the same answer
// as the built bank, TensorFlow's linear_to_mel_weight_matrix layout).
#include "ops/mel_to_stft/mel_to_stft.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

#include "ops/mel_to_stft/testdata/mel_to_stft_refs.inc"

using test::Contains;
using test::NamesWord;

MelFilterParams FiltersOf(const RefBank& b) {
  MelFilterParams f;
  f.sr = b.sr;
  f.n_fft = b.n_fft;
  f.n_mels = b.n_mels;
  f.fmin = b.fmin;
  f.fmax = b.fmax;
  f.htk = b.htk;
  f.norm = b.slaney ? MelNorm::kSlaney : MelNorm::kNone;
  return f;
}

// --- validation ---------------------------------------------------------------------------------

TEST(MelToStftValidate, FillsShapes) {
  MelToStftParams p;
  OPFORGE_ASSERT_OK(ValidateMelToStft({2, 3, 128, 216}, &p));
  EXPECT_EQ(p.batch, 6);
  EXPECT_EQ(p.filters.n_mels, 128);
  EXPECT_EQ(p.n_frames, 216);
  EXPECT_EQ(p.n_freq, 1025);
}

TEST(MelToStftValidate, Errors) {
  struct Bad {
    MelToStftParams p;
    std::vector<int64_t> shape;
    const char* argument;
    const char* fragment;
  };
  auto with = [](auto set) {
    MelToStftParams p;
    set(p);
    return p;
  };
  const std::vector<Bad> bad = {
      {MelToStftParams(), {128}, "mel", "rank >= 2"},
      {MelToStftParams(), {0, 10}, "mel", "at least one Mel band"},
      {MelToStftParams(), {128, 0}, "mel", "non-empty time axis"},
      {with([](MelToStftParams& p) { p.filters.sr = 0; }), {128, 10}, "sr", "> 0"},
      {with([](MelToStftParams& p) { p.filters.n_fft = 0; }), {128, 10}, "n_fft", "positive"},
      {with([](MelToStftParams& p) { p.filters.fmin = -1; }), {128, 10}, "fmin", ">= 0"},
      {with([](MelToStftParams& p) { p.filters.fmin = 500, p.filters.fmax = 400; }),
       {128, 10},
       "fmax",
       "above fmin = 500"},
      {with([](MelToStftParams& p) { p.power = 0; }), {128, 10}, "power", "> 0"},
      {with([](MelToStftParams& p) { p.power = std::nan(""); }), {128, 10}, "power", "finite"},
      {with([](MelToStftParams& p) { p.max_iter = 0; }), {128, 10}, "max_iter", "positive"},
  };
  for (const Bad& b : bad) {
    MelToStftParams p = b.p;
    const Status s = ValidateMelToStft(b.shape, &p);
    ASSERT_FALSE(s.ok()) << b.argument;
    EXPECT_TRUE(NamesWord(s.message(), "MelToStft"));
    EXPECT_TRUE(NamesWord(s.message(), b.argument)) << s.message();
    EXPECT_TRUE(Contains(s.message(), b.fragment)) << s.message();
  }
  MelNorm norm;
  OPFORGE_ASSERT_OK(ParseMelNorm("MelToStft", "slaney", &norm));
  EXPECT_EQ(norm, MelNorm::kSlaney);
  OPFORGE_ASSERT_OK(ParseMelNorm("MelToStft", "none", &norm));
  EXPECT_EQ(norm, MelNorm::kNone);
  const Status s = ParseMelNorm("MelToStft", "l2", &norm);
  EXPECT_TRUE(NamesWord(s.message(), "norm") && Contains(s.message(), "\"l2\""));
}

TEST(MelToStftForward, NonFiniteMelIsAnError) {
  MelToStftParams p;
  OPFORGE_ASSERT_OK(ValidateMelToStft({128, 3}, &p));
  std::vector<float> mel(128 * 3, 1.0f), out(1025 * 3);
  mel[200] = std::numeric_limits<float>::infinity();
  const Status s = MelToStftForward<float>(p, mel.data(), out.data(), SerialParallel());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(NamesWord(s.message(), "mel")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "flat index 200"));
}

// --- the filter banks ---------------------------------------------------------------------------

template <typename T, typename R>
void ExpectBank(const RefBank& b, const R* values, double tol) {
  const std::vector<T> bank = MelFilterBank<T>(FiltersOf(b));
  const int64_t n_freq = b.n_fft / 2 + 1;
  ASSERT_EQ(bank.size(), static_cast<size_t>(b.n_mels * n_freq));
  int64_t v = 0, mismatches = 0;
  double worst = 0;
  for (int64_t r = 0; r < b.n_mels; ++r) {
    for (int64_t k = 0; k < n_freq; ++k) {
      const bool nonzero = b.count[r] > 0 && k >= b.first[r] && k < b.first[r] + b.count[r];
      const double got = static_cast<double>(bank[static_cast<size_t>(r * n_freq + k)]);
      if (!nonzero) {
        mismatches += got != 0.0;
        continue;
      }
      const double want = static_cast<double>(values[v++]);
      worst = std::max(worst, std::abs(got - want) / want);
    }
  }
  EXPECT_EQ(mismatches, 0) << "non-zeros outside librosa's pattern";
  EXPECT_LE(worst, tol);
}

TEST(MelFilterBank, EqualsLibrosa) {
  for (const RefBank& b : kRefBanks) {
    SCOPED_TRACE(b.name);
    // float32: one rounding of the same float64 values (the tolerance allows the last bit for a
    // libm whose log/exp differs from numpy's in the last place of a band edge).
    ExpectBank<float>(b, b.values32, 1.2e-7);
    if (b.values64 != nullptr) ExpectBank<double>(b, b.values64, 1e-12);
  }
}

TEST(MelFilterBank, Scales) {
  // Slaney: linear below 1 kHz (15 Mel at 1 kHz), 27 steps of log(6.4) above.
  EXPECT_DOUBLE_EQ(HzToMel(1000.0, false), 15.0);
  EXPECT_NEAR(HzToMel(6400.0, false), 42.0, 1e-12);
  EXPECT_NEAR(HzToMel(1000.0, true), 2595.0 * std::log10(1.0 + 1000.0 / 700.0), 1e-12);
  for (double hz : {0.0, 300.0, 999.0, 1000.0, 4000.0, 11025.0}) {
    for (bool htk : {false, true}) EXPECT_NEAR(MelToHz(HzToMel(hz, htk), htk), hz, 1e-9 * (1 + hz));
  }
}

// --- NNLS against librosa -----------------------------------------------------------------------

template <typename T>
std::vector<T> SolveRef(const RefNnls& n, double power, int threads,
                        std::vector<float>* mel_out = nullptr) {
  const RefBank& bank = kRefBanks[n.bank];
  std::vector<float> mel32(static_cast<size_t>(bank.n_mels * n.n_frames));
  for (size_t i = 0; i < mel32.size(); ++i) {
    mel32[i] = n.mel != nullptr ? n.mel[i] : 1e4f * kNnlsTrueMel[i];
  }
  if (mel_out) *mel_out = mel32;
  MelToStftParams p;
  p.filters = FiltersOf(bank);
  p.power = power;
  Status s = ValidateMelToStft({bank.n_mels, n.n_frames}, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  const std::vector<T> mel(mel32.begin(), mel32.end());
  std::vector<T> out(static_cast<size_t>(p.n_freq * n.n_frames));
  s = MelToStftForward<T>(p, mel.data(), out.data(), ThreadParallel(threads));
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// 0.5 |M s - mel|^2 with librosa's bank of type T, in float64.
template <typename T>
double Objective(const RefNnls& n, const std::vector<T>& s, const std::vector<float>& mel,
                 double* half_norm) {
  const RefBank& bank = kRefBanks[n.bank];
  const std::vector<T> m = MelFilterBank<T>(FiltersOf(bank));
  const int64_t n_freq = bank.n_fft / 2 + 1, frames = n.n_frames;
  double obj = 0, norm = 0;
  for (int64_t t = 0; t < frames; ++t) {
    for (int64_t r = 0; r < bank.n_mels; ++r) {
      double acc = 0;
      for (int64_t k = 0; k < n_freq; ++k) {
        acc += double(m[r * n_freq + k]) * double(s[k * frames + t]);
      }
      const double b = double(T(mel[r * frames + t]));
      obj += 0.5 * (acc - b) * (acc - b);
      norm += 0.5 * b * b;
    }
  }
  *half_norm = norm;
  return obj;
}

TEST(MelToStftLibrosa, ObjectiveNoWorseThanLibrosas) {
  for (const RefNnls& n : kRefNnls) {
    SCOPED_TRACE(n.name);
    std::vector<float> mel;
    double norm = 0;
    const std::vector<float> s32 = SolveRef<float>(n, 1.0, 2, &mel);
    const double obj32 = Objective(n, s32, mel, &norm);
    // Rounding the solution to float32 alone leaves about (6e-8)^2 |mel|^2: the floor.
    EXPECT_LE(obj32, n.objective32 * (1 + 1e-3) + 1e-12 * norm)
        << "librosa " << n.objective32 << ", |mel|^2 / 2 = " << norm;
    const std::vector<double> s64 = SolveRef<double>(n, 1.0, 2);
    const double obj64 = Objective(n, s64, mel, &norm);
    EXPECT_LE(obj64, n.objective64 * (1 + 1e-3) + 1e-24 * norm)
        << "librosa " << n.objective64 << ", |mel|^2 / 2 = " << norm;
    for (float v : s32) ASSERT_GE(v, 0.0f);
    std::cout << "[ " << n.name << " ] objective float32 " << obj32 << " (librosa " << n.objective32
              << "), float64 " << obj64 << " (librosa " << n.objective64 << ")\n";
  }
}

TEST(MelToStftForward, PowerIsAppliedLast) {
  const RefNnls& n = kRefNnls[0];
  const std::vector<double> s1 = SolveRef<double>(n, 1.0, 1);
  const std::vector<double> s2 = SolveRef<double>(n, 2.0, 1);
  const std::vector<double> s3 = SolveRef<double>(n, 3.0, 1);
  for (size_t i = 0; i < s1.size(); ++i) {
    EXPECT_DOUBLE_EQ(s2[i], std::sqrt(s1[i]));
    EXPECT_NEAR(s3[i], std::cbrt(s1[i]), 1e-15 + 1e-14 * std::cbrt(s1[i]));
  }
}

TEST(MelToStftForward, BatchesAndThreads) {
  // Two batch items of four frames (the reachable and the smooth problem, same bank).
  const RefBank& bank = kRefBanks[0];
  const int64_t frames = 4, n_mels = bank.n_mels;
  std::vector<float> mel(kNnlsTrueMel, kNnlsTrueMel + n_mels * frames);
  mel.insert(mel.end(), kNnlsMfccMel, kNnlsMfccMel + n_mels * frames);
  MelToStftParams p;
  p.filters = FiltersOf(bank);
  OPFORGE_ASSERT_OK(ValidateMelToStft({2, n_mels, frames}, &p));
  std::vector<float> out1(static_cast<size_t>(2 * p.n_freq * frames)), out3 = out1;
  OPFORGE_ASSERT_OK(MelToStftForward<float>(p, mel.data(), out1.data(), ThreadParallel(1)));
  OPFORGE_ASSERT_OK(MelToStftForward<float>(p, mel.data(), out3.data(), ThreadParallel(3)));
  EXPECT_EQ(out1, out3);
  const std::vector<float> single = SolveRef<float>(kRefNnls[1], 2.0, 2);
  EXPECT_TRUE(std::equal(single.begin(), single.end(), out1.begin() + p.n_freq * frames));
}

// --- a filter bank given by the caller
// ------------------------------------------------------------

TEST(MelToStftGivenFilters, Shapes) {
  MelToStftParams p;
  p.filters.n_fft = 64;
  OPFORGE_ASSERT_OK(ValidateMelToStft({2, 10, 5}, {0, 0}, &p));
  EXPECT_FALSE(p.given_filters);
  OPFORGE_ASSERT_OK(ValidateMelToStft({2, 10, 5}, {10, 33}, &p));
  EXPECT_TRUE(p.given_filters);
  EXPECT_EQ(p.n_freq, 33);
  EXPECT_EQ(p.filters.n_mels, 10);
  for (const std::vector<int64_t>& bad :
       std::vector<std::vector<int64_t>>{{10, 34}, {11, 33}, {0}, {10, 33, 1}, {0, 33}, {330}}) {
    MelToStftParams q;
    q.filters.n_fft = 64;
    const Status s = ValidateMelToStft({2, 10, 5}, bad, &q);
    ASSERT_FALSE(s.ok()) << ShapeString(bad);
    EXPECT_TRUE(NamesWord(s.message(), "MelToStft")) << s.message();
    EXPECT_TRUE(NamesWord(s.message(), "filters")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "[10, 33]")) << s.message();
    EXPECT_TRUE(Contains(s.message(), "got shape " + ShapeString(bad))) << s.message();
  }
  // The mel shape is checked first, with its own message.
  MelToStftParams q;
  const Status s = ValidateMelToStft({10, 0}, {0, 0}, &q);
  EXPECT_TRUE(NamesWord(s.message(), "mel") && Contains(s.message(), "non-empty")) << s.message();
}

MelToStftParams GivenParams(int64_t n_mels, int64_t n_fft, int64_t frames) {
  MelToStftParams p;
  p.filters.n_fft = n_fft;
  p.filters.sr = 8000;
  const Status s = ValidateMelToStft({n_mels, frames}, {n_mels, n_fft / 2 + 1}, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

TEST(MelToStftGivenFilters, ValuesAreChecked) {
  MelToStftParams p = GivenParams(6, 30, 2);
  MelFilterParams f = p.filters;
  const std::vector<double> librosa = MelFilterBank<double>(f);
  OPFORGE_ASSERT_OK(ValidateMelFilterValues<double>(p, librosa.data()));
  const int64_t n_freq = p.n_freq;
  struct Bad {
    const char* what;
    std::vector<std::pair<int64_t, double>> set;  // (flat index, value)
    const char* fragment;
  };
  // Column 3 is non-zero in no row, column 5 in rows 2 and 3 of the bank built below.
  const std::vector<Bad> bad = {
      {"three rows",
       {{0 * n_freq + 5, 1.0}, {2 * n_freq + 5, 1.0}, {3 * n_freq + 5, 1.0}},
       "3 non-zeros in column 5 (rows 0 to 3)"},
      {"two rows apart",
       {{1 * n_freq + 3, 0.5}, {4 * n_freq + 3, 0.5}},
       "2 non-zeros in column 3 (rows 1 to 4)"},
      {"negative", {{2 * n_freq + 7, -0.25}}, "-0.25 at [2, 7]"},
      {"NaN", {{5 * n_freq + 1, std::nan("")}}, "nan at [5, 1]"},
      {"infinity", {{0, std::numeric_limits<double>::infinity()}}, "inf at [0, 0]"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    std::vector<double> m(static_cast<size_t>(6 * n_freq), 0.0);
    m[2 * n_freq + 5] = m[3 * n_freq + 5] = 0.5;
    OPFORGE_ASSERT_OK(ValidateMelFilterValues<double>(p, m.data()));
    for (const auto& [index, value] : b.set) m[static_cast<size_t>(index)] = value;
    const Status s = ValidateMelFilterValues<double>(p, m.data());
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(NamesWord(s.message(), "MelToStft")) << s.message();
    EXPECT_TRUE(NamesWord(s.message(), "filters")) << s.message();
    EXPECT_TRUE(Contains(s.message(), b.fragment)) << s.message();
    // The kernel checks them too, before solving.
    std::vector<double> mel(static_cast<size_t>(6 * 2), 1.0), out(static_cast<size_t>(n_freq * 2));
    const Status k =
        MelToStftForward<double>(p, mel.data(), m.data(), out.data(), SerialParallel());
    EXPECT_EQ(k.message(), s.message());
  }
}

template <typename T>
class MelToStftGivenFiltersTyped : public ::testing::Test {};
using AudioTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MelToStftGivenFiltersTyped, AudioTypes, test::TypeNames);

// librosa's bank handed in equals the bank built from the attrs, bit for bit.
TYPED_TEST(MelToStftGivenFiltersTyped, LibrosasBankGivenEqualsBuilt) {
  using T = TypeParam;
  for (const RefNnls& n : kRefNnls) {
    SCOPED_TRACE(n.name);
    const RefBank& bank = kRefBanks[n.bank];
    std::vector<float> mel32;
    const std::vector<T> built = SolveRef<T>(n, 2.0, 2, &mel32);
    MelToStftParams p;
    p.filters = FiltersOf(bank);
    p.power = 2.0;
    OPFORGE_ASSERT_OK(
        ValidateMelToStft({bank.n_mels, n.n_frames}, {bank.n_mels, bank.n_fft / 2 + 1}, &p));
    ASSERT_TRUE(p.given_filters);
    const std::vector<T> m = MelFilterBank<T>(p.filters);
    // Attrs that would build another bank: a given bank wins.
    p.filters.htk = !p.filters.htk;
    p.filters.fmin = 300;
    const std::vector<T> mel(mel32.begin(), mel32.end());
    std::vector<T> given(built.size());
    OPFORGE_ASSERT_OK(
        MelToStftForward<T>(p, mel.data(), m.data(), given.data(), ThreadParallel(2)));
    EXPECT_EQ(given, built);
  }
}

// TensorFlow's tf.signal.linear_to_mel_weight_matrix bank (HTK scale, triangles in the Mel domain,
// DC bin zeroed, no normalisation), transposed to [n_mels, n_freq]: reachable Mel frames are
// inverted to an objective at rounding level, and every column has at most two adjacent rows.
std::vector<double> TfMelBank(int64_t n_mels, int64_t n_fft, double sr, double lo, double hi) {
  const int64_t n_freq = n_fft / 2 + 1;
  auto mel = [](double hz) { return 1127.0 * std::log1p(hz / 700.0); };
  std::vector<double> edges(static_cast<size_t>(n_mels + 2));
  for (int64_t i = 0; i < n_mels + 2; ++i) {
    edges[static_cast<size_t>(i)] =
        mel(lo) + (mel(hi) - mel(lo)) * static_cast<double>(i) / static_cast<double>(n_mels + 1);
  }
  std::vector<double> m(static_cast<size_t>(n_mels * n_freq), 0.0);
  for (int64_t k = 1; k < n_freq; ++k) {
    const double f = mel(sr / 2 * static_cast<double>(k) / static_cast<double>(n_freq - 1));
    for (int64_t i = 0; i < n_mels; ++i) {
      const double l = edges[i], c = edges[i + 1], u = edges[i + 2];
      m[static_cast<size_t>(i * n_freq + k)] =
          std::max(0.0, std::min((f - l) / (c - l), (u - f) / (u - c)));
    }
  }
  return m;
}

TEST(MelToStftGivenFilters, TensorFlowsBankReachableFrames) {
  const int64_t n_mels = 40, n_fft = 512, frames = 6;
  MelToStftParams p = GivenParams(n_mels, n_fft, frames);
  p.power = 1.0;
  const std::vector<double> m = TfMelBank(n_mels, n_fft, 8000, 20, 3800);
  OPFORGE_ASSERT_OK(ValidateMelFilterValues<double>(p, m.data()));
  const int64_t n_freq = p.n_freq;
  // A smooth non-negative spectrum per frame (a power spectrum of a few harmonics).
  std::vector<double> s_true(static_cast<size_t>(n_freq * frames));
  for (int64_t k = 0; k < n_freq; ++k) {
    for (int64_t t = 0; t < frames; ++t) {
      const double x = static_cast<double>(k) / static_cast<double>(n_freq);
      s_true[static_cast<size_t>(k * frames + t)] =
          1e-3 + std::pow(std::sin(3.14159 * x * (3 + t)), 2) * std::exp(-4 * x);
    }
  }
  std::vector<double> mel(static_cast<size_t>(n_mels * frames), 0.0);
  for (int64_t i = 0; i < n_mels; ++i) {
    for (int64_t t = 0; t < frames; ++t) {
      double acc = 0;
      for (int64_t k = 0; k < n_freq; ++k) acc += m[i * n_freq + k] * s_true[k * frames + t];
      mel[static_cast<size_t>(i * frames + t)] = acc;
    }
  }
  std::vector<double> s(s_true.size());
  OPFORGE_ASSERT_OK(MelToStftForward<double>(p, mel.data(), m.data(), s.data(), ThreadParallel(2)));
  double obj = 0, norm = 0;
  for (int64_t i = 0; i < n_mels; ++i) {
    for (int64_t t = 0; t < frames; ++t) {
      double acc = 0;
      for (int64_t k = 0; k < n_freq; ++k) acc += m[i * n_freq + k] * s[k * frames + t];
      const double b = mel[static_cast<size_t>(i * frames + t)];
      obj += 0.5 * (acc - b) * (acc - b);
      norm += 0.5 * b * b;
    }
  }
  for (double v : s) ASSERT_GE(v, 0.0);
  EXPECT_LE(obj, 1e-16 * norm) << "objective " << obj << ", |mel|^2 / 2 = " << norm;
}

}  // namespace
}  // namespace opforge
