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
    RunElementwise<T>(in, flags, "y", x_shape, [&](const T* x, T* y, const Parallel& parallel) {
      ClippedIdentityForward<T>(p, x, y, parallel);
    });
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
  RunElementwiseGrad<T>(in, flags, g_shape,
                        [&](const T* g, const T* x, T* dx, const Parallel& parallel) {
                          ClippedIdentityBackward<T>(p, g, x, dx, parallel);
                        });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(2, WithFloatType)
