// libFuzzer harness of the ClippedIdentity core, as clipped_identity_tf.cc calls it (see
// fuzz/fuzz_util.h). Bytes: mode (0 ClippedIdentity, 1 ClippedIdentityGrad), dtype (half,
// bfloat16, float, double), flags; clip_min, clip_max, leak: Float each; x: AnyShape;
// gradients (grad): ShapeOr(x); then the values.
#include "fuzz/fuzz_util.h"
#include "ops/clipped_identity/clipped_identity.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  ClippedIdentityParams attrs;
  attrs.clip_min = in.FloatOr({-1.0f, 0.0f, -6.0f, 0.5f, -0.0f, 2.0f});
  attrs.clip_max = in.FloatOr({1.0f, 6.0f, 0.0f, 0.5f, -2.0f, 1e30f});
  attrs.leak = in.FloatOr({0.01f, 0.0f, 1.0f, -0.5f, 3.0f});
  Note("clip_min", attrs.clip_min);
  Note("clip_max", attrs.clip_max);
  Note("leak", attrs.leak);
  // The kernel's constructor.
  if (!Passed(ValidateClippedIdentity(attrs), {"ClippedIdentity"})) return;
  std::vector<int64_t> x_shape = in.AnyShape();
  Input::Fix(&x_shape);
  Note("x", x_shape);
  ClippedIdentityParams p = attrs;
  if (mode == 0) {
    if (!InputsPossible({&x_shape})) return;
    p.size = NumElements(x_shape);
    if (!Passed(ValidateClippedIdentity(p), {"ClippedIdentity"})) return;
    Outputs outs;
    outs.Add<T>("y", x_shape);
    if (!outs.Small() || !outs.AnyNonEmpty()) return;
    Tensor<T> x(x_shape);
    x.Fill(in);
    outs.Run(flags, [&](const Parallel& parallel) {
      ClippedIdentityForward<T>(p, x.data(), outs.Get<T>(0), parallel);
    });
    if (flags.in_place) {
      Tensor<T> y(x_shape);
      std::copy(x.data(), x.data() + x.size(), y.data());
      ClippedIdentityForward<T>(p, y.data(), y.data(), SerialParallel());
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
  if (!Passed(ValidateClippedIdentityGrad(p, g_shape, x_shape),
              {"ClippedIdentityGrad", "ClippedIdentity"}))
    return;
  if (!InputsPossible({&g_shape, &x_shape})) return;
  p.size = NumElements(g_shape);
  Outputs outs;
  outs.Add<T>("backprops", g_shape);
  if (!outs.Small() || !outs.AnyNonEmpty()) return;
  Tensor<T> g(g_shape), x(x_shape);
  g.Fill(in);
  x.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    ClippedIdentityBackward<T>(p, g.data(), x.data(), outs.Get<T>(0), parallel);
  });
  if (flags.in_place) {
    Tensor<T> dx(g_shape);
    std::copy(g.data(), g.data() + g.size(), dx.data());
    ClippedIdentityBackward<T>(p, dx.data(), x.data(), dx.data(), SerialParallel());
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
