// ClippedIdentity: y = clip(x, clip_min, clip_max), the forward of tf.clip_by_value, with the
// "leaky straight-through" gradient: dx = g where clip_min <= x <= clip_max (or x is NaN), and
// dx = leak * g outside the range. clip_min, clip_max and leak are rounded to the element type
// first (from the 32-bit float attrs); every product is one rounding in the element type. So
// the forward has tf.clip_by_value's values (NaN passes through, as through TensorFlow's
// NaN-propagating Minimum and Maximum), and the gradient equals tf.where(outside, leak * g, g).
// Where x is a zero and the bound a zero of the other sign, x is returned: TensorFlow's
// Minimum and Maximum return either zero there, depending on the element's position and on
// whether the bound is broadcast, so no choice could match them everywhere.
#ifndef OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_H_
#define OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

struct ClippedIdentityParams {
  float clip_min = -1.0f;
  float clip_max = 1.0f;
  float leak = 0.01f;
  int64_t size = 0;  // number of elements
};

// clip_min and clip_max finite with clip_min <= clip_max; leak finite.
Status ValidateClippedIdentity(const ClippedIdentityParams& params);

// The gradient's inputs must have one shape.
Status ValidateClippedIdentityGrad(const ClippedIdentityParams& params,
                                   const std::vector<int64_t>& gradients,
                                   const std::vector<int64_t>& features);

// y[i] = clip(x[i], clip_min, clip_max). y may alias x.
template <typename T>
void ClippedIdentityForward(const ClippedIdentityParams& params, const T* x, T* y,
                            const Parallel& parallel);

// dx[i] = x[i] outside [clip_min, clip_max] ? g[i] * leak : g[i]. dx may alias g or x.
template <typename T>
void ClippedIdentityBackward(const ClippedIdentityParams& params, const T* g, const T* x, T* dx,
                             const Parallel& parallel);

// CUDA versions (clipped_identity.cu), asynchronous on `stream` (a cudaStream_t; null is the
// default stream). Compiled only where nvcc exists.
Status ClippedIdentityForwardGpu(DType dtype, const ClippedIdentityParams& params, const void* x,
                                 void* y, void* stream);
Status ClippedIdentityBackwardGpu(DType dtype, const ClippedIdentityParams& params, const void* g,
                                  const void* x, void* dx, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_H_
