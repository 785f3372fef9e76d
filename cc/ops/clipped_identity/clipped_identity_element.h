// The element formulas of ClippedIdentity, shared by the CPU kernels (clipped_identity_cpu.cc)
// and the CUDA kernels (clipped_identity.cu), so both compute the same bits. C is the type
// arithmetic happens in (the element type on the CPU, float for half and bfloat16 on the GPU:
// a comparison, a select and one product, all exact or rounded once either way).
#ifndef OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_ELEMENT_H_
#define OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_ELEMENT_H_

#include "common/host_device.h"
#include "common/scalar.h"

namespace opforge {

// An attr as the element type applies it: rounded to the element type first, then used in C.
// Num converts between the element type and C (cuda::Num<T> on the GPU, an identity on the CPU).
template <typename Num>
OPFORGE_HOST_DEVICE inline typename Num::C ClippedIdentityAttr(float value) {
  return Num::To(Num::From(static_cast<typename Num::C>(value)));
}

// y = x < lo ? lo : (x > hi ? hi : x): NaN and x itself on a tie (so -0 stays -0 against a bound
// of +0; TensorFlow's Maximum(Minimum(x, hi), lo) returns either zero there).
template <typename C>
OPFORGE_HOST_DEVICE inline C ClippedIdentityValue(C x, C lo, C hi) {
  return Select(x < lo, lo, Select(x > hi, hi, x));
}

// dx = g * leak outside [lo, hi], g inside (and for NaN x). The product is computed for every
// element: a conditional multiply keeps the CPU loop from becoming a vector select.
template <typename C>
OPFORGE_HOST_DEVICE inline C ClippedIdentityBackprop(C g, C x, C lo, C hi, C leak) {
  const C leaked = g * leak;
  return Select((x < lo) | (x > hi), leaked, g);
}

}  // namespace opforge

#endif  // OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_ELEMENT_H_
