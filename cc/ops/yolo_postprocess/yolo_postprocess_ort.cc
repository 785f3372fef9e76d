// ONNX Runtime registration of the YoloPostprocess kernel: the op struct of yolo_postprocess_op.h,
// the one TensorFlow runs (common/ort_kernel.h).
//
// TensorFlow's inputs are num_scales features, num_scales anchors, then five scalars; ONNX allows
// a variadic input only last, so the ONNX node (opforge.onnx.export writes it) takes the five
// scalars first, then the features and the anchors: the order the skeleton derives from the
// signature's lists (common/ort_kernel.h).
#include "common/ort_kernel.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {

OPFORGE_ORT_KERNELS(YoloPostprocess, YoloPostprocessOp, OPFORGE_YOLO_POSTPROCESS_TYPES)

}  // namespace opforge
