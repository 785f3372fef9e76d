// YoloTargets under XLA (tf.function(jit_compile=True)): custom calls to the op structs' FFI
// handlers (yolo_targets_ffi.cc, common/tf_xla_ffi.h), the same core as the TensorFlow kernels: the
// same bits.
#include "common/tf_xla_ffi.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {

OPFORGE_REGISTER_XLA_FFI_OP(YoloTargets, YoloTargetsOp)

}  // namespace opforge
