// bfloat16 convolutions on oneDNN, the library TensorFlow's own CPU convolutions run on: its
// brgemm kernels use AMX tiles where the CPU has them and AVX512-BF16's dot products elsewhere,
// at several times the float32 rate that opforge's own products reach (they convert bfloat16 to
// float). `opforge bench conv2d_transpose --dtype bfloat16` (and fused_conv2d_bias_leaky_relu)
// times the bfloat16 convolutions against TensorFlow's and prints the CPU's ISA.
//
// oneDNN is not linked: libdnnl.so.3 (oneDNN 3.x, PyPI's `onednn-cpu-gomp`, its OpenMP build) is
// opened with dlopen on the first bfloat16 convolution, from OPFORGE_ONEDNN_LIBRARY where set
// (opforge's Python loader sets it to the installed package's library), else from the loader's
// search path. Where it is missing, where the CPU has neither AVX512-BF16 nor AMX, where
// OPFORGE_MAX_ISA caps the ISA below AVX-512, or with OPFORGE_ONEDNN=0, every function here
// returns false and the caller runs its own float path (the same results within bfloat16's
// rounding). So does a geometry oneDNN does not implement (a right padding below zero, say).
//
// The convolutions here take TensorFlow's layouts as they are: NHWC (or NCHW) activations in
// bfloat16, HWIO filters in bfloat16, a float bias. oneDNN accumulates in float and rounds the
// result once. Primitives are created once per geometry and kept (a bounded cache); every
// call reorders the filter into the primitive's blocked layout (a few hundred KB) and executes
// with its own scratchpad, so concurrent calls are safe. oneDNN runs on its own OpenMP threads
// (as many as the CPU has cores, unless OMP_NUM_THREADS says otherwise), not TensorFlow's pool;
// its partition, not opforge's, decides the order of the float sums.
#ifndef OPFORGE_COMMON_ONEDNN_H_
#define OPFORGE_COMMON_ONEDNN_H_

#include <cstdint>
#include <string>

#include "common/conv2d_core.h"

namespace opforge {
namespace onednn {

// A 2-D convolution (common/conv2d_core.h's geometry) from x [batch, in_h, in_w, in_c] to
// y [batch, out_h, out_w, out_c] with a filter [filter_h, filter_w, in_c, out_c] (HWIO).
// Dilation 1 means none (TensorFlow's convention). nchw: x and y in NCHW instead (the filter
// stays HWIO).
struct ConvShape : conv::Conv2DGeometry {
  bool nchw = false;
};

inline ConvShape ShapeOf(const conv::Conv2DGeometry& g, bool nchw = false) {
  ConvShape s;
  static_cast<conv::Conv2DGeometry&>(s) = g;
  s.nchw = nchw;
  return s;
}

enum class DType { kBFloat16, kFloat32 };

// Whether convolutions of this type run on oneDNN in this process: the library opened (a CPU
// with AVX2+FMA, nothing disables it), and for bfloat16 a CPU with AVX512-BF16 or AMX.
// OPFORGE_MAX_ISA=avx2 caps oneDNN's kernels at AVX2 too. Decided once.
bool Available(DType type);
bool Bf16Available();  // Available(DType::kBFloat16)
// For tests and benchmarks: SetEnabled(false) sends every call back to opforge's own kernels
// (the functions below return false) until SetEnabled(true); process-wide, on by default.
void SetEnabled(bool on);
bool Enabled();
// One line for `opforge doctor`: the library's version and path and the ISA oneDNN reports, or
// why it is not used.
std::string Describe();

// The buffers below hold values of `type` (bfloat16: Eigen::bfloat16's 16-bit layout); the bias
// is float in both. Each returns false, having written nothing, where oneDNN does not run it.
// y = conv(x, w), then + bias[out_c] when bias is not null, then x < 0 ? alpha * x : x when
// leaky, rounded to the type once.
bool ConvForward(const ConvShape& s, DType type, const void* x, const void* w, const float* bias,
                 bool leaky, float alpha, void* y);
// dx = the convolution's gradient with respect to x for the output gradient dy (a transposed
// convolution of dy with w).
bool ConvBackwardData(const ConvShape& s, DType type, const void* dy, const void* w, void* dx);
// dw [filter_h, filter_w, in_c, out_c] = the gradient with respect to the filter.
bool ConvBackwardWeights(const ConvShape& s, DType type, const void* x, const void* dy, void* dw);

}  // namespace onednn
}  // namespace opforge

#endif  // OPFORGE_COMMON_ONEDNN_H_
