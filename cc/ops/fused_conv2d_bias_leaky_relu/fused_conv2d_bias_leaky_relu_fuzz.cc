// libFuzzer harness of the FusedConv2DBiasLeakyRelu core, as fused_conv2d_bias_leaky_relu_tf.cc
// calls it (see fuzz/fuzz_util.h). The op has no gradient entry point of its own in the core (its
// gradient is Conv2DTranspose's, fuzzed there). Bytes: mode (unused), dtype (half, bfloat16,
// float, double), flags (extra bit 0: a conv::FilterCache kept across calls, as the kernel keeps
// one, checked against runs without it; bit 1: then change one filter element and check again);
// attrs: padding Enum, strides List(4), dilations List(4), explicit_paddings List(8 or 0), alpha
// Float; input Shape(4) [N, H, W, CI]; filter ShapeOr([FH, FW, CI, CO]); bias ShapeOr([CO]);
// then the values.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/fused_conv2d_bias_leaky_relu/fused_conv2d_bias_leaky_relu.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "FusedConv2DBiasLeakyRelu";
constexpr double kMaxWork = 5e6;  // multiply-adds

template <typename T>
conv::FilterCache& Cache() {
  static conv::FilterCache cache;  // one kernel object, called with one shape after another
  return cache;
}

template <typename T>
void Fuzz(Input& in, int /*mode: one entry point*/, const FuzzFlags& flags) {
  FusedConv2DParams p;
  p.padding = in.Enum({"SAME", "VALID", "EXPLICIT"});
  auto spatial_list = [&](size_t i) -> int64_t {
    if (i != 1 && i != 2) return in.IntOr(1);
    const int64_t small = 1 + in.Byte() % 3;
    return in.IntOr(small);
  };
  p.strides = in.List(4, spatial_list);
  p.dilations = in.List(4, spatial_list);
  p.explicit_paddings = in.List(p.padding == "EXPLICIT" ? 8 : 0, [&](size_t i) -> int64_t {
    return i >= 2 && i < 6 ? in.Int() % 4 : in.IntOr(0);
  });
  p.alpha = in.FloatOr({0.1f, 0.2f, 0.0f, 1.0f});
  Note("padding", p.padding);
  Note("strides", p.strides);
  Note("dilations", p.dilations);
  Note("explicit_paddings", p.explicit_paddings);
  Note("alpha", p.alpha);
  // The kernel's constructor.
  if (!Passed(ValidateFusedConv2DAttrs(p), {kOp})) return;
  std::vector<int64_t> input = in.Shape(4);
  const int64_t co = in.Dim();
  std::vector<int64_t> filter =
      in.ShapeOr({in.Dim(), in.Dim(), input.size() == 4 ? input[3] : in.Dim(), co});
  std::vector<int64_t> bias = in.ShapeOr({co});
  Input::Fix({&input, &filter, &bias});
  Note("input", input);
  Note("filter", filter);
  Note("bias", bias);
  if (!Passed(ValidateFusedConv2D(input, filter, bias, &p), {kOp})) return;
  if (!InputsPossible({&input, &filter, &bias})) return;
  const conv::Conv2DGeometry& g = p.g;
  Note("out", p.OutputShape());
  if (g.pad_top < 0 || g.pad_left < 0) Fail("negative pads");
  if (std::vector<int64_t>{g.batch, g.in_h, g.in_w, g.in_c} != input ||
      std::vector<int64_t>{g.filter_h, g.filter_w, g.in_c, g.out_c} != filter) {
    Fail("the geometry does not match the tensors");
  }
  Outputs outs;
  outs.Add<T>("output", p.OutputShape());
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({input, filter, bias})) return;
  const double work = static_cast<double>(NumElements(p.OutputShape())) *
                      static_cast<double>(g.filter_h) * static_cast<double>(g.filter_w) *
                      static_cast<double>(g.in_c);
  if (work > kMaxWork) return;
  Tensor<T> x(input), f(filter), b(bias);
  x.Fill(in);
  f.Fill(in);
  b.Fill(in);
  const bool cached = (flags.extra & 1) != 0;
  int runs = 0;
  auto run = [&](const Parallel& parallel) {
    // With the cache, every other run goes without it: the same bits either way.
    conv::FilterCache* cache = cached && runs++ % 2 == 0 ? &Cache<T>() : nullptr;
    FusedConv2DBiasLeakyRelu<T>(p, x.data(), f.data(), b.data(), outs.Get<T>(0), parallel, cache);
  };
  outs.Run(flags, run);
  if (cached) {
    FuzzFlags again = flags;
    again.chunks = 1;  // a second run, without the cache, compared with the first
    runs = 1;
    outs.Run(again, run);
    if ((flags.extra & 2) != 0 && f.size() > 0) {
      // A new filter of the same shape (training): the cache must notice, wherever the change.
      const int64_t at = (static_cast<int64_t>(in.Byte()) * 7919) % f.size();
      f[at] = f[at] == T(1) ? T(-2) : T(1);
      runs = 0;
      outs.Run(again, run);
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(1, WithFloatType)
