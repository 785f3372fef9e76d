// Swish and its gradient under XLA (tf.function(jit_compile=True)): custom calls to the op
// structs' FFI handlers (swish_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow
// kernels: the same bits.
//
// Why not an HLO lowering: one was written (x * logistic(x), the gradient's formula around XLA's
// Logistic) and measured with `opforge bench --xla` on the 2-core Xeon: XLA's logistic is not
// Eigen's, so the results were a few ulps off the kernel's, and in bfloat16 XLA:CPU ran the
// forward 2.6x and the gradient 1.3x slower than the kernel (float32: 1.5x faster). The custom call
// gives the kernel's bits at the kernel's speed in every dtype.
#include "common/tf_xla_ffi.h"
#include "ops/swish/swish_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(Swish, SwishOp)
OPFORGE_REGISTER_XLA_FFI_OP(SwishGrad, SwishGradOp)

}  // namespace opforge
