// libFuzzer harness of the LeakyRelu core, as leaky_relu_tf.cc calls it (see fuzz/fuzz_util.h).
// Bytes: mode (0 LeakyRelu, 1 LeakyReluWithMask, 2 LeakyReluGrad), dtype (half, bfloat16,
// float, double), flags; alpha: Float; features: AnyShape; gradients (grad): ShapeOr(features);
// then the values.
#include "fuzz/fuzz_util.h"
#include "ops/leaky_relu/leaky_relu.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  LeakyReluParams attrs;
  attrs.alpha = in.FloatOr({0.2f, 0.1f, 0.0f, 1.0f, -0.5f, 3.0f});
  Note("alpha", attrs.alpha);
  // The kernel's constructor.
  if (!Passed(ValidateLeakyRelu(attrs), {"LeakyRelu"})) return;
  std::vector<int64_t> x_shape = in.AnyShape();
  Input::Fix(&x_shape);
  Note("features", x_shape);
  LeakyReluParams p = attrs;
  if (mode < 2) {
    if (!InputsPossible({&x_shape})) return;  // no validate sees the shape: TfKernel reads it
    p.size = NumElements(x_shape);
    if (!Passed(ValidateLeakyRelu(p), {"LeakyRelu"})) return;
    Outputs outs;
    outs.Add<T>("activations", x_shape);
    if (mode == 1) outs.Add<T>("mask", x_shape);
    if (!outs.Small() || !outs.AnyNonEmpty()) return;
    Tensor<T> x(x_shape);
    x.Fill(in);
    outs.Run(flags, [&](const Parallel& parallel) {
      LeakyReluForward<T>(p, x.data(), outs.Get<T>(0), mode == 1 ? outs.Get<T>(1) : nullptr,
                          parallel);
    });
    if (flags.in_place) {  // activations forwarded from features
      const auto want = outs.Snapshot();
      Tensor<T> y(x_shape);
      std::copy(x.data(), x.data() + x.size(), y.data());
      LeakyReluForward<T>(p, y.data(), y.data(), mode == 1 ? outs.Get<T>(1) : nullptr,
                          SerialParallel());
      for (int64_t i = 0; i < y.size(); ++i) {
        if (!SameOrBothNan(y[i], outs.Get<T>(0)[i]))
          Fail("in place: element %lld differs", (long long)i);
      }
      outs.Compare(want, "in-place run (mask)");
    }
    return;
  }
  std::vector<int64_t> g_shape = in.ShapeOr(x_shape);
  Input::Fix(&g_shape);
  Note("gradients", g_shape);
  const Status s = ValidateLeakyReluGrad(p, g_shape, x_shape);
  if (!Passed(s, {"LeakyReluGrad", "LeakyRelu"})) return;
  if (!InputsPossible({&g_shape, &x_shape})) return;
  p.size = NumElements(g_shape);
  RunElementwiseGrad<T>(in, flags, g_shape,
                        [&](const T* g, const T* x, T* dx, const Parallel& parallel) {
                          LeakyReluBackward<T>(p, g, x, dx, parallel);
                        });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(3, WithFloatType)
