// libFuzzer harness of the FusedBatchNormLeakyRelu core (forward and gradient), as
// fused_batch_norm_leaky_relu_tf.cc calls it (see fuzz/fuzz_util.h). Bytes: mode
// (0 FusedBatchNormLeakyRelu, 1 FusedBatchNormLeakyReluGrad), dtype (T/U: half/float,
// bfloat16/float, float/float, double/double), flags; epsilon Float, alpha Float; x Shape(4);
// scale, offset ShapeOr([C]); grad: grad ShapeOr(x), batch_mean, batch_variance ShapeOr([C]);
// then the values.
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  using U = BnParamType<T>;
  const char* op = mode == 0 ? "FusedBatchNormLeakyRelu" : "FusedBatchNormLeakyReluGrad";
  BatchNormLeakyParams attrs;
  attrs.epsilon = in.FloatOr({1e-3f, 1e-5f, 1e-30f});
  attrs.alpha = in.FloatOr({0.1f, 0.2f, 0.0f, 1.0f, 5.0f});
  Note("epsilon", attrs.epsilon);
  Note("alpha", attrs.alpha);
  // The kernel's constructor.
  if (!Passed(ValidateBatchNormLeakyAttrs(attrs, op), {op})) return;
  std::vector<int64_t> x = in.Shape(4);
  const std::vector<int64_t> channels = {x.empty() ? in.Dim() : x.back()};
  std::vector<int64_t> gamma = in.ShapeOr(channels), beta = in.ShapeOr(channels);
  BatchNormLeakyParams p = attrs;
  if (mode == 0) {
    Input::Fix({&x, &gamma, &beta});
    Note("x", x);
    Note("scale", gamma);
    Note("offset", beta);
    if (!Passed(ValidateBatchNormLeaky(x, gamma, beta, &p), {op})) return;
    if (!InputsPossible({&x, &gamma, &beta})) return;
  } else {
    std::vector<int64_t> dy = in.ShapeOr(x), mean = in.ShapeOr(channels),
                         var = in.ShapeOr(channels);
    Input::Fix({&x, &gamma, &beta, &dy, &mean, &var});
    Note("grad", dy);
    Note("x", x);
    Note("scale", gamma);
    Note("offset", beta);
    Note("batch_mean", mean);
    Note("batch_variance", var);
    if (!Passed(ValidateBatchNormLeakyGrad(dy, x, gamma, beta, mean, var, &p), {op})) return;
    if (!InputsPossible({&dy, &x, &gamma, &beta, &mean, &var})) return;
  }
  if (NumElements(x) != MulOrMinus1(p.rows, p.channels)) {
    Fail("rows %lld x channels %lld is not the element count of x", (long long)p.rows,
         (long long)p.channels);
  }
  const std::vector<int64_t> c = {p.channels};
  Outputs outs;
  outs.Add<T>(mode == 0 ? "y" : "dx", x);
  outs.Add<U>(mode == 0 ? "batch_mean" : "dscale", c);
  outs.Add<U>(mode == 0 ? "batch_variance" : "doffset", c);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({x, c, c, x, c, c})) return;
  Tensor<T> tx(x), tdy(x);
  Tensor<U> tg(c), tb(c), tm(c), tv(c);
  tx.Fill(in);
  tg.Fill(in);
  tb.Fill(in);
  if (mode == 1) {
    tdy.Fill(in);
    tm.Fill(in);
    tv.Fill(in);
  }
  outs.Run(flags, [&](const Parallel& parallel) {
    if (mode == 0) {
      BatchNormLeakyForward<T>(p, tx.data(), tg.data(), tb.data(), outs.Get<T>(0), outs.Get<U>(1),
                               outs.Get<U>(2), parallel);
    } else {
      BatchNormLeakyBackward<T>(p, tdy.data(), tx.data(), tg.data(), tb.data(), tm.data(),
                                tv.data(), outs.Get<T>(0), outs.Get<U>(1), outs.Get<U>(2),
                                parallel);
    }
  });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(2, WithFloatType)
