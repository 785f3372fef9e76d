// MtUniformDoubles against the loop it replaces (std::mt19937, two draws per double, numpy's
// RandomState.random), bit for bit, across block boundaries and seeds; CosSin2Pi against long
// double cos and sin (float: within half a float ulp plus 1e-15; the same floats as std::cos of
// the double 2 pi u except at a handful of boundary cases), its vector body against its scalar
// tail, and the double path against std::cos and std::sin exactly.
#include "common/random_phases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace opforge {
namespace {

std::vector<double> StdDoubles(uint32_t seed, int64_t n) {
  std::mt19937 gen(seed);
  std::vector<double> out(static_cast<size_t>(n));
  for (double& u : out) {
    const uint32_t a = static_cast<uint32_t>(gen()) >> 5;
    const uint32_t b = static_cast<uint32_t>(gen()) >> 6;
    u = (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) / 9007199254740992.0;
  }
  return out;
}

TEST(MtUniformDoubles, EqualsStdMt19937BitForBit) {
  for (uint32_t seed : {0u, 1u, 7u, 5489u, 0xffffffffu}) {
    for (int64_t n : {0, 1, 3, 4, 311, 312, 313, 624, 1000, 221400}) {
      const std::vector<double> want = StdDoubles(seed, n);
      std::vector<double> got(static_cast<size_t>(n) + 1, -1.0);
      MtUniformDoubles(seed, n, got.data());
      // Equal values are equal bits here: every draw is a non-negative multiple of 2^-53.
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
          << "seed " << seed << ", n " << n;
      EXPECT_EQ(got[static_cast<size_t>(n)], -1.0) << "wrote past n, seed " << seed;
    }
  }
}

TEST(MtUniformDoubles, NumpysFirstValuesForSeedZero) {
  // numpy.random.RandomState(0).random(3).
  double got[3];
  MtUniformDoubles(0, 3, got);
  EXPECT_EQ(got[0], 0.5488135039273248);
  EXPECT_EQ(got[1], 0.7151893663724195);
  EXPECT_EQ(got[2], 0.6027633760716439);
}

std::vector<double> TestAngles() {
  std::vector<double> u = StdDoubles(3, 20000);
  // Quarter and eighth turns, their neighbours, the ends of [0, 1).
  for (int k = 0; k <= 8; ++k) {
    const double x = k / 8.0;
    for (double d : {0.0, 0x1p-53, -0x1p-53, 1e-9, -1e-9}) {
      if (x + d >= 0.0 && x + d < 1.0) u.push_back(x + d);
    }
  }
  u.push_back(std::nextafter(1.0, 0.0));
  return u;
}

TEST(CosSin2Pi, FloatWithinHalfAnUlpOfTheTrueValues) {
  const std::vector<double> u = TestAngles();
  const int64_t n = static_cast<int64_t>(u.size());
  std::vector<float> c(u.size()), s(u.size());
  CosSin2Pi(u.data(), n, c.data(), s.data());
  const long double two_pi = 6.283185307179586476925286766559L;
  for (size_t i = 0; i < u.size(); ++i) {
    const long double tc = std::cos(two_pi * u[i]), ts = std::sin(two_pi * u[i]);
    // Half a float ulp of the true value, plus the double polynomial's error.
    auto bound = [](long double v) {
      return 0.5 * std::ldexp(
                       1.0,
                       std::ilogb(static_cast<float>(std::fabs(static_cast<double>(v))) + 1e-30f) -
                           23) +
             1e-15;
    };
    ASSERT_LE(std::fabs(static_cast<long double>(c[i]) - tc), bound(tc)) << "u " << u[i];
    ASSERT_LE(std::fabs(static_cast<long double>(s[i]) - ts), bound(ts)) << "u " << u[i];
    const double phase = 2.0 * 3.14159265358979323846 * u[i];
    // Away from the zeros of cos and sin, the same float as std::cos / std::sin of the double
    // 2 pi u. Near them that double's rounding (1e-16 absolute) is a large relative error,
    // and the exact reduction is the closer of the two: there they may differ.
    if (std::fabs(tc) > 1e-6) {
      EXPECT_EQ(c[i], static_cast<float>(std::cos(phase))) << "u " << u[i];
    }
    if (std::fabs(ts) > 1e-6) {
      EXPECT_EQ(s[i], static_cast<float>(std::sin(phase))) << "u " << u[i];
    }
  }
}

TEST(CosSin2Pi, VectorBodyEqualsScalarTail) {
  const std::vector<double> u = TestAngles();
  std::vector<float> c(u.size()), s(u.size());
  CosSin2Pi(u.data(), static_cast<int64_t>(u.size()), c.data(), s.data());
  for (size_t i = 0; i < u.size(); ++i) {
    float c1, s1;
    CosSin2Pi(&u[i], 1, &c1, &s1);  // n = 1: the scalar loop alone
    ASSERT_EQ(std::memcmp(&c1, &c[i], sizeof(float)), 0) << "u " << u[i];
    ASSERT_EQ(std::memcmp(&s1, &s[i], sizeof(float)), 0) << "u " << u[i];
  }
}

TEST(CosSin2Pi, DoubleIsStdCosAndSin) {
  const std::vector<double> u = TestAngles();
  std::vector<double> c(u.size()), s(u.size());
  CosSin2Pi(u.data(), static_cast<int64_t>(u.size()), c.data(), s.data());
  for (size_t i = 0; i < u.size(); ++i) {
    const double phase = 2.0 * 3.14159265358979323846 * u[i];
    ASSERT_EQ(c[i], std::cos(phase));
    ASSERT_EQ(s[i], std::sin(phase));
  }
}

}  // namespace
}  // namespace opforge
