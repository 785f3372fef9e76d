// ONNX Runtime registration of the Conv2DTranspose, Conv2DTransposeInputGrad,
// Conv2DTransposeFilterGrad kernels: the op structs of conv2d_transpose_op.h, the ones TensorFlow
// runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/conv2d_transpose/conv2d_transpose_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(Conv2DTranspose, Conv2DTransposeOp, OPFORGE_CONV2D_TRANSPOSE_TYPES)
OPFORGE_ORT_KERNELS(Conv2DTransposeInputGrad, Conv2DTransposeInputGradOp, OPFORGE_FLOAT_TYPES)
OPFORGE_ORT_KERNELS(Conv2DTransposeFilterGrad, Conv2DTransposeFilterGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge
