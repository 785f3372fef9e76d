// XLA FFI handlers of the ElementMul and ElementMulGrad kernels: the op structs of
// element_mul_op.h, the ones TensorFlow runs (common/xla_ffi.h). TensorFlow's XLA runs these ops
// as HLO (element_mul_xla.cc); the handlers are for the other XLA hosts (opforge.jax).
#include "common/xla_ffi.h"
#include "ops/element_mul/element_mul.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(ElementMul, ElementMulOp, OPFORGE_ELEMENT_MUL_TYPES)
OPFORGE_FFI_KERNELS(ElementMulGrad, ElementMulGradOp, OPFORGE_ELEMENT_MUL_GRAD_TYPES)

// The CUDA platform's handlers, over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(ElementMul, ElementMulOp, OPFORGE_ELEMENT_MUL_GPU_TYPES)
OPFORGE_FFI_GPU_KERNELS(ElementMulGrad, ElementMulGradOp, OPFORGE_ELEMENT_MUL_GPU_TYPES)

}  // namespace opforge
