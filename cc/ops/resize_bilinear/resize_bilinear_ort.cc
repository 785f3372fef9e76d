// ONNX Runtime registration of the ResizeBilinear, ResizeBilinearGrad kernels: the op structs of
// resize_bilinear_op.h, the ones TensorFlow runs (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(ResizeBilinear, "ResizeBilinear", ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_TYPES, "T, int32", "float")
OPFORGE_ORT_KERNELS(ResizeBilinearGrad, "ResizeBilinearGrad", ResizeBilinearGradOp, OPFORGE_FLOAT_TYPES, "float, T", "T")

}  // namespace opforge
