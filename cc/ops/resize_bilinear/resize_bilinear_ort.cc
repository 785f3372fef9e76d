// ONNX Runtime registration of the ResizeBilinear, ResizeBilinearGrad kernels: the op structs of
// resize_bilinear_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(ResizeBilinear, ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_TYPES)
OPFORGE_ORT_KERNELS(ResizeBilinearGrad, ResizeBilinearGradOp, OPFORGE_FLOAT_TYPES)

}  // namespace opforge
