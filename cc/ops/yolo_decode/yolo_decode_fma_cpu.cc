// The AVX2+FMA build of the YoloDecode kernels (float and double; see yolo_decode_kernels.h).
// CMakeLists.txt compiles this file with -mavx2 -mfma on x86-64; its kernels are called only
// after the CPU reported both features.
//
// Eigen is header-only: its templates instantiated here would have the same symbols as the
// default build's, and the linker would keep one copy for both (an AVX2 copy could then run on a
// CPU without AVX2). Renaming Eigen's namespace for this file keeps the two builds apart; nothing
// else with inline definitions that use Eigen is included.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/cpu_features.h"
#include "ops/yolo_decode/yolo_decode.h"
#include "ops/yolo_decode/yolo_decode_kernels.h"
#include "ops/yolo_decode/yolo_decode_math.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#define OPFORGE_YOLO_FMA_BUILD 1
#define Eigen opforge_eigen_yolo_avx2_fma
#include <immintrin.h>

#include <Eigen/Core>
#endif

namespace opforge {

#if OPFORGE_YOLO_FMA_BUILD
namespace fma_build {
#include "ops/yolo_decode/yolo_decode_kernels.inc"

template <typename T>
constexpr YoloDecodeKernels<T> kKernels = {&Forward<T, T>, &Backward<T, T>, &DecodeSelected<T, T>};
}  // namespace fma_build

template <>
const YoloDecodeKernels<float>* FmaYoloDecodeKernels<float>() {
  return CpuHasAvx2Fma() ? &fma_build::kKernels<float> : nullptr;
}
template <>
const YoloDecodeKernels<double>* FmaYoloDecodeKernels<double>() {
  return CpuHasAvx2Fma() ? &fma_build::kKernels<double> : nullptr;
}
#else
template <>
const YoloDecodeKernels<float>* FmaYoloDecodeKernels<float>() {
  return nullptr;
}
template <>
const YoloDecodeKernels<double>* FmaYoloDecodeKernels<double>() {
  return nullptr;
}
#endif

}  // namespace opforge
