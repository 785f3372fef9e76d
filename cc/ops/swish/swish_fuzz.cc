// libFuzzer harness of the Swish core, as swish_tf.cc calls it (see fuzz/fuzz_util.h).
// Bytes: mode (0 Swish, 1 SwishGrad), dtype (half, bfloat16, float, double), flags; features:
// AnyShape; gradients (grad): ShapeOr(features); then the values.
#include "fuzz/fuzz_util.h"
#include "ops/swish/swish.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  std::vector<int64_t> x_shape = in.AnyShape();
  Input::Fix(&x_shape);
  Note("features", x_shape);
  SwishParams p;
  if (mode == 0) {
    if (!InputsPossible({&x_shape})) return;
    p.size = NumElements(x_shape);
    if (!Passed(ValidateSwish(p), {"Swish"})) return;
    Outputs outs;
    outs.Add<T>("activations", x_shape);
    if (!outs.Small() || !outs.AnyNonEmpty()) return;
    Tensor<T> x(x_shape);
    x.Fill(in);
    outs.Run(flags, [&](const Parallel& parallel) {
      SwishForward<T>(p, x.data(), outs.Get<T>(0), parallel);
    });
    if (flags.in_place) {  // activations forwarded from features
      Tensor<T> y(x_shape);
      std::copy(x.data(), x.data() + x.size(), y.data());
      SwishForward<T>(p, y.data(), y.data(), SerialParallel());
      for (int64_t i = 0; i < y.size(); ++i) {
        if (!SameOrBothNan(y[i], outs.Get<T>(0)[i]))
          Fail("in place: element %lld differs", (long long)i);
      }
    }
    return;
  }
  std::vector<int64_t> g_shape = in.ShapeOr(x_shape);
  Input::Fix(&g_shape);
  Note("gradients", g_shape);
  if (!Passed(ValidateSwishGrad(p, g_shape, x_shape), {"SwishGrad"})) return;
  if (!InputsPossible({&g_shape, &x_shape})) return;
  p.size = NumElements(g_shape);
  Outputs outs;
  outs.Add<T>("backprops", g_shape);
  if (!outs.Small() || !outs.AnyNonEmpty()) return;
  Tensor<T> g(g_shape), x(x_shape);
  g.Fill(in);
  x.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    SwishBackward<T>(p, g.data(), x.data(), outs.Get<T>(0), parallel);
  });
  if (flags.in_place) {  // backprops forwarded from gradients
    Tensor<T> dx(g_shape);
    std::copy(g.data(), g.data() + g.size(), dx.data());
    SwishBackward<T>(p, dx.data(), x.data(), dx.data(), SerialParallel());
    for (int64_t i = 0; i < dx.size(); ++i) {
      if (!SameOrBothNan(dx[i], outs.Get<T>(0)[i]))
        Fail("in place: element %lld differs", (long long)i);
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(2, WithFloatType)
