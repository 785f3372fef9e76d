// The op signature parser (common/op_signature.h) against real op structs' signatures and
// malformed ones: every runtime's registration reads what it gives.
#include "common/op_signature.h"

#include <gtest/gtest.h>

#include <string>

#include "ops/conv2d_transpose/conv2d_transpose_op.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu_op.h"
#include "ops/leaky_relu/leaky_relu_op.h"
#include "ops/yolo_decode/yolo_decode_op.h"
#include "ops/yolo_postprocess/yolo_postprocess_op.h"
#include "ops/yolo_targets/yolo_targets_op.h"

namespace opforge {
namespace {

using signature::Parsed;
using signature::TypeRule;

Parsed MustParse(const OpSignature& sig) {
  Parsed parsed;
  const Status s = signature::Parse(sig, &parsed);
  EXPECT_TRUE(s.ok()) << s.message();
  return parsed;
}

std::string ParseError(const OpSignature& sig) {
  Parsed parsed;
  const Status s = signature::Parse(sig, &parsed);
  EXPECT_FALSE(s.ok());
  return s.message();
}

TEST(OpSignature, NamesTypesAndAttrs) {
  const Parsed p = MustParse(YoloDecodeOp::kSignature);
  EXPECT_EQ(p.name, "Opforge>YoloDecode");
  EXPECT_EQ(p.op_type, "YoloDecode");
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_EQ(p.inputs[1].name, "anchors");
  EXPECT_EQ(p.inputs[1].rule, TypeRule::kT);
  ASSERT_EQ(p.outputs.size(), 4u);
  EXPECT_EQ(p.outputs[2].name, "class_indices");
  EXPECT_EQ(p.outputs[2].rule, TypeRule::kFixed);
  EXPECT_EQ(p.outputs[2].fixed, DType::kInt32);
  ASSERT_EQ(p.attrs.size(), 7u);
  EXPECT_EQ(p.attrs[5].name, "max_log_scale");
  EXPECT_EQ(p.attrs[5].type, "float");
  const signature::Attr* t = p.FindAttr("T");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, "type");
  EXPECT_EQ(t->allowed, (std::vector<std::string>{"half", "bfloat16", "float", "double"}));
}

TEST(OpSignature, TemplateStructsAndStringEnums) {
  EXPECT_EQ(MustParse(LeakyReluOp<false>::kSignature).outputs.size(), 1u);
  const Parsed masked = MustParse(LeakyReluOp<true>::kSignature);
  EXPECT_EQ(masked.name, "Opforge>LeakyReluWithMask");
  ASSERT_EQ(masked.outputs.size(), 2u);
  EXPECT_EQ(masked.outputs[1].name, "mask");

  const Parsed conv = MustParse(Conv2DTransposeOp::kSignature);
  EXPECT_EQ(conv.inputs[2].rule, TypeRule::kAnyInt);  // output_shape: Tshape {int32, int64}
  const signature::Attr* padding = conv.FindAttr("padding");
  ASSERT_NE(padding, nullptr);
  EXPECT_EQ(padding->type, "string");
  EXPECT_EQ(padding->allowed, (std::vector<std::string>{"SAME", "VALID", "EXPLICIT"}));
  const signature::Attr* dilations = conv.FindAttr("dilations");
  ASSERT_NE(dilations, nullptr);
  EXPECT_EQ(dilations->type, "list(int)");
}

TEST(OpSignature, ListsAndParameterTypes) {
  const Parsed post = MustParse(YoloPostprocessOp::kSignature);
  ASSERT_EQ(post.inputs.size(), 7u);
  EXPECT_EQ(post.inputs[0].number_attr, "num_scales");
  EXPECT_EQ(post.inputs[1].number_attr, "num_scales");
  EXPECT_TRUE(post.inputs[2].number_attr.empty());
  EXPECT_EQ(post.FindAttr("num_scales")->type, "int");  // "int >= 1"

  const Parsed targets = MustParse(YoloTargetsOp::kSignature);
  ASSERT_EQ(targets.outputs.size(), 1u);
  EXPECT_EQ(targets.outputs[0].number_attr, "num_scales");

  const Parsed bn = MustParse(BatchNormLeakyOp::kSignature);
  EXPECT_EQ(bn.inputs[1].rule, TypeRule::kU);
  EXPECT_TRUE(signature::Accepts(bn.inputs[1], DType::kBFloat16, DType::kFloat));
  EXPECT_TRUE(signature::Accepts(bn.inputs[1], DType::kDouble, DType::kDouble));
  EXPECT_FALSE(signature::Accepts(bn.inputs[1], DType::kDouble, DType::kFloat));
  EXPECT_TRUE(signature::Accepts(bn.inputs[0], DType::kHalf, DType::kHalf));
  EXPECT_FALSE(signature::Accepts(bn.inputs[0], DType::kHalf, DType::kFloat));
  EXPECT_EQ(signature::ExpectedName(bn.inputs[1], DType::kHalf), "float32");

  const Parsed conv = MustParse(Conv2DTransposeOp::kSignature);
  EXPECT_TRUE(signature::Accepts(conv.inputs[2], DType::kFloat, DType::kInt64));
  EXPECT_FALSE(signature::Accepts(conv.inputs[2], DType::kFloat, DType::kFloat));
  EXPECT_EQ(signature::ExpectedName(conv.inputs[2], DType::kFloat), "int32 or int64");
}

TEST(OpSignature, MalformedSignaturesSayWhat) {
  EXPECT_NE(ParseError({"X>A", "x: T", "y: T", "alpha: float"}).find("\"T\" is neither"),
            std::string::npos);
  EXPECT_NE(ParseError({"X>A", "x T", "y: float", ""}).find("\"x T\" is not \"name: type\""),
            std::string::npos);
  EXPECT_NE(ParseError({"X>A", "x: n * float", "y: float", ""}).find("is not an int attr"),
            std::string::npos);
  EXPECT_NE(ParseError({"X>A", "x: float", "y: float", "T: {float, quaternion}"})
                .find("\"quaternion\", which is not an element type"),
            std::string::npos);
  EXPECT_NE(ParseError({"X>A", "x: V", "y: float", "V: {float, double}"})
                .find("none of T, U or a type attr over int32 and int64"),
            std::string::npos);
  EXPECT_NE(ParseError({"X>A", "x: float", "", ""}).find("no outputs"), std::string::npos);
  EXPECT_NE(ParseError({"X>A", "2x: float", "y: float", ""}).find("not an identifier"),
            std::string::npos);
  EXPECT_NE(ParseError({nullptr, "", "", ""}).find("no name"), std::string::npos);
}

TEST(OpSignature, SplitKeepsBracesAndQuotesWhole) {
  const auto items =
      signature::Split(" a: {'x;y', 'z'} = 'x;y' ; b: list(int) = [1, 2]; ;c: int ", ';');
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], "a: {'x;y', 'z'} = 'x;y'");
  EXPECT_EQ(items[1], "b: list(int) = [1, 2]");
  EXPECT_EQ(items[2], "c: int");
}

}  // namespace
}  // namespace opforge
