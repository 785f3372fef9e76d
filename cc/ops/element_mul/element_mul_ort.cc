// ONNX Runtime registration of the ElementMul, ElementMulGrad kernels: the op structs of
// element_mul_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/element_mul/element_mul_op.h"

namespace opforge {

// ONNX Runtime has no complex tensors in custom ops ("tensor type 15 is not supported"): the
// real types of the TensorFlow registrations.
OPFORGE_ORT_KERNELS(ElementMul, ElementMulOp, OPFORGE_ELEMENT_MUL_REAL_TYPES)
OPFORGE_ORT_KERNELS(ElementMulGrad, ElementMulGradOp, OPFORGE_FLOAT_INT_TYPES)

}  // namespace opforge
