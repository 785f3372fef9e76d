// ONNX Runtime registration of the YoloPostprocess kernel: the op struct of yolo_postprocess_op.h,
// the one TensorFlow runs (common/ort_kernel.h).
//
// TensorFlow's inputs are num_scales features, num_scales anchors, then five scalars; ONNX allows
// a variadic input only last, so the ONNX node (opforge.onnx.export writes it) takes the five
// scalars first, then the features and the anchors.
#include <vector>

#include "common/ort_kernel.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"

namespace opforge {
namespace {

// ONNX input i -> TensorFlow input: the scalars (0..4) go after the 2 * num_scales maps.
std::vector<int> YoloPostprocessOrder(int n) {
  const int maps = n - 5;
  std::vector<int> order(static_cast<size_t>(n > 0 ? n : 0), -1);
  if (maps < 2 || maps % 2 != 0) return order;  // -1: the adapter reports the count
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i < 5 ? maps + i : i - 5;
  return order;
}

}  // namespace

OPFORGE_ORT_KERNELS_ORDERED(YoloPostprocess, "YoloPostprocess", YoloPostprocessOp,
                            OPFORGE_YOLO_POSTPROCESS_TYPES, "int32, int32, float, float, float, T...",
                            "T, T, float, int32", YoloPostprocessOrder)

}  // namespace opforge
