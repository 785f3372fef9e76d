// libFuzzer harness of the Conv2DTranspose core (forward, input gradient, filter gradient), as
// conv2d_transpose_tf.cc calls it (see fuzz/fuzz_util.h). Bytes: mode (0 Conv2DTranspose,
// 1 Conv2DTransposeInputGrad, 2 Conv2DTransposeFilterGrad), dtype (half, bfloat16, float,
// double), flags (extra bit 0: output_shape is int64, not int32); attrs: data_format Enum,
// padding Enum, strides List(4), dilations List(4), explicit_paddings List(8 or 0); then the
// shapes in data_format order (see each mode), sizes that fit the input mostly; then the values.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "Conv2DTranspose";
// Multiply-adds a kernel may take (a few ms under the sanitizers); more: validation only.
constexpr double kMaxWork = 5e6;

struct Layout {
  int h, w, c;
};

int64_t Clamp(__int128 v) {
  if (v > std::numeric_limits<int64_t>::max()) return std::numeric_limits<int64_t>::max();
  if (v < 0) return 0;
  return static_cast<int64_t>(v);
}

// An output size whose convolution output size is `in` (one of the fitting ones, chosen by a
// byte), or, one time in four, any Dim.
int64_t FitOut(Input& in, int64_t input, int64_t filter, int64_t dilation, int64_t stride,
               const std::string& padding, int64_t pad_total) {
  const uint8_t b = in.Byte();
  if (b >= 0xC0) return in.Dim();
  const __int128 s = stride < 1 ? 1 : stride;
  const __int128 eff = (static_cast<__int128>(filter) - 1) * (dilation < 1 ? 1 : dilation) + 1;
  const __int128 pick = b % 8 < s ? b % 8 : s - 1;
  if (padding == "SAME")
    return Clamp(input == 0 ? 0 : (static_cast<__int128>(input) - 1) * s + 1 + pick);
  const __int128 pads = padding == "EXPLICIT" ? pad_total : 0;
  return Clamp((static_cast<__int128>(input) - 1) * s + eff - pads + pick);
}

// A 4-D shape in data_format order from n, h, w, c (any rank one time in four).
std::vector<int64_t> Image(Input& in, const Layout& l, int64_t n, int64_t h, int64_t w, int64_t c) {
  const uint8_t b = in.Byte();
  if (b >= 0xC0) return in.AnyShape();
  std::vector<int64_t> s(4);
  s[0] = n;
  s[static_cast<size_t>(l.h)] = h;
  s[static_cast<size_t>(l.w)] = w;
  s[static_cast<size_t>(l.c)] = c;
  return s;
}

