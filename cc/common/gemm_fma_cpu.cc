// The AVX2+FMA build of the convolution core's matrix products (see gemm.h).
// CMakeLists.txt compiles this one file with -mavx2 -mfma on x86-64; it is called only after
// the CPU reported both features.
//
// Eigen is header-only: its templates instantiated here would have the same symbols as the
// default build's and the linker would keep one copy for both, so an AVX2 copy could run on a
// CPU without AVX2. Renaming Eigen's namespace for this file keeps the two builds apart. Nothing
// else with inline definitions is included here.
#include <cstdint>

#include "common/cpu_features.h"
#include "common/gemm.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define OPFORGE_CONV_FMA_BUILD 1
#define Eigen opforge_eigen_avx2_fma
#include <Eigen/Core>
#endif

namespace opforge {
namespace gemm {

#if OPFORGE_CONV_FMA_BUILD
namespace fma_build {
#include "common/gemm.inc"
}  // namespace fma_build

template <>
const Gemm<float>* FmaGemm<float>() {
  return CpuHasAvx2Fma() ? &fma_build::kGemm<float> : nullptr;
}
template <>
const Gemm<double>* FmaGemm<double>() {
  return CpuHasAvx2Fma() ? &fma_build::kGemm<double> : nullptr;
}
#else
template <>
const Gemm<float>* FmaGemm<float>() {
  return nullptr;
}
template <>
const Gemm<double>* FmaGemm<double>() {
  return nullptr;
}
#endif

}  // namespace gemm
}  // namespace opforge
