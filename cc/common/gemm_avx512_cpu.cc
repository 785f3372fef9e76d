// The AVX-512 build of the convolution core's matrix products (see gemm.h).
// CMakeLists.txt compiles the *_avx512_cpu.cc files with -mavx512f -mavx512dq -mavx512vl
// -mavx512bw (and AVX2+FMA) on x86-64; this build is called only after the CPU reported all of
// them. Eigen's GEMM on 16-lane vectors does twice the work per instruction of 8-lane ones, and
// runs up to twice as fast where the CPU has full-width 512-bit FMA units (see gemm.h for the
// benchmark that compares the builds).
//
// Eigen's namespace is renamed for this file, as in gemm_fma_cpu.cc, so that its
// templates do not merge with another build's.
#include <cstdint>

#include "common/cpu_features.h"
#include "common/gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__FMA__)
#define OPFORGE_CONV_AVX512_BUILD 1
#define Eigen opforge_eigen_avx512
#include <Eigen/Core>
#endif

namespace opforge {
namespace gemm {

#if OPFORGE_CONV_AVX512_BUILD
namespace avx512_build {
#include "common/gemm.inc"
}  // namespace avx512_build

template <>
const Gemm<float>* Avx512Gemm<float>() {
  return CpuHasAvx512() ? &avx512_build::kGemm<float> : nullptr;
}
template <>
const Gemm<double>* Avx512Gemm<double>() {
  return CpuHasAvx512() ? &avx512_build::kGemm<double> : nullptr;
}
#else
template <>
const Gemm<float>* Avx512Gemm<float>() {
  return nullptr;
}
template <>
const Gemm<double>* Avx512Gemm<double>() {
  return nullptr;
}
#endif

}  // namespace gemm
}  // namespace opforge
