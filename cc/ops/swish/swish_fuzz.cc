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
    RunElementwise<T>(
        in, flags, "activations", x_shape,
        [&](const T* x, T* y, const Parallel& parallel) { SwishForward<T>(p, x, y, parallel); });
    return;
  }
  std::vector<int64_t> g_shape = in.ShapeOr(x_shape);
  Input::Fix(&g_shape);
  Note("gradients", g_shape);
  if (!Passed(ValidateSwishGrad(p, g_shape, x_shape), {"SwishGrad"})) return;
  if (!InputsPossible({&g_shape, &x_shape})) return;
  p.size = NumElements(g_shape);
  RunElementwiseGrad<T>(in, flags, g_shape,
                        [&](const T* g, const T* x, T* dx, const Parallel& parallel) {
                          SwishBackward<T>(p, g, x, dx, parallel);
                        });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(2, WithFloatType)
