// The default build of the convolution core's matrix products (gemm.h) and the run-time choice
// of the widest build the CPU supports.
#include "common/gemm.h"

#include <Eigen/Core>
#include <cstdint>

namespace opforge {

namespace gemm {
namespace default_build {
#include "common/gemm.inc"
}  // namespace default_build

template <typename C>
const Gemm<C>* DefaultGemm() {
  return &default_build::kGemm<C>;
}

template <typename C>
const Gemm<C>& BestGemm() {
  static const Gemm<C>* best = Avx512Gemm<C>() != nullptr ? Avx512Gemm<C>()
                               : FmaGemm<C>() != nullptr  ? FmaGemm<C>()
                                                          : DefaultGemm<C>();
  return *best;
}

template const Gemm<float>* DefaultGemm<float>();
template const Gemm<double>* DefaultGemm<double>();
template const Gemm<float>& BestGemm<float>();
template const Gemm<double>& BestGemm<double>();
}  // namespace gemm

}  // namespace opforge
