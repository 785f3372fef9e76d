// ResizeBilinear and its gradient under XLA (tf.function(jit_compile=True)): custom calls to the
// op structs' FFI handlers (resize_bilinear_ffi.cc, common/tf_xla_ffi.h), the same core as the
// TensorFlow kernels: the same bits. `size` must be a compile-time constant under XLA (XLA's
// shapes are static).
//
// Why not an HLO lowering: one was written (gathers of the source rows and columns and lerps for
// the forward, one scatter-add for the gradient) and measured with `opforge bench --xla` on the
// 2-core Xeon: XLA contracted the forward's lerps into fused multiply-adds (within 2^-22 of the
// largest input, not the same bits), it ran 3.2x slower than the kernel for 3-channel images
// upscaled to 512x512 (1.3-1.6x faster at 32-128 channels), and its gradient's scatter-add ran
// 4-7x slower than the kernel at every size. The custom call is the kernel: the same bits and
// its speed, at every shape.
#include "common/tf_xla_ffi.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(ResizeBilinear, ResizeBilinearOp, "size")
OPFORGE_REGISTER_XLA_FFI_OP(ResizeBilinearGrad, ResizeBilinearGradOp)

}  // namespace opforge
