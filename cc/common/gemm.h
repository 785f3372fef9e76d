// The convolution core's matrix products (Conv2DTranspose, FusedConv2DBiasLeakyRelu), as a
// table of function pointers with three builds: the default one (gemm.cc, compiled like the
// rest of the core: AVX), one compiled for AVX2+FMA (gemm_fma_cpu.cc) and one for AVX-512
// (gemm_avx512_cpu.cc), the widest the CPU has picked at run time. TensorFlow's x86
// wheels require only AVX, so neither can be a compile-time assumption; Eigen's GEMM with FMA
// is ~1.1-1.4x faster than without, and with AVX-512 ~2x faster again on the AMD EPYC machines
// of this project (full-width 512-bit FMA units).
//
// Every product is Eigen's (no hand-written GEMM). Both builds give results within rounding
// of each other; on one machine the same build is always used, so results are reproducible
// and independent of the thread count.
#ifndef OPFORGE_COMMON_GEMM_H_
#define OPFORGE_COMMON_GEMM_H_

#include <cstdint>

namespace opforge {
namespace gemm {

// All matrices row-major and contiguous.
template <typename C>
struct Gemm {
  // c[m, n] = a[m, k] * b[n, k]^T, rows of c ldc elements apart
  void (*a_bt)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n, int64_t ldc);
  // c[m, n] = a[m, k] * b[k, n]
  void (*a_b)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n);
  // c[m, n] += a[k, m]^T * b[k, n]
  void (*at_b_add)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n);
  // c[m, n] = a[m, k] * b[k, n] with rows of b ldb and rows of c ldc elements apart (a block of
  // columns of a wider product)
  void (*a_b_strided)(const C* a, const C* b, C* c, int64_t m, int64_t k, int64_t n, int64_t ldb,
                      int64_t ldc);
};

// The default build (always present).
template <typename C>
const Gemm<C>* DefaultGemm();
// The AVX2+FMA build, or null where it was not compiled or the CPU lacks AVX2 or FMA.
template <typename C>
const Gemm<C>* FmaGemm();
// The AVX-512 build (gemm_avx512_cpu.cc), or null where it was not compiled or the
// CPU lacks AVX-512 F/DQ/VL/BW.
template <typename C>
const Gemm<C>* Avx512Gemm();
// Avx512Gemm() where available, else FmaGemm(), else DefaultGemm(); decided once per process.
template <typename C>
const Gemm<C>& BestGemm();

}  // namespace gemm
}  // namespace opforge

#endif  // OPFORGE_COMMON_GEMM_H_
