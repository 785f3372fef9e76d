// The element formulas of Swish after the sigmoid, shared by the CPU kernels' scalar tails
// (swish_cpu.cc) and the CUDA kernels (swish.cu). C is the type arithmetic happens in: the
// element type on the CPU (Eigen::half and Eigen::bfloat16 round every step, as TensorFlow's
// chain of kernels does), float for half and bfloat16 on the GPU.
#ifndef OPFORGE_OPS_SWISH_SWISH_ELEMENT_H_
#define OPFORGE_OPS_SWISH_SWISH_ELEMENT_H_

#include "common/host_device.h"

namespace opforge {

// y = x * s.
template <typename C>
OPFORGE_HOST_DEVICE inline C SwishValue(C x, C s) {
  return x * s;
}

// dx = g * (s * (1 + x * (1 - s))): TensorFlow's order of operations (nn_impl.swish's gradient).
// At x = +-inf it is NaN (inf * 0), as TensorFlow's is.
template <typename C>
OPFORGE_HOST_DEVICE inline C SwishBackprop(C g, C x, C s) {
  const C one = static_cast<C>(1.0f);
  const C slope = s * (one + x * (one - s));
  return g * slope;
}

}  // namespace opforge

#endif  // OPFORGE_OPS_SWISH_SWISH_ELEMENT_H_
