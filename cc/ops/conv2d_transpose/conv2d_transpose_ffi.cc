// XLA FFI handlers of the Conv2DTranspose, Conv2DTransposeInputGrad, Conv2DTransposeFilterGrad
// kernels: the op structs of conv2d_transpose_op.h, the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/conv2d_transpose/conv2d_transpose_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(Conv2DTranspose, Conv2DTransposeOp, OPFORGE_CONV2D_TRANSPOSE_TYPES)
OPFORGE_FFI_KERNELS(Conv2DTransposeInputGrad, Conv2DTransposeInputGradOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_KERNELS(Conv2DTransposeFilterGrad, Conv2DTransposeFilterGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(Conv2DTranspose, Conv2DTransposeOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(Conv2DTransposeInputGrad, Conv2DTransposeInputGradOp, OPFORGE_FLOAT_TYPES)
OPFORGE_FFI_GPU_KERNELS(Conv2DTransposeFilterGrad, Conv2DTransposeFilterGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge
