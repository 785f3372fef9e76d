// ONNX Runtime registration of the GriffinLim kernels: the op structs of
// griffin_lim_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(GriffinLim, GriffinLimOp, OPFORGE_GRIFFIN_LIM_TYPES)

}  // namespace opforge
