// BiasLeakyRelu: leaky_relu(features + bias) in one pass, bias over the last axis:
// y = z > 0 ? z : z * alpha with z = x + bias[c] (tf.nn.bias_add then tf.nn.leaky_relu, the
// same roundings). The epilogue of a convolution that TensorFlow ran (cuDNN on a GPU): on the
// CPU the convolution core applies it inside FusedConv2DBiasLeakyRelu instead. half and bfloat16
// compute in float and round once. alpha >= 0 (the gradient reads the slope from the output's
// sign).
#ifndef OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_H_
#define OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_H_

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

struct BiasLeakyReluParams {
  float alpha = 0.2f;
  int64_t rows = 0, channels = 0;
};

// features at least 1-D, bias [C] with C its last dimension, alpha finite and >= 0.
Status ValidateBiasLeakyRelu(const std::vector<int64_t>& features, const std::vector<int64_t>& bias,
                             BiasLeakyReluParams* params);

template <typename T>
void BiasLeakyRelu(const BiasLeakyReluParams& params, const T* features, const T* bias, T* output,
                   const Parallel& parallel);

// CUDA version (bias_leaky_relu.cu), asynchronous on `stream`; the same bits.
Status BiasLeakyReluGpu(DType dtype, const BiasLeakyReluParams& params, const void* features,
                        const void* bias, void* output, void* stream);

}  // namespace opforge

#endif  // OPFORGE_OPS_BIAS_LEAKY_RELU_BIAS_LEAKY_RELU_H_
