// TensorFlow binding of ResizeBilinear and its gradient: op registration with shape functions,
// and the op structs that TfKernel (common/tf_kernel.h) runs.
#include <vector>

#include "common/tf_kernel.h"
#include "ops/resize_bilinear/resize_bilinear.h"
#include "ops/resize_bilinear/resize_bilinear_op.h"

namespace opforge {

using tensorflow::Tensor;
namespace {

using namespace resize_bilinear_op;  // NOLINT: the op's constants and attr reader, shared with its
                                     // kernels

absl::Status CheckAttrs(shape_inference::InferenceContext* c, const char* op) {
  bool align_corners = false;
  bool half_pixel_centers = false;
  TF_RETURN_IF_ERROR(c->GetAttr("align_corners", &align_corners));
  TF_RETURN_IF_ERROR(c->GetAttr("half_pixel_centers", &half_pixel_centers));
  return ToTfStatus(ValidateResizeBilinearAttrs(op, align_corners, half_pixel_centers));
}

// [batch, new_height, new_width, channels]: batch and channels from images; the new size from
// the size tensor as far as it is known when the graph is built (a constant gives both, a
// tf.stack of a constant and a run-time value gives the constant one).
absl::Status ResizeShape(shape_inference::InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckAttrs(c, "ResizeBilinear"));
  const ShapeFn fn(c, "ResizeBilinear");
  shape_inference::ShapeHandle images;
  TF_RETURN_IF_ERROR(
      fn.Rank(0, "images", 4, &images, "a 4-D tensor [batch, height, width, channels]"));
  shape_inference::ShapeHandle size;
  const std::string size_expected = "a 1-D tensor of two elements [new_height, new_width]";
  TF_RETURN_IF_ERROR(fn.Rank(1, "size", 1, &size, size_expected));
  shape_inference::DimensionHandle unused;
  TF_RETURN_IF_ERROR(
      fn.MergeDim(c->Dim(size, 0), c->MakeDim(2), "size", size_expected, fn.Text(size), &unused));
  if (const Tensor* values = c->input_tensor(1)) {
    const auto v = values->vec<int32_t>();
    if (v(0) <= 0 || v(1) <= 0) {
      return ToTfStatus(InvalidArgument(
          "ResizeBilinear", "size", "positive [new_height, new_width]", ShapeString({v(0), v(1)})));
    }
  }
  shape_inference::ShapeHandle new_size;
  TF_RETURN_IF_ERROR(c->MakeShapeFromShapeTensor(1, &new_size));
  c->set_output(0, c->MakeShape({c->Dim(images, 0), c->Dim(new_size, 0), c->Dim(new_size, 1),
                                 c->Dim(images, 3)}));
  return absl::OkStatus();
}

// The original image's shape, with batch and channels merged with those of grads.
absl::Status ResizeGradShape(shape_inference::InferenceContext* c) {
  TF_RETURN_IF_ERROR(CheckAttrs(c, "ResizeBilinearGrad"));
  const ShapeFn fn(c, "ResizeBilinearGrad");
  const std::string image_text = "a 4-D tensor [batch, height, width, channels]";
  shape_inference::ShapeHandle grads;
  shape_inference::ShapeHandle image;
  TF_RETURN_IF_ERROR(fn.Rank(0, "grads", 4, &grads, image_text));
  TF_RETURN_IF_ERROR(fn.Rank(1, "original_image", 4, &image, image_text));
  const std::string expected = "the batch size and channels of grads " + fn.Text(grads);
  shape_inference::DimensionHandle batch;
  shape_inference::DimensionHandle channels;
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(grads, 0), c->Dim(image, 0), "original_image", expected,
                                 "shape " + fn.Text(image), &batch));
  TF_RETURN_IF_ERROR(fn.MergeDim(c->Dim(grads, 3), c->Dim(image, 3), "original_image", expected,
                                 "shape " + fn.Text(image), &channels));
  c->set_output(0, c->MakeShape({batch, c->Dim(image, 1), c->Dim(image, 2), channels}));
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(ResizeBilinearOp)
    .SetShapeFn(ResizeShape)
    .Doc(
        "Bilinear resize of NHWC images to size = [new_height, new_width], float32 output, "
        "bit-identical to tf.raw_ops.ResizeBilinear in its three coordinate conventions.");

OPFORGE_REGISTER_OP(ResizeBilinearGradOp)
    .SetShapeFn(ResizeGradShape)
    .Doc(
        "Gradient of Opforge>ResizeBilinear with respect to the images, bit-identical to "
        "tf.raw_ops.ResizeBilinearGrad, parallel and deterministic.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(ResizeBilinearOp::kSignature.name).HostMemory("size"),
                         ResizeBilinearOp, OPFORGE_RESIZE_IMAGE_TYPES,
                         OPFORGE_RESIZE_IMAGE_GPU_TYPES)
OPFORGE_REGISTER_KERNELS(Name(ResizeBilinearGradOp::kSignature.name), ResizeBilinearGradOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge
