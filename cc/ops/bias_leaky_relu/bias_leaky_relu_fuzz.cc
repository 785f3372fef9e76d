// libFuzzer harness of the BiasLeakyRelu core, as bias_leaky_relu_tf.cc calls it (see
// fuzz/fuzz_util.h). Bytes: mode (unused), dtype (half, bfloat16, float, double), flags; alpha:
// Float; features: Shape(4); bias: ShapeOr([last dim of features]); then the values.
#include "fuzz/fuzz_util.h"
#include "ops/bias_leaky_relu/bias_leaky_relu.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int /*mode: one entry point*/, const FuzzFlags& flags) {
  BiasLeakyReluParams p;
  p.alpha = in.FloatOr({0.2f, 0.1f, 0.0f, 1.0f, 2.5f});
  Note("alpha", p.alpha);
  std::vector<int64_t> features = in.Shape(4);
  std::vector<int64_t> bias = in.ShapeOr({features.empty() ? in.Dim() : features.back()});
  Input::Fix({&features, &bias});
  Note("features", features);
  Note("bias", bias);
  if (!Passed(ValidateBiasLeakyRelu(features, bias, &p), {"BiasLeakyRelu"})) return;
  if (!InputsPossible({&features, &bias})) return;
  Outputs outs;
  outs.Add<T>("output", features);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({features, bias})) return;
  if (NumElements(features) != MulOrMinus1(p.rows, p.channels)) {
    Fail("rows %lld x channels %lld is not the element count of features", (long long)p.rows,
         (long long)p.channels);
  }
  Tensor<T> x(features), b(bias);
  x.Fill(in);
  b.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    BiasLeakyRelu<T>(p, x.data(), b.data(), outs.Get<T>(0), parallel);
  });
  if (flags.in_place) {  // output forwarded from features
    Tensor<T> y(features);
    std::copy(x.data(), x.data() + x.size(), y.data());
    BiasLeakyRelu<T>(p, y.data(), b.data(), y.data(), SerialParallel());
    for (int64_t i = 0; i < y.size(); ++i) {
      if (!SameOrBothNan(y[i], outs.Get<T>(0)[i]))
        Fail("in place: element %lld differs", (long long)i);
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(1, WithFloatType)
