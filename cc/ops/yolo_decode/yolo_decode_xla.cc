// YoloDecode, YoloDecodeGrad under XLA (tf.function(jit_compile=True)): custom calls to the op
// structs' FFI handlers (yolo_decode_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow
// kernels: the same bits. The inputs whose values the op reads on the host (anchors) must be
// compile-time constants under XLA.
#include "common/tf_xla_ffi.h"
#include "ops/yolo_decode/yolo_decode_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(YoloDecode, YoloDecodeOp, "anchors")
OPFORGE_REGISTER_XLA_FFI_OP(YoloDecodeGrad, YoloDecodeGradOp, "anchors")

}  // namespace opforge
