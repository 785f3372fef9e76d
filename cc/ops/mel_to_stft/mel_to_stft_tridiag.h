// The arithmetic of the MelToStft CUDA solver (mel_to_stft.cu) that replays Eigen's, written once
// for the host and the device: the LDL^T factorisation and solve of a symmetric tridiagonal
// matrix as Eigen's SimplicialLDLT does them (natural ordering), and Eigen's dot product and
// squared norm of float64 vectors in the order of its x86-64 AVX build. The host uses the
// factorisation for M M^T + mu I; the CUDA test checks it against SimplicialLDLT bit for bit.
//
// The matrix J: diagonal jd[i]; sub-diagonal jo[i] = J(i, i-1) for i >= 1 where has_off[i] (the
// entry is in the sparse pattern; elsewhere it is absent, as in the CPU core's pattern).
#ifndef OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_TRIDIAG_H_
#define OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_TRIDIAG_H_

#include <cstdint>

#include "common/host_device.h"

namespace opforge {
namespace mel_to_stft {

// Eigen's up-looking factorisation (SimplicialCholeskyBase::factorize_preordered with DoLDLT)
// on a tridiagonal pattern: D[0] = J(0, 0); where J(i, i-1) is in the pattern,
// L[i] = J(i, i-1) / D[i-1] and D[i] = J(i, i) - L[i] J(i, i-1), else D[i] = J(i, i). False on a
// zero pivot (Eigen's NumericalIssue), with d and l filled up to it.
OPFORGE_HOST_DEVICE inline bool TridiagLdltFactorize(int64_t n, const unsigned char* has_off,
                                                     const double* jd, const double* jo, double* d,
                                                     double* l) {
  for (int64_t i = 0; i < n; ++i) {
    double di = jd[i];
    if (i > 0 && has_off[i]) {
      const double li = jo[i] / d[i - 1];
      di -= li * jo[i];
      l[i] = li;
    }
    if (di == 0.0) return false;
    d[i] = di;
  }
  return true;
}

// SimplicialLDLT::solve, in place: L y = x column by column (a zero y[i] skipped, as Eigen's
// sparse forward substitution does), then y * (1 / D) (Eigen applies D^-1 as the inverse
// diagonal times the vector), then L^T x = y row by row.
OPFORGE_HOST_DEVICE inline void TridiagLdltSolve(int64_t n, const unsigned char* has_off,
                                                 const double* d, const double* l, double* x) {
  for (int64_t i = 0; i + 1 < n; ++i) {
    const double tmp = x[i];
    if (tmp != 0.0 && has_off[i + 1]) x[i + 1] = (-tmp) * l[i + 1] + x[i + 1];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = (1.0 / d[i]) * x[i];
  for (int64_t i = n - 2; i >= 0; --i) {
    if (has_off[i + 1]) x[i] = (-l[i + 1]) * x[i + 1] + x[i];
  }
}

// Eigen's redux of x[i]^2 (squaredNorm) for 4-double packets: two packet accumulators over
// pairs of packets, one more packet, the packet reduced as (p0 + p2) + (p1 + p3), then the tail
// in order; below one packet, a plain sum.
OPFORGE_HOST_DEVICE inline double EigenSquaredNorm(const double* x, int64_t n) {
  const int64_t aligned = n / 4 * 4, aligned2 = n / 8 * 8;
  if (aligned == 0) {
    double r = x[0] * x[0];
    for (int64_t i = 1; i < n; ++i) r = r + x[i] * x[i];
    return r;
  }
  double p0[4], p1[4];
  for (int j = 0; j < 4; ++j) p0[j] = x[j] * x[j];
  if (aligned > 4) {
    for (int j = 0; j < 4; ++j) p1[j] = x[4 + j] * x[4 + j];
    for (int64_t i = 8; i < aligned2; i += 8) {
      for (int j = 0; j < 4; ++j) {
        p0[j] = p0[j] + x[i + j] * x[i + j];
        p1[j] = p1[j] + x[i + 4 + j] * x[i + 4 + j];
      }
    }
    for (int j = 0; j < 4; ++j) p0[j] = p0[j] + p1[j];
    if (aligned > aligned2) {
      for (int j = 0; j < 4; ++j) p0[j] = p0[j] + x[aligned2 + j] * x[aligned2 + j];
    }
  }
  double r = (p0[0] + p0[2]) + (p0[1] + p0[3]);
  for (int64_t i = aligned; i < n; ++i) r = r + x[i] * x[i];
  return r;
}

// Eigen's inner product (a.dot(b)) for 4-double packets: four packet accumulators over groups
// of four packets, the remaining packets into the first ones, the accumulators added
// (2 + 3, 1 + 2, 0 + 1), reduced as above, then the tail in order as a * b + r.
OPFORGE_HOST_DEVICE inline double EigenDot(const double* a, const double* b, int64_t n) {
  if (n < 4) {
    double r = a[0] * b[0];
    for (int64_t i = 1; i < n; ++i) r = a[i] * b[i] + r;
    return r;
  }
  const int64_t packet_end = n / 4 * 4, quad_end = n / 16 * 16;
  const int64_t packets = n / 4, rem_packets = (packet_end - quad_end) / 4;
  double p[4][4];
  for (int q = 0; q < 4 && q < packets; ++q) {
    for (int j = 0; j < 4; ++j) p[q][j] = a[4 * q + j] * b[4 * q + j];
  }
  if (packets >= 4) {
    for (int64_t i = 16; i < quad_end; i += 16) {
      for (int q = 0; q < 4; ++q) {
        for (int j = 0; j < 4; ++j) {
          const int64_t at = i + 4 * q + j;
          p[q][j] = a[at] * b[at] + p[q][j];
        }
      }
    }
    for (int q = 0; q < rem_packets; ++q) {
      for (int j = 0; j < 4; ++j) {
        const int64_t at = quad_end + 4 * q + j;
        p[q][j] = a[at] * b[at] + p[q][j];
      }
    }
    for (int j = 0; j < 4; ++j) p[2][j] = p[2][j] + p[3][j];
  }
  if (packets >= 3) {
    for (int j = 0; j < 4; ++j) p[1][j] = p[1][j] + p[2][j];
  }
  if (packets >= 2) {
    for (int j = 0; j < 4; ++j) p[0][j] = p[0][j] + p[1][j];
  }
  double r = (p[0][0] + p[0][2]) + (p[0][1] + p[0][3]);
  for (int64_t i = packet_end; i < n; ++i) r = a[i] * b[i] + r;
  return r;
}

}  // namespace mel_to_stft
}  // namespace opforge

#endif  // OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_TRIDIAG_H_
