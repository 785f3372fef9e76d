// XLA FFI handlers of the ResizeBilinear, ResizeBilinearGrad kernels: the op structs of
// resize_bilinear_op.h, the ones TensorFlow runs (common/xla_ffi.h).
#include "common/xla_ffi.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {

OPFORGE_FFI_KERNELS(ResizeBilinear, ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_TYPES)
OPFORGE_FFI_KERNELS(ResizeBilinearGrad, ResizeBilinearGradOp, OPFORGE_FLOAT_TYPES)

// The CUDA platform's handlers (XLA:GPU; common/xla_ffi.h), over the GPU kernels' types.
OPFORGE_FFI_GPU_KERNELS(ResizeBilinear, ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_GPU_TYPES)
OPFORGE_FFI_GPU_KERNELS(ResizeBilinearGrad, ResizeBilinearGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge
