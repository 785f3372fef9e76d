// The element formulas of LeakyReLU, shared by the CPU kernels (leaky_relu_cpu.cc, inside their
// vectorised loops) and the CUDA kernels (leaky_relu.cu), so both compute the same bits.
// C is the type arithmetic happens in: the element type itself on the CPU (Eigen::half and
// Eigen::bfloat16 round every product to the element type), float for half and bfloat16 on the
// GPU (which rounds the result back once: the same bits).
#ifndef OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_ELEMENT_H_
#define OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_ELEMENT_H_

#include "common/host_device.h"
#include "common/scalar.h"

namespace opforge {

// The slope as TensorFlow applies it: alpha rounded to the element type first, then used in C.
// Num converts between the element type and C (cuda::Num<T> on the GPU, InElementType<T> on the
// CPU).
template <typename Num>
OPFORGE_HOST_DEVICE inline typename Num::C LeakyReluSlope(float alpha) {
  return Num::To(Num::From(static_cast<typename Num::C>(alpha)));
}

// The CPU's Num: arithmetic in the element type itself.
template <typename T>
struct InElementType {
  using C = T;
  static T To(T v) { return v; }
  static T From(T v) { return v; }
};

// y = x > 0 ? x : x * alpha. The product is computed for every element: a conditional
// floating-point multiply may trap, which keeps the CPU loop from becoming a vector select.
template <typename C>
OPFORGE_HOST_DEVICE inline C LeakyReluValue(C x, C alpha) {
  const C scaled = x * alpha;
  return Select(x > static_cast<C>(0), x, scaled);
}

// mask = x > 0 ? 1 : alpha.
template <typename C>
OPFORGE_HOST_DEVICE inline C LeakyReluMask(C x, C alpha) {
  return Select(x > static_cast<C>(0), static_cast<C>(1), alpha);
}

// dx = x > 0 ? g : g * alpha.
template <typename C>
OPFORGE_HOST_DEVICE inline C LeakyReluBackprop(C g, C x, C alpha) {
  const C scaled = g * alpha;
  return Select(x > static_cast<C>(0), g, scaled);
}

}  // namespace opforge

#endif  // OPFORGE_OPS_LEAKY_RELU_LEAKY_RELU_ELEMENT_H_
