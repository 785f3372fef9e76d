// XLA lowering of ResizeBilinear and its gradient (tf.function(jit_compile=True)).
//
// The size input must be a compile-time constant (XLA shapes are static); it is declared so, and
// a size only known at run time fails with a message that says so. The taps (source rows and
// columns, lerps) are computed here at compile time with the CPU kernel's own arithmetic
// (resize_taps.h), and the values with the CPU kernel's formulas in its order:
//   forward:  h = l + (r - l) * x_lerp per input row (gathered columns), then
//             out = top + (bottom - top) * y_lerp (gathered rows of h);
//   gradient: each incoming gradient value adds (g * y_weight) * x_weight to its four source
//             pixels, top-left, top-right, bottom-left, bottom-right, gradient pixels in row-major
//             order (one scatter-add whose updates come in exactly that order).
// XLA's CPU backend contracts a * b + c into one fused multiply-add where the CPU has FMA, so
// the forward differs from the CPU kernel in the last bits there (see the README's XLA section).
#include <vector>

#include "common/tf_xla.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace {

constexpr const char* kOp = "ResizeBilinear";
constexpr const char* kGradOp = "ResizeBilinearGrad";

struct AxisTaps {
  std::vector<int32_t> lower, upper;
  std::vector<float> lerp;
};

AxisTaps Taps(int64_t out_size, int64_t in_size, bool align_corners, bool half_pixel_centers) {
  const float scale = ResizeScale(in_size, out_size, align_corners);
  AxisTaps taps;
  for (int64_t i = 0; i < out_size; ++i) {
    const ResizeTap t = ComputeResizeTap(i, scale, in_size, half_pixel_centers);
    taps.lower.push_back(static_cast<int32_t>(t.lower));
    taps.upper.push_back(static_cast<int32_t>(t.upper));
    taps.lerp.push_back(t.lerp);
  }
  return taps;
}

// x[..., indices[k], ...] along `axis` of a 4-D x: the same shape with indices.size() there.
xla::XlaOp Take(xla::XlaBuilder* b, xla::XlaOp x, const std::vector<int64_t>& dims, int axis,
                const std::vector<int32_t>& indices) {
  xla::GatherDimensionNumbers numbers;
  std::vector<int64_t> slice = dims;
  slice[axis] = 1;
  for (int d = 0; d < 4; ++d) {
    if (d != axis) numbers.add_offset_dims(d);
  }
  numbers.add_collapsed_slice_dims(axis);
  numbers.add_start_index_map(axis);
  numbers.set_index_vector_dim(1);
  return xla::Gather(x, xla::ConstantR1<int32_t>(b, indices), numbers, slice,
                     /*indices_are_sorted=*/true);
}

// A float vector along `axis` of a 4-D shape.
xla::XlaOp Along(xla::XlaBuilder* b, const std::vector<float>& values,
                 const std::vector<int64_t>& dims, int64_t axis) {
  return xla::BroadcastInDim(xla::ConstantR1<float>(b, values), dims, {axis});
}

class ResizeBilinearXla : public tensorflow::XlaOpKernel {
 public:
  explicit ResizeBilinearXla(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("align_corners", &align_corners_));
    OP_REQUIRES_OK(context, context->GetAttr("half_pixel_centers", &half_pixel_centers_));
    OPFORGE_OP_REQUIRES_OK(context,
                           ValidateResizeBilinearAttrs(kOp, align_corners_, half_pixel_centers_));
  }

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> size;
    const absl::Status constant = context->ConstantInputAsIntVector(1, &size);
    OP_REQUIRES(context, constant.ok(),
                absl::InvalidArgumentError(
                    "ResizeBilinear: size must be a compile-time constant under "
                    "tf.function(jit_compile=True) (XLA needs static shapes), got a value "
                    "computed at run time. Pass a Python list or a constant, or use "
                    "jit_compile=False for that function. (" +
                    std::string(constant.message()) + ")"));
    std::vector<int64_t> images_dims, size_dims;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &images_dims));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &size_dims));
    ResizeBilinearParams p;
    OPFORGE_OP_REQUIRES_OK(context,
                           ValidateResizeBilinear(images_dims, size_dims, size, align_corners_,
                                                  half_pixel_centers_, &p));
    xla::XlaBuilder* b = context->builder();
    const xla::XlaOp images = xla::ConvertElementType(context->Input(0), xla::F32);
    if (p.out_height == p.in_height && p.out_width == p.in_width) {
      // Same size: the input converted to float, whatever the attrs (as the CPU kernel).
      context->SetOutput(0, images);
      return;
    }
    const AxisTaps xs = Taps(p.out_width, p.in_width, align_corners_, half_pixel_centers_);
    const AxisTaps ys = Taps(p.out_height, p.in_height, align_corners_, half_pixel_centers_);
    const std::vector<int64_t> in = {p.batch, p.in_height, p.in_width, p.channels};
    const std::vector<int64_t> rows = {p.batch, p.in_height, p.out_width, p.channels};
    const std::vector<int64_t> out = {p.batch, p.out_height, p.out_width, p.channels};
    const xla::XlaOp left = Take(b, images, in, 2, xs.lower);
    const xla::XlaOp right = Take(b, images, in, 2, xs.upper);
    const xla::XlaOp h =
        xla::Add(left, xla::Mul(xla::Sub(right, left), Along(b, xs.lerp, rows, 2)));
    const xla::XlaOp top = Take(b, h, rows, 1, ys.lower);
    const xla::XlaOp bottom = Take(b, h, rows, 1, ys.upper);
    context->SetOutput(0,
                       xla::Add(top, xla::Mul(xla::Sub(bottom, top), Along(b, ys.lerp, out, 1))));
  }

 private:
  bool align_corners_ = false;
  bool half_pixel_centers_ = false;
};

