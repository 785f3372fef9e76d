#include "common/random_phases.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace opforge {
namespace {

// MT19937 (Matsumoto and Nishimura, 1998), as std::mt19937 and numpy's RandomState.
constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;

inline uint32_t TwistOne(uint32_t a, uint32_t b, uint32_t c) {
  const uint32_t y = (a & kUpper) | (b & kLower);
  return c ^ (y >> 1) ^ ((0u - (y & 1u)) & kMatrixA);
}

inline uint32_t Temper(uint32_t y) {
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

#if defined(__SSE2__)
// Words i..i+3 of the state update at once: each reads mt[i + 1] before it is rewritten (the
// vector loads all four first) and mt[src] at least four words away from i.
inline void TwistFour(uint32_t* mt, int i, int src) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mt + i));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mt + i + 1));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(mt + src));
  const __m128i y = _mm_or_si128(_mm_and_si128(a, _mm_set1_epi32(static_cast<int>(kUpper))),
                                 _mm_and_si128(b, _mm_set1_epi32(static_cast<int>(kLower))));
  const __m128i odd = _mm_sub_epi32(_mm_setzero_si128(), _mm_and_si128(y, _mm_set1_epi32(1)));
  const __m128i r = _mm_xor_si128(_mm_xor_si128(c, _mm_srli_epi32(y, 1)),
                                  _mm_and_si128(odd, _mm_set1_epi32(static_cast<int>(kMatrixA))));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(mt + i), r);
}

inline __m128i TemperFour(__m128i y) {
  y = _mm_xor_si128(y, _mm_srli_epi32(y, 11));
  y = _mm_xor_si128(
      y, _mm_and_si128(_mm_slli_epi32(y, 7), _mm_set1_epi32(static_cast<int>(0x9d2c5680u))));
  y = _mm_xor_si128(
      y, _mm_and_si128(_mm_slli_epi32(y, 15), _mm_set1_epi32(static_cast<int>(0xefc60000u))));
  return _mm_xor_si128(y, _mm_srli_epi32(y, 18));
}
#endif

// The next kN words of the state (genrand's refill), in place.
void Twist(uint32_t* mt) {
  int i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= kN - kM; i += 4) TwistFour(mt, i, i + kM);
#endif
  for (; i < kN - kM; ++i) mt[i] = TwistOne(mt[i], mt[i + 1], mt[i + kM]);
#if defined(__SSE2__)
  for (; i + 4 <= kN - 1; i += 4) TwistFour(mt, i, i + kM - kN);
#endif
  for (; i < kN - 1; ++i) mt[i] = TwistOne(mt[i], mt[i + 1], mt[i + kM - kN]);
  mt[kN - 1] = TwistOne(mt[kN - 1], mt[0], mt[kM - 1]);
}

constexpr double kTwoPi = 6.283185307179586476925286766559;
// Taylor coefficients (-1)^k / (2k + 1)! and (-1)^k / (2k)!.
constexpr double kS3 = -1.0 / 6, kS5 = 1.0 / 120, kS7 = -1.0 / 5040, kS9 = 1.0 / 362880,
                 kS11 = -1.0 / 39916800, kS13 = 1.0 / 6227020800.0, kS15 = -1.0 / 1307674368000.0,
                 kS17 = 1.0 / 355687428096000.0;
constexpr double kC2 = -1.0 / 2, kC4 = 1.0 / 24, kC6 = -1.0 / 720, kC8 = 1.0 / 40320,
                 kC10 = -1.0 / 3628800, kC12 = 1.0 / 479001600, kC14 = -1.0 / 87178291200.0,
                 kC16 = 1.0 / 20922789888000.0, kC18 = -1.0 / 6402373705728000.0;

// One value of the float path; the vector loop below does the same operations in the same order.
void CosSin2PiOne(double u, double* c, double* s) {
  const double q = std::nearbyint(u * 4.0);
  const double t = (u - q * 0.25) * kTwoPi;  // u - q / 4 is exact
  const double t2 = t * t;
  double sin_tail = kS17;
  for (double k : {kS15, kS13, kS11, kS9, kS7, kS5, kS3}) sin_tail = k + t2 * sin_tail;
  double cos_tail = kC18;
  for (double k : {kC16, kC14, kC12, kC10, kC8, kC6, kC4, kC2}) cos_tail = k + t2 * cos_tail;
  const double sp = t + t * (t2 * sin_tail);
  const double cp = 1.0 + t2 * cos_tail;
  const double qm = q - 4.0 * std::floor(q * 0.25);  // the quarter turn, 0 to 3
  const bool odd = qm == 1.0 || qm == 3.0;
  const double cv = odd ? sp : cp, sv = odd ? cp : sp;
  *c = (qm == 1.0 || qm == 2.0) ? -cv : cv;
  *s = qm >= 2.0 ? -sv : sv;
}

}  // namespace

