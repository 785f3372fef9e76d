// Random initial phases as numpy and librosa draw them, fast: numpy's RandomState(seed).random(n)
// (MT19937 and its 53-bit doubles) with the Mersenne Twister's state update and tempering four
// words at a time, and cos / sin of 2 pi u for a whole array, by a vectorised polynomial where the
// result is a float. Core code: no TensorFlow header.
#ifndef OPFORGE_COMMON_RANDOM_PHASES_H_
#define OPFORGE_COMMON_RANDOM_PHASES_H_

#include <cstdint>

namespace opforge {

// out[0, n) = numpy.random.RandomState(seed).random(n): MT19937 seeded by init_genrand(seed)
// (std::mt19937's seeding), each double from two 32-bit draws a, b as
// ((a >> 5) * 2^26 + (b >> 6)) / 2^53. The same bits as that loop over std::mt19937.
void MtUniformDoubles(uint32_t seed, int64_t n, double* out);

// cos_out[i] = cos(2 pi u[i]), sin_out[i] = sin(2 pi u[i]) for u[i] in [0, 1), rounded to T.
// double: std::cos and std::sin of the double 2 pi u[i], the values numpy's exp(2j pi u) gives.
// float: 2 pi u reduced exactly to [-pi/4, pi/4] by quarter turns, then Taylor polynomials in
// double (truncation below 1e-19), within 2 ulp of the double value before rounding, so the same
// float as std::cos(2 pi u) except where that double lies within 2 ulp of a rounding boundary
// (where the two may differ by one float ulp). Outside [0, 1) the float path still reduces
// exactly, for |u| < 2^51.
void CosSin2Pi(const double* u, int64_t n, float* cos_out, float* sin_out);
void CosSin2Pi(const double* u, int64_t n, double* cos_out, double* sin_out);

}  // namespace opforge

#endif  // OPFORGE_COMMON_RANDOM_PHASES_H_
