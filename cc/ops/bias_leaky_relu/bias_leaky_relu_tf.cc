// TensorFlow binding of BiasLeakyRelu: op registration with its shape function, and the op
// struct that TfKernel (common/tf_kernel.h) runs, on the CPU and the GPU.
#include <cmath>
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"
#include "ops/bias_leaky_relu/bias_leaky_relu_op.h"

namespace opforge {

namespace {

constexpr char kOp[] = "BiasLeakyRelu";

absl::Status Shape(InferenceContext* c) {
  BiasLeakyReluParams p;
  TF_RETURN_IF_ERROR(c->GetAttr("alpha", &p.alpha));
  if (!std::isfinite(p.alpha) || p.alpha < 0.0f) {
    return ToTfStatus(InvalidArgument(kOp, "alpha", "finite and >= 0", p.alpha));
  }
  const ShapeFn fn(c, kOp);
  ShapeHandle features, bias;
  TF_RETURN_IF_ERROR(fn.RankAtLeast(0, "features", 1, &features, "at least 1-D [..., channels]"));
  TF_RETURN_IF_ERROR(fn.Rank(1, "bias", 1, &bias, "1-D [channels]"));
  if (c->RankKnown(features)) {
    DimensionHandle merged;
    TF_RETURN_IF_ERROR(fn.MergeDim(
        c->Dim(features, -1), c->Dim(bias, 0), "bias",
        "[channels], the last dimension of features " + fn.Text(features), fn.Text(bias), &merged));
    ShapeHandle out;
    TF_RETURN_IF_ERROR(c->ReplaceDim(features, -1, merged, &out));
    c->set_output(0, out);
  } else {
    c->set_output(0, features);
  }
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(BiasLeakyReluOp)
    .SetShapeFn(Shape)
    .Doc("leaky_relu(features + bias) over the last axis, in one pass.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(BiasLeakyReluOp::kSignature.name), BiasLeakyReluOp,
                         OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)

}  // namespace
}  // namespace opforge
