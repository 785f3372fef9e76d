// ONNX Runtime registration of the ElementMul, ElementMulGrad kernels: the op structs of
// element_mul_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {

// ONNX Runtime has no complex tensors in custom ops ("tensor type 15 is not supported"): the real
// types of OPFORGE_ELEMENT_MUL_TYPES and OPFORGE_ELEMENT_MUL_GRAD_TYPES.
#define OPFORGE_ELEMENT_MUL_ORT_GRAD_TYPES(X, ...) OPFORGE_FLOAT_INT_TYPES(X, __VA_ARGS__)
#define OPFORGE_ELEMENT_MUL_ORT_TYPES(X, ...)        \
  OPFORGE_ELEMENT_MUL_ORT_GRAD_TYPES(X, __VA_ARGS__) \
  X(int8_t, __VA_ARGS__)                             \
  X(uint8_t, __VA_ARGS__)                            \
  X(int16_t, __VA_ARGS__)                            \
  X(uint16_t, __VA_ARGS__)                           \
  X(uint32_t, __VA_ARGS__)                           \
  X(uint64_t, __VA_ARGS__)

OPFORGE_ORT_KERNELS(ElementMul, "ElementMul", ElementMulOp, OPFORGE_ELEMENT_MUL_ORT_TYPES, "T, T", "T")
OPFORGE_ORT_KERNELS(ElementMulGrad, "ElementMulGrad", ElementMulGradOp, OPFORGE_ELEMENT_MUL_ORT_GRAD_TYPES, "T, T, T", "T, T")

}  // namespace opforge
