// TensorFlow binding of FusedBatchNormLeakyRelu and its gradient: op registration with shape
// functions, and the op structs that TfKernel (common/tf_kernel.h) runs; CPU and GPU kernels.
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"

namespace opforge {

namespace {

using namespace fused_batch_norm_leaky_relu_op;  // NOLINT: the op's constants and attr reader,
                                                 // shared with its kernels

// Checks ranks and merges the channel dimension of x (input `x`) with inputs `vectors`.
absl::Status Channels(InferenceContext* c, const char* op, int x,
                      const std::vector<std::pair<int, const char*>>& vectors,
                      DimensionHandle* channels) {
  BatchNormLeakyParams p;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p));
  TF_RETURN_IF_ERROR(ToTfStatus(ValidateBatchNormLeakyAttrs(p, op)));
  const ShapeFn fn(c, op);
  ShapeHandle xs;
  TF_RETURN_IF_ERROR(fn.RankAtLeast(x, "x", 1, &xs, "at least 1-D [..., channels]"));
  *channels = c->RankKnown(xs) ? c->Dim(xs, c->Rank(xs) - 1) : c->UnknownDim();
  for (const auto& [i, name] : vectors) {
    ShapeHandle v;
    TF_RETURN_IF_ERROR(fn.Rank(i, name, 1, &v, "1-D [channels]"));
    TF_RETURN_IF_ERROR(
        fn.MergeDim(*channels, c->Dim(v, 0), name,
                    "[channels] of x, the size of its last axis (x is " + fn.Text(xs) + ")",
                    fn.Text(v), channels));
  }
  return absl::OkStatus();
}

absl::Status ForwardShape(InferenceContext* c) {
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(
      Channels(c, "FusedBatchNormLeakyRelu", 0, {{1, "scale"}, {2, "offset"}}, &channels));
  c->set_output(0, c->input(0));
  c->set_output(1, c->MakeShape({channels}));
  c->set_output(2, c->MakeShape({channels}));
  return absl::OkStatus();
}

absl::Status GradShape(InferenceContext* c) {
  DimensionHandle channels;
  TF_RETURN_IF_ERROR(
      Channels(c, "FusedBatchNormLeakyReluGrad", 1,
               {{2, "scale"}, {3, "offset"}, {4, "batch_mean"}, {5, "batch_variance"}}, &channels));
  ShapeHandle dx;
  TF_RETURN_IF_ERROR(ShapeFn(c, "FusedBatchNormLeakyReluGrad")
                         .MergeInput(0, "grad", c->input(1), "the shape of x", &dx));
  c->set_output(0, dx);
  c->set_output(1, c->MakeShape({channels}));
  c->set_output(2, c->MakeShape({channels}));
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(BatchNormLeakyOp)
    .SetShapeFn(ForwardShape)
    .Doc(
        "Keras BatchNormalization in training mode (batch statistics) then leaky_relu, in two "
        "passes over x; channels last.");

OPFORGE_REGISTER_OP(BatchNormLeakyGradOp)
    .SetShapeFn(GradShape)
    .Doc("The gradient of FusedBatchNormLeakyRelu with respect to x, scale and offset.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(BatchNormLeakyOp::kSignature.name).TypeConstraint<float>("U"),
                         BatchNormLeakyOp, OPFORGE_BN_FLOAT_U_TYPES, OPFORGE_BN_FLOAT_U_TYPES)
OPFORGE_REGISTER_KERNELS(Name(BatchNormLeakyOp::kSignature.name).TypeConstraint<double>("U"),
                         BatchNormLeakyOp, OPFORGE_BN_DOUBLE_U_TYPES, OPFORGE_BN_DOUBLE_U_TYPES)
OPFORGE_REGISTER_KERNELS(Name(BatchNormLeakyGradOp::kSignature.name).TypeConstraint<float>("U"),
                         BatchNormLeakyGradOp, OPFORGE_BN_FLOAT_U_TYPES, OPFORGE_BN_FLOAT_U_TYPES)
OPFORGE_REGISTER_KERNELS(Name(BatchNormLeakyGradOp::kSignature.name).TypeConstraint<double>("U"),
                         BatchNormLeakyGradOp, OPFORGE_BN_DOUBLE_U_TYPES, OPFORGE_BN_DOUBLE_U_TYPES)

}  // namespace
}  // namespace opforge