void MtUniformDoubles(uint32_t seed, int64_t n, double* out) {
  alignas(16) uint32_t mt[kN];
  alignas(16) uint32_t words[kN];
  mt[0] = seed;
  for (int i = 1; i < kN; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
  constexpr int kPerBlock = kN / 2;
  for (int64_t done = 0; done < n; done += kPerBlock) {
    Twist(mt);
    const int count = static_cast<int>(n - done < kPerBlock ? n - done : kPerBlock);
    double* o = out + done;
    int j = 0;
#if defined(__AVX__)
    for (int i = 0; i < kN; i += 4) {
      _mm_store_si128(reinterpret_cast<__m128i*>(words + i),
                      TemperFour(_mm_load_si128(reinterpret_cast<const __m128i*>(mt + i))));
    }
    const __m256d scale_hi = _mm256_set1_pd(67108864.0);
    const __m256d scale = _mm256_set1_pd(1.0 / 9007199254740992.0);
    for (; j + 4 <= count; j += 4) {
      const __m128 w0 =
          _mm_castsi128_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(words + 2 * j)));
      const __m128 w1 =
          _mm_castsi128_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(words + 2 * j + 4)));
      const __m128i a =
          _mm_srli_epi32(_mm_castps_si128(_mm_shuffle_ps(w0, w1, _MM_SHUFFLE(2, 0, 2, 0))), 5);
      const __m128i b =
          _mm_srli_epi32(_mm_castps_si128(_mm_shuffle_ps(w0, w1, _MM_SHUFFLE(3, 1, 3, 1))), 6);
      const __m256d v =
          _mm256_add_pd(_mm256_mul_pd(_mm256_cvtepi32_pd(a), scale_hi), _mm256_cvtepi32_pd(b));
      _mm256_storeu_pd(o + j, _mm256_mul_pd(v, scale));
    }
#else
    for (int i = 0; i < kN; ++i) words[i] = Temper(mt[i]);
#endif
    for (; j < count; ++j) {
      const uint32_t a = words[2 * j] >> 5, b = words[2 * j + 1] >> 6;
      o[j] = (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) *
             (1.0 / 9007199254740992.0);
    }
  }
}

void CosSin2Pi(const double* u, int64_t n, double* cos_out, double* sin_out) {
  for (int64_t i = 0; i < n; ++i) {
    const double phase = 2.0 * 3.14159265358979323846 * u[i];
    cos_out[i] = std::cos(phase);
    sin_out[i] = std::sin(phase);
  }
}

void CosSin2Pi(const double* u, int64_t n, float* cos_out, float* sin_out) {
  int64_t i = 0;
#if defined(__AVX__)
  const __m256d four = _mm256_set1_pd(4.0), quarter = _mm256_set1_pd(0.25);
  const __m256d two_pi = _mm256_set1_pd(kTwoPi), one = _mm256_set1_pd(1.0);
  const __m256d two = _mm256_set1_pd(2.0), three = _mm256_set1_pd(3.0);
  const __m256d sign = _mm256_set1_pd(-0.0);
  auto poly = [](__m256d x, __m256d t2, std::initializer_list<double> coefs) {
    // x = c_last, then x = c + t2 x for the coefficients from the highest down.
    for (double c : coefs) x = _mm256_add_pd(_mm256_set1_pd(c), _mm256_mul_pd(t2, x));
    return x;
  };
  for (; i + 4 <= n; i += 4) {
    const __m256d x = _mm256_loadu_pd(u + i);
    const __m256d q =
        _mm256_round_pd(_mm256_mul_pd(x, four), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256d t = _mm256_mul_pd(_mm256_sub_pd(x, _mm256_mul_pd(q, quarter)), two_pi);
    const __m256d t2 = _mm256_mul_pd(t, t);
    const __m256d sin_tail = poly(_mm256_set1_pd(kS17), t2, {kS15, kS13, kS11, kS9, kS7, kS5, kS3});
    const __m256d sp = _mm256_add_pd(t, _mm256_mul_pd(t, _mm256_mul_pd(t2, sin_tail)));
    const __m256d cos_tail =
        poly(_mm256_set1_pd(kC18), t2, {kC16, kC14, kC12, kC10, kC8, kC6, kC4, kC2});
    const __m256d cp = _mm256_add_pd(one, _mm256_mul_pd(t2, cos_tail));
    const __m256d qm =
        _mm256_sub_pd(q, _mm256_mul_pd(four, _mm256_floor_pd(_mm256_mul_pd(q, quarter))));
    const __m256d is1 = _mm256_cmp_pd(qm, one, _CMP_EQ_OQ),
                  is2 = _mm256_cmp_pd(qm, two, _CMP_EQ_OQ);
    const __m256d is3 = _mm256_cmp_pd(qm, three, _CMP_EQ_OQ);
    const __m256d odd = _mm256_or_pd(is1, is3);
    const __m256d cv = _mm256_blendv_pd(cp, sp, odd), sv = _mm256_blendv_pd(sp, cp, odd);
    const __m256d c = _mm256_xor_pd(cv, _mm256_and_pd(_mm256_or_pd(is1, is2), sign));
    const __m256d s = _mm256_xor_pd(sv, _mm256_and_pd(_mm256_or_pd(is2, is3), sign));
    _mm_storeu_ps(cos_out + i, _mm256_cvtpd_ps(c));
    _mm_storeu_ps(sin_out + i, _mm256_cvtpd_ps(s));
  }
#endif
  for (; i < n; ++i) {
    double c, s;
    CosSin2PiOne(u[i], &c, &s);
    cos_out[i] = static_cast<float>(c);
    sin_out[i] = static_cast<float>(s);
  }
}

}  // namespace opforge