int64_t At(const std::vector<int64_t>& v, int i, int64_t otherwise = 1) {
  return static_cast<size_t>(i) < v.size() ? v[static_cast<size_t>(i)] : otherwise;
}

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  Conv2DTransposeAttrs a;
  a.data_format = in.Enum({"NHWC", "NCHW"});
  a.padding = in.Enum({"SAME", "VALID", "EXPLICIT"});
  const Layout l = a.data_format == "NCHW" ? Layout{2, 3, 1} : Layout{1, 2, 3};
  auto spatial_list = [&](size_t i) -> int64_t {
    const int pos = static_cast<int>(i);
    if (pos != l.h && pos != l.w) return in.IntOr(1);
    const int64_t small = 1 + in.Byte() % 3;
    return in.IntOr(small);
  };
  a.strides = in.List(4, spatial_list);
  a.dilations = in.List(4, spatial_list);
  a.explicit_paddings = in.List(a.padding == "EXPLICIT" ? 8 : 0, [&](size_t i) -> int64_t {
    const int dim = static_cast<int>(i / 2);
    return dim == l.h || dim == l.w ? in.Int() % 4 : in.IntOr(0);
  });
  Note("data_format", a.data_format);
  Note("padding", a.padding);
  Note("strides", a.strides);
  Note("dilations", a.dilations);
  Note("explicit_paddings", a.explicit_paddings);
  // The kernel's constructor.
  if (!Passed(ValidateConv2DTransposeAttrs(a), {kOp})) return;
  const int64_t sh = a.strides[static_cast<size_t>(l.h)], sw = a.strides[static_cast<size_t>(l.w)];
  const int64_t dh = a.dilations[static_cast<size_t>(l.h)];
  const int64_t dw = a.dilations[static_cast<size_t>(l.w)];
  const std::vector<int64_t>& e = a.explicit_paddings;
  const int64_t pad_h = e.empty() ? 0 : e[2 * l.h] + e[2 * l.h + 1];
  const int64_t pad_w = e.empty() ? 0 : e[2 * l.w] + e[2 * l.w + 1];

  // The op's input [N, IH, IW, CI] and filter [FH, FW, CO, CI] (mode 1: grad and filter).
  const int64_t n = in.Dim(), ih = in.Dim(), iw = in.Dim(), ci = in.Dim();
  const int64_t fh = in.Dim(), fw = in.Dim(), co = in.Dim();
  Conv2DTransposeParams p;
  Status s;
  std::vector<int64_t> input, filter, grad, values;
  if (mode == 0 || mode == 2) {
    input = Image(in, l, n, ih, iw, ci);
    filter = in.ShapeOr({fh, fw, co, in.DimOr(ci)});
    const int64_t oh = FitOut(in, At(input, l.h), fh, dh, sh, a.padding, pad_h);
    const int64_t ow = FitOut(in, At(input, l.w), fw, dw, sw, a.padding, pad_w);
    if (mode == 0) {
      // output_shape's values: 4 in data_format order, or [height, width].
      const uint8_t b = in.Byte();
      if (b < 0x80) {
        values = {in.DimOr(At(input, 0)), 0, 0, 0};
        values[static_cast<size_t>(l.h)] = oh;
        values[static_cast<size_t>(l.w)] = ow;
        values[static_cast<size_t>(l.c)] = in.DimOr(co);
      } else if (b < 0xE0) {
        values = {oh, ow};
      } else {
        values = in.List(b & 0x07, [&](size_t) { return in.Dim(); });
      }
      // The values of an int32 or int64 tensor, read as int64 (IntValues).
      if ((flags.extra & 1) == 0) {
        for (int64_t& v : values) v = static_cast<int32_t>(v);
      }
      Input::Fix({&input, &filter});
      Note("input", input);
      Note("filter", filter);
      Note("output_shape", values);
      s = ValidateConv2DTranspose(a, input, filter, values, &p);
    } else {
      const int64_t gn = in.DimOr(At(input, 0));
      const int64_t gc = in.DimOr(co);
      grad = Image(in, l, gn, oh, ow, gc);
      Input::Fix({&input, &filter, &grad});
      Note("input", input);
      Note("filter", filter);
      Note("grad", grad);
      s = ValidateConv2DTransposeFilterGrad(a, input, filter, grad, &p);
    }
  } else {
    // The input gradient: grad (the forward output's shape) and filter.
    const int64_t oh = FitOut(in, ih, fh, dh, sh, a.padding, pad_h);
    const int64_t ow = FitOut(in, iw, fw, dw, sw, a.padding, pad_w);
    grad = Image(in, l, n, oh, ow, co);
    filter = in.ShapeOr({fh, fw, in.DimOr(co), ci});
    Input::Fix({&grad, &filter});
    Note("grad", grad);
    Note("filter", filter);
    s = ValidateConv2DTransposeInputGrad(a, grad, filter, &p);
  }
  if (!Passed(s, {kOp})) return;
  if (!InputsPossible({&input, &filter, &grad})) return;
  Note("params", Str({p.batch, p.in_h, p.in_w, p.in_c, p.out_h, p.out_w, p.out_c, p.filter_h,
                      p.filter_w, p.pad_top, p.pad_bottom, p.pad_left, p.pad_right}));

  // What the kernels index by must be what the tensors hold.
  const std::vector<int64_t> p_input = p.InputShape(), p_output = p.OutputShape(),
                             p_filter = p.FilterShape();
  if (!input.empty() && input != p_input) Fail("params' input shape %s", Str(p_input).c_str());
  if (!grad.empty() && grad != p_output) Fail("params' output shape %s", Str(p_output).c_str());
  if (filter != p_filter) Fail("params' filter shape %s", Str(p_filter).c_str());
  if (p.pad_top < 0 || p.pad_bottom < 0 || p.pad_left < 0 || p.pad_right < 0) {
    Fail("negative pads");
  }

  Outputs outs;
  if (mode == 0) {
    outs.Add<T>("output", p_output);
  } else if (mode == 1) {
    outs.Add<T>("grad_input", p_input);
  } else {
    outs.Add<T>("grad_filter", filter);
  }
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({p_input, p_filter, p_output})) return;
  const double work = static_cast<double>(NumElements(p_input)) * static_cast<double>(p.filter_h) *
                      static_cast<double>(p.filter_w) * static_cast<double>(p.out_c);
  if (work > kMaxWork) return;

  Tensor<T> x(p_input), f(p_filter), g(p_output);
  // The filter gradient's filter input gives only its shape; TfKernel still passes its buffer.
  if (mode != 1) x.Fill(in);
  f.Fill(in);
  if (mode != 0) g.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    if (mode == 0) {
      Conv2DTransposeForward<T>(p, x.data(), f.data(), outs.Get<T>(0), parallel);
    } else if (mode == 1) {
      Conv2DTransposeInputGrad<T>(p, g.data(), f.data(), outs.Get<T>(0), parallel);
    } else {
      Conv2DTransposeFilterGrad<T>(p, x.data(), g.data(), outs.Get<T>(0), parallel);
    }
  });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

OPFORGE_FUZZ_ENTRY(3, WithFloatType)
