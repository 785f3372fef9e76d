// Conv2DTranspose, Conv2DTransposeInputGrad, Conv2DTransposeFilterGrad under XLA
// (tf.function(jit_compile=True)): custom calls to the op structs' FFI handlers
// (conv2d_transpose_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels: the same
// bits. The inputs whose values the op reads on the host (output_shape) must be compile-time
// constants under XLA.
#include "common/tf_xla_ffi.h"
#include "ops/conv2d_transpose/conv2d_transpose_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(Conv2DTranspose, Conv2DTransposeOp, "output_shape")
OPFORGE_REGISTER_XLA_FFI_OP(Conv2DTransposeInputGrad, Conv2DTransposeInputGradOp)
OPFORGE_REGISTER_XLA_FFI_OP(Conv2DTransposeFilterGrad, Conv2DTransposeFilterGradOp)

}  // namespace opforge