class ResizeBilinearGradXla : public tensorflow::XlaOpKernel {
 public:
  explicit ResizeBilinearGradXla(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("align_corners", &align_corners_));
    OP_REQUIRES_OK(context, context->GetAttr("half_pixel_centers", &half_pixel_centers_));
    OPFORGE_OP_REQUIRES_OK(
        context, ValidateResizeBilinearAttrs(kGradOp, align_corners_, half_pixel_centers_));
  }

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int64_t> grads_shape, image_shape;
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 0, &grads_shape));
    OP_REQUIRES_OK(context, xla_glue::InputDims(context, 1, &image_shape));
    ResizeBilinearParams p;
    OPFORGE_OP_REQUIRES_OK(context,
                           ValidateResizeBilinearGrad(grads_shape, image_shape, align_corners_,
                                                      half_pixel_centers_, &p));
    xla::XlaBuilder* b = context->builder();
    const tensorflow::DataType dtype = input_type(1);
    // double accumulates in double, every other type in float (as the CPU kernel).
    const tensorflow::DataType acc_type =
        dtype == tensorflow::DT_DOUBLE ? tensorflow::DT_DOUBLE : tensorflow::DT_FLOAT;
    const std::vector<int64_t> grads_dims = {p.batch, p.out_height, p.out_width, p.channels};
    const xla::XlaOp zeros = xla::Broadcast(tensorflow::XlaHelpers::Zero(b, acc_type),
                                            {p.batch, p.in_height, p.in_width, p.channels});
    if (p.batch * p.out_height * p.out_width * p.channels == 0) {
      context->SetOutput(0, tensorflow::XlaHelpers::ConvertElementType(zeros, dtype));
      return;
    }
    const AxisTaps xs = Taps(p.out_width, p.in_width, align_corners_, half_pixel_centers_);
    const AxisTaps ys = Taps(p.out_height, p.in_height, align_corners_, half_pixel_centers_);
    std::vector<float> inv_x(xs.lerp.size()), inv_y(ys.lerp.size());
    for (size_t i = 0; i < xs.lerp.size(); ++i) inv_x[i] = 1.0f - xs.lerp[i];
    for (size_t i = 0; i < ys.lerp.size(); ++i) inv_y[i] = 1.0f - ys.lerp[i];
    // The four shares of each gradient value, [batch, out_height, out_width, 4, channels], in
    // float: (g * y_weight) * x_weight.
    const xla::XlaOp g = context->Input(0);
    const xla::XlaOp g_top = xla::Mul(g, Along(b, inv_y, grads_dims, 1));
    const xla::XlaOp g_bottom = xla::Mul(g, Along(b, ys.lerp, grads_dims, 1));
    const xla::XlaOp wx_left = Along(b, inv_x, grads_dims, 2);
    const xla::XlaOp wx_right = Along(b, xs.lerp, grads_dims, 2);
    std::vector<int64_t> share_dims = {p.batch, p.out_height, p.out_width, 1, p.channels};
    auto share = [&](xla::XlaOp gy, xla::XlaOp wx) {
      return xla::Reshape(xla::Mul(gy, wx), share_dims);
    };
    xla::XlaOp updates = xla::ConcatInDim(b,
                                          {share(g_top, wx_left), share(g_top, wx_right),
                                           share(g_bottom, wx_left), share(g_bottom, wx_right)},
                                          3);
    updates = tensorflow::XlaHelpers::ConvertElementType(updates, acc_type);
    // Their destinations [out_height, out_width, 4, (row, column)], in the same order.
    std::vector<int32_t> targets;
    targets.reserve(static_cast<size_t>(p.out_height * p.out_width * 8));
    for (int64_t y = 0; y < p.out_height; ++y) {
      for (int64_t x = 0; x < p.out_width; ++x) {
        for (int32_t row : {ys.lower[y], ys.upper[y]}) {
          for (int32_t column : {xs.lower[x], xs.upper[x]}) {
            targets.push_back(row);
            targets.push_back(column);
          }
        }
      }
    }
    const xla::XlaOp indices =
        xla::Reshape(xla::ConstantR1<int32_t>(b, targets), {p.out_height, p.out_width, 4, 2});
    xla::ScatterDimensionNumbers numbers;
    numbers.add_update_window_dims(0);
    numbers.add_update_window_dims(4);
    numbers.add_inserted_window_dims(1);
    numbers.add_inserted_window_dims(2);
    numbers.add_scatter_dims_to_operand_dims(1);
    numbers.add_scatter_dims_to_operand_dims(2);
    numbers.set_index_vector_dim(3);
    const xla::XlaOp sums =
        xla::Scatter(zeros, indices, updates, *context->GetOrCreateAdd(acc_type), numbers,
                     /*indices_are_sorted=*/false, /*unique_indices=*/false);
    context->SetOutput(0, tensorflow::XlaHelpers::ConvertElementType(sums, dtype));
  }

 private:
  bool align_corners_ = false;
  bool half_pixel_centers_ = false;
};

OPFORGE_REGISTER_XLA_OP("Opforge>ResizeBilinear", ResizeBilinearXla,
                        .CompileTimeConstantInput("size"))
OPFORGE_REGISTER_XLA_OP("Opforge>ResizeBilinearGrad", ResizeBilinearGradXla)

}  // namespace
}  // namespace opforge
