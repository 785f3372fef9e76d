#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/conv2d_core.h"
#include "common/cpu_features.h"
#include "common/gemm.h"
#include "common/onednn.h"
#include "common/scratch.h"
#include "ops/conv2d_transpose/conv2d_transpose.h"

namespace opforge {

// --- shapes and validation --------------------------------------------------------------------

std::vector<int64_t> Conv2DTransposeParams::InputShape() const {
  return nchw ? std::vector<int64_t>{batch, in_c, in_h, in_w}
              : std::vector<int64_t>{batch, in_h, in_w, in_c};
}
std::vector<int64_t> Conv2DTransposeParams::OutputShape() const {
  return nchw ? std::vector<int64_t>{batch, out_c, out_h, out_w}
              : std::vector<int64_t>{batch, out_h, out_w, out_c};
}
std::vector<int64_t> Conv2DTransposeParams::FilterShape() const {
  return {filter_h, filter_w, out_c, in_c};
}

namespace {

constexpr const char* kOp = "Conv2DTranspose";
// Sizes beyond this are refused before any arithmetic on them can overflow: with strides,
// dilations and pads below 2^30, every size formula stays below 2^62.
constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxElements = int64_t{1} << 60;

std::string ListString(const std::vector<int64_t>& v) { return ShapeString(v); }

// Checks a 4-D shape's dims (non-negative, element count representable).
Status CheckShape(const char* name, const std::vector<int64_t>& shape) {
  if (shape.size() != 4) {
    return InvalidArgument(kOp, name, "a 4-D tensor", "shape " + ShapeString(shape));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(kOp, name, "sizes between 0 and 2^31", ShapeString(shape));
    }
    if (d != 0 && n > kMaxElements / d) {
      return InvalidArgument(kOp, name, "at most 2^60 elements", ShapeString(shape));
    }
    n *= d;
  }
  return Status::Ok();
}

// The indices of H, W and C in a 4-D shape of the data format.
struct Layout {
  int h, w, c;
};
Layout LayoutOf(const std::string& data_format) {
  return data_format == "NCHW" ? Layout{2, 3, 1} : Layout{1, 2, 3};
}

// The range of output sizes whose convolution output size is `in`, clipped at 0; lo > hi when
// none is (only possible with explicit padding larger than what any output could use).
void FittingRange(int64_t in, int64_t eff, int64_t stride, const std::string& padding,
                  int64_t pad_total, int64_t* lo, int64_t* hi) {
  if (padding == "SAME") {
    *lo = in == 0 ? 0 : (in - 1) * stride + 1;
    *hi = in * stride;
  } else {
    // out = trunc((H + pads - eff + s) / s): x = H + pads - eff; x >= 0 gives x / s + 1, and
    // -2s < x < 0 gives 0 (C++ division truncates towards zero, as TensorFlow's does).
    if (in == 0) {
      *lo = eff - pad_total - 2 * stride + 1;
      *hi = eff - pad_total - 1;
    } else {
      *lo = (in - 1) * stride + eff - pad_total;
      *hi = in * stride - 1 + eff - pad_total;
    }
  }
  *lo = std::max<int64_t>(*lo, 0);
}

}  // namespace

int64_t Conv2DTransposeInputSize(int64_t out, int64_t filter, int64_t dilation, int64_t stride,
                                 const std::string& padding, int64_t pad_before,
                                 int64_t pad_after) {
  const int64_t eff = (filter - 1) * dilation + 1;
  int64_t in;
  if (padding == "SAME") {
    in = (out + stride - 1) / stride;
  } else if (padding == "VALID") {
    in = (out - eff + stride) / stride;
  } else {
    in = (out + pad_before + pad_after - eff + stride) / stride;
  }
  return in < 0 ? -1 : in;
}

Status ValidateConv2DTransposeAttrs(const Conv2DTransposeAttrs& a) {
  if (a.data_format != "NHWC" && a.data_format != "NCHW") {
    return InvalidArgument(kOp, "data_format", "\"NHWC\" or \"NCHW\"", "\"" + a.data_format + "\"");
  }
  const Layout l = LayoutOf(a.data_format);
  const int n = 0;
  for (const auto& [name, v, min] :
       {std::tuple<const char*, const std::vector<int64_t>&, int64_t>{"strides", a.strides, 1},
        {"dilations", a.dilations, 1}}) {
    if (v.size() != 4) {
      return InvalidArgument(kOp, name, "a list of 4 values in data_format order",
                             ListString(v) + " (" + std::to_string(v.size()) + " values)");
    }
    if (v[n] != 1 || v[l.c] != 1) {
      return InvalidArgument(kOp, name, "1 in the batch and channel dimensions", ListString(v));
    }
    if (v[l.h] < min || v[l.w] < min || v[l.h] > (int64_t{1} << 30) ||
        v[l.w] > (int64_t{1} << 30)) {
      return InvalidArgument(kOp, name, "between 1 and 2^30 in height and width", ListString(v));
    }
  }
  if (a.padding != "SAME" && a.padding != "VALID" && a.padding != "EXPLICIT") {
    return InvalidArgument(kOp, "padding", "\"SAME\", \"VALID\" or \"EXPLICIT\"",
                           "\"" + a.padding + "\"");
  }
  if (a.padding == "EXPLICIT") {
    const auto& e = a.explicit_paddings;
    if (e.size() != 8) {
      return InvalidArgument(kOp, "explicit_paddings", "8 values when padding is EXPLICIT",
                             ListString(e) + " (" + std::to_string(e.size()) + " values)");
    }
    for (int64_t v : e) {
      if (v < 0 || v > (int64_t{1} << 30)) {
        return InvalidArgument(kOp, "explicit_paddings", "between 0 and 2^30", ListString(e));
      }
    }
    if (e[2 * n] != 0 || e[2 * n + 1] != 0 || e[2 * l.c] != 0 || e[2 * l.c + 1] != 0) {
      return InvalidArgument(kOp, "explicit_paddings", "0 in the batch and channel dimensions",
                             ListString(e));
    }
  } else if (!a.explicit_paddings.empty()) {
    return InvalidArgument(kOp, "explicit_paddings", "empty unless padding is EXPLICIT",
                           ListString(a.explicit_paddings));
  }
  return Status::Ok();
}

namespace {

// Fills the attribute part of params (strides, dilations, explicit pads, layout).
void FillAttrs(const Conv2DTransposeAttrs& a, Conv2DTransposeParams* p) {
  const Layout l = LayoutOf(a.data_format);
  p->nchw = a.data_format == "NCHW";
  p->stride_h = a.strides[l.h];
  p->stride_w = a.strides[l.w];
  p->dilation_h = a.dilations[l.h];
  p->dilation_w = a.dilations[l.w];
  if (a.padding == "EXPLICIT") {
    p->pad_top = a.explicit_paddings[2 * l.h];
    p->pad_bottom = a.explicit_paddings[2 * l.h + 1];
    p->pad_left = a.explicit_paddings[2 * l.w];
    p->pad_right = a.explicit_paddings[2 * l.w + 1];
  }
}

// SAME and VALID pads for one spatial dimension (EXPLICIT pads are attributes).
void ComputePads(const std::string& padding, int64_t in, int64_t out, int64_t eff, int64_t stride,
                 int64_t* before, int64_t* after) {
  if (padding == "EXPLICIT") return;
  if (padding == "VALID") {
    *before = *after = 0;
    return;
  }
  // SAME: the odd extra pad goes at the bottom/right, as in TensorFlow.
  const int64_t need = std::max<int64_t>(0, (in - 1) * stride + eff - out);
  *before = need / 2;
  *after = need - *before;
}

// Checks that output size `out` of spatial dimension `dim` ("height"/"width") fits input size
// `in`, naming the range of output sizes that would.
Status CheckFits(const char* output_name, const char* dim, const std::string& padding, int64_t in,
                 int64_t out, int64_t filter, int64_t dilation, int64_t stride, int64_t pad_before,
                 int64_t pad_after) {
  const int64_t computed =
      Conv2DTransposeInputSize(out, filter, dilation, stride, padding, pad_before, pad_after);
  if (computed == in) return Status::Ok();
  const int64_t eff = (filter - 1) * dilation + 1;
  int64_t lo, hi;
  FittingRange(in, eff, stride, padding, pad_before + pad_after, &lo, &hi);
  std::ostringstream s;
  s << kOp << ": " << output_name << " " << dim << " " << out << " does not fit the input " << dim
    << " " << in << " (filter " << dim << " " << filter << ", stride " << stride << ", dilation "
    << dilation << ", padding " << padding;
  if (padding == "EXPLICIT") s << " " << pad_before << "+" << pad_after;
  s << "): ";
  if (lo <= hi) {
    s << "output " << dim << "s from " << lo << " to " << hi << " fit";
  } else {
    s << "no output " << dim << " fits";
  }
  return Status::Invalid(s.str());
}

}  // namespace

Status ValidateConv2DTranspose(const Conv2DTransposeAttrs& attrs,
                               const std::vector<int64_t>& input_shape,
                               const std::vector<int64_t>& filter_shape,
                               const std::vector<int64_t>& output_shape,
                               Conv2DTransposeParams* params, const char* output_name) {
  OPFORGE_RETURN_IF_ERROR(ValidateConv2DTransposeAttrs(attrs));
  OPFORGE_RETURN_IF_ERROR(CheckShape("input", input_shape));
  OPFORGE_RETURN_IF_ERROR(CheckShape("filter", filter_shape));
  const Layout l = LayoutOf(attrs.data_format);
  Conv2DTransposeParams p;
  FillAttrs(attrs, &p);
  p.batch = input_shape[0];
  p.in_h = input_shape[l.h];
  p.in_w = input_shape[l.w];
  p.in_c = input_shape[l.c];
  p.filter_h = filter_shape[0];
  p.filter_w = filter_shape[1];
  p.out_c = filter_shape[2];
  if (filter_shape[3] != p.in_c) {
    std::ostringstream s;
    s << "the input's channels (" << p.in_c << ", dimension " << l.c << " of input "
      << ShapeString(input_shape) << ")";
    return InvalidArgument(
        kOp, "filter's last dimension (in_channels)", s.str(),
        std::to_string(filter_shape[3]) + " in filter " + ShapeString(filter_shape));
  }
  if (p.filter_h == 0 || p.filter_w == 0) {
    return InvalidArgument(kOp, "filter", "a non-empty window (height and width > 0)",
                           ShapeString(filter_shape));
  }
  // output_shape: 4 values in data_format order, or [height, width].
  const auto& o = output_shape;
  if (o.size() != 4 && o.size() != 2) {
    return InvalidArgument(kOp, output_name, "4 values (in data_format order) or 2 values",
                           ShapeString(o) + " (" + std::to_string(o.size()) + " values)");
  }
  for (int64_t d : o) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(kOp, output_name, "sizes between 0 and 2^31", ShapeString(o));
    }
  }
  if (o.size() == 4) {
    if (o[0] != p.batch) {
      return InvalidArgument(kOp, output_name,
                             "the input's batch size " + std::to_string(p.batch) + " first",
                             ShapeString(o));
    }
    if (o[l.c] != p.out_c) {
      return InvalidArgument(kOp, output_name,
                             "the filter's out_channels (dimension 2 of filter " +
                                 ShapeString(filter_shape) + ") as its channel size",
                             ShapeString(o));
    }
    p.out_h = o[l.h];
    p.out_w = o[l.w];
  } else {
    p.out_h = o[0];
    p.out_w = o[1];
  }
  OPFORGE_RETURN_IF_ERROR(CheckShape(output_name, p.OutputShape()));
  OPFORGE_RETURN_IF_ERROR(CheckFits(output_name, "height", attrs.padding, p.in_h, p.out_h,
                                    p.filter_h, p.dilation_h, p.stride_h, p.pad_top, p.pad_bottom));
  OPFORGE_RETURN_IF_ERROR(CheckFits(output_name, "width", attrs.padding, p.in_w, p.out_w,
                                    p.filter_w, p.dilation_w, p.stride_w, p.pad_left, p.pad_right));
  ComputePads(attrs.padding, p.in_h, p.out_h, (p.filter_h - 1) * p.dilation_h + 1, p.stride_h,
              &p.pad_top, &p.pad_bottom);
  ComputePads(attrs.padding, p.in_w, p.out_w, (p.filter_w - 1) * p.dilation_w + 1, p.stride_w,
              &p.pad_left, &p.pad_right);
  *params = p;
  return Status::Ok();
}

Status ValidateConv2DTransposeFilterGrad(const Conv2DTransposeAttrs& attrs,
                                         const std::vector<int64_t>& input_shape,
                                         const std::vector<int64_t>& filter_shape,
                                         const std::vector<int64_t>& grad_shape,
                                         Conv2DTransposeParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateConv2DTransposeAttrs(attrs));
  // Without this, a [OH, OW] grad would pass as a 2-value output_shape and the kernel would read
  // it as [N, OH, OW, C] (found by conv2d_transpose_fuzz).
  OPFORGE_RETURN_IF_ERROR(CheckShape("grad", grad_shape));
  return ValidateConv2DTranspose(attrs, input_shape, filter_shape, grad_shape, params, "grad");
}

Status ValidateConv2DTransposeInputGrad(const Conv2DTransposeAttrs& attrs,
                                        const std::vector<int64_t>& grad_shape,
                                        const std::vector<int64_t>& filter_shape,
                                        Conv2DTransposeParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateConv2DTransposeAttrs(attrs));
  OPFORGE_RETURN_IF_ERROR(CheckShape("grad", grad_shape));
  OPFORGE_RETURN_IF_ERROR(CheckShape("filter", filter_shape));
  const Layout l = LayoutOf(attrs.data_format);
  Conv2DTransposeParams p;
  FillAttrs(attrs, &p);
  if (filter_shape[0] == 0 || filter_shape[1] == 0) {
    return InvalidArgument(kOp, "filter", "a non-empty window (height and width > 0)",
                           ShapeString(filter_shape));
  }
  if (grad_shape[l.c] != filter_shape[2]) {
    return InvalidArgument(
        kOp, "grad",
        "the filter's out_channels " + std::to_string(filter_shape[2]) + " as its channel size",
        ShapeString(grad_shape));
  }
  std::vector<int64_t> input_shape(4);
  input_shape[0] = grad_shape[0];
  input_shape[l.c] = filter_shape[3];
  const std::pair<int, int64_t> dims[2] = {{l.h, 0}, {l.w, 1}};
  for (const auto& [index, f] : dims) {
    const int64_t before = f == 0 ? p.pad_top : p.pad_left;
    const int64_t after = f == 0 ? p.pad_bottom : p.pad_right;
    const int64_t in = Conv2DTransposeInputSize(
        grad_shape[index], filter_shape[f], f == 0 ? p.dilation_h : p.dilation_w,
        f == 0 ? p.stride_h : p.stride_w, attrs.padding, before, after);
    if (in < 0) {
      return InvalidArgument(kOp, "grad",
                             std::string("a ") + (f == 0 ? "height" : "width") +
                                 " that gives a non-negative input size",
                             ShapeString(grad_shape));
    }
    input_shape[index] = in;
  }
  return ValidateConv2DTranspose(attrs, input_shape, filter_shape, grad_shape, params, "grad");
}

// --- kernels ----------------------------------------------------------------------------------

namespace {

template <typename T>
using Compute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rows of a GEMM's left operand per work unit: big enough that Eigen's packing of the filter is
// a small fraction of the product (1/kTileRows), small enough to give every thread work.
constexpr int64_t kTileRows = 256;
// Upper bound of the col buffer of the forward pass (elements): bands of input rows beyond it
// are processed one after the other.
constexpr int64_t kColBudget = int64_t{2} << 20;
// Columns of the forward col matrix per work unit.
constexpr int64_t kColBlock = 1024;
// Rows of the input gradient's reduction per step, and out_channels per filter-gradient unit.
constexpr int64_t kFilterGradChunk = 2048;
constexpr int64_t kFilterGradCoBlock = 64;

// A read-only NHWC view of an operand in the compute type: the operand itself when it already
// is one, otherwise a converted (and, for NCHW, transposed) copy.
template <typename C>
struct View {
  Scratch<C> storage;
  const C* data = nullptr;
};

template <typename T, typename C>
View<C> AsNhwc(const T* src, bool nchw, int64_t n, int64_t h, int64_t w, int64_t c,
               const Parallel& parallel) {
  View<C> v;
  if constexpr (std::is_same_v<T, C>) {
    if (!nchw) {
      v.data = src;
      return v;
    }
  }
  // An empty operand has nothing to convert: no walk over its n * h rows of nothing (up to 2^62
  // for [2^31, 2^31, 0, c]).
  if (n == 0 || h == 0 || w == 0 || c == 0) return v;
  v.storage.resize(static_cast<size_t>(n * h * w * c));
  C* dst = v.storage.data();
  parallel.For(n * h, static_cast<double>(w * c) * 2, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / h, y = r % h;
      C* d = dst + r * w * c;
      if (!nchw) {
        const T* s = src + r * w * c;
        for (int64_t i = 0; i < w * c; ++i) d[i] = static_cast<C>(s[i]);
      } else {
        for (int64_t x = 0; x < w; ++x) {
          for (int64_t k = 0; k < c; ++k) {
            d[x * c + k] = static_cast<C>(src[((b * c + k) * h + y) * w + x]);
          }
        }
      }
    }
  });
  v.data = v.storage.data();
  return v;
}

// Writes an NHWC result in the compute type to `dst` (converted, transposed for NCHW).
template <typename C, typename T>
void StoreNhwc(const C* src, bool nchw, int64_t n, int64_t h, int64_t w, int64_t c, T* dst,
               const Parallel& parallel) {
  if (n == 0 || h == 0 || w == 0 || c == 0) return;  // as AsNhwc
  parallel.For(n * h, static_cast<double>(w * c) * 2, [=](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / h, y = r % h;
      const C* s = src + r * w * c;
      if (!nchw) {
        T* d = dst + r * w * c;
        for (int64_t i = 0; i < w * c; ++i) d[i] = static_cast<T>(s[i]);
      } else {
        for (int64_t x = 0; x < w; ++x) {
          for (int64_t k = 0; k < c; ++k) {
            dst[((b * c + k) * h + y) * w + x] = static_cast<T>(s[x * c + k]);
          }
        }
      }
    }
  });
}

// out[i] += in[i]: the col2im inner loop (a function of its own, so that the compiler sees no
// aliasing through captured state and vectorises it).
template <typename C>
void AddTo(C* __restrict out, const C* __restrict in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

// The input position that output position `o` receives from filter tap `f` along one
// dimension, or -1: o = i * stride - pad + f * dilation.
inline int64_t SourceIndex(int64_t o, int64_t f, int64_t stride, int64_t pad, int64_t dilation,
                           int64_t size) {
  const int64_t t = o + pad - f * dilation;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < size ? i : -1;
}

// Winograd F(2x2, 2x2)'s input transform of one 3x3 block (pointers to its rows of n values):
// V[xi] = (B^T d B)[xi], B^T = [1 -1 0; 0 1 0; 0 -1 1], written to base + xi * stride.
template <typename C>
void F22InputTransform(const C* const (&src)[3][3], int64_t n, C* base, int64_t stride) {
  using Row = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
  using OutRow = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
  auto d = [&](int i, int j) { return Row(src[i][j], n); };
  for (int i = 0; i < 3; ++i) {
    // Row i of B^T d: d0 - d1, d1, d2 - d1; then the same over the columns.
    auto e = [&](int j) {
      return i == 0   ? (d(0, j) - d(1, j)).eval()
             : i == 1 ? (d(1, j) * C(1)).eval()
                      : (d(2, j) - d(1, j)).eval();
    };
    const auto e0 = e(0), e1 = e(1), e2 = e(2);
    OutRow(base + (i * 3 + 0) * stride, n) = e0 - e1;
    OutRow(base + (i * 3 + 1) * stride, n) = e1;
    OutRow(base + (i * 3 + 2) * stride, n) = e2 - e1;
  }
}

template <typename C>
bool AllFiniteValues(const C* data, int64_t n) {
  return Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>(data, n).allFinite();
}

// --- 4x4 stride-2 filters: four phases, each a 2x2 convolution by Winograd F(2x2, 2x2) --------
//
// Output row o receives input row i through tap f = o + pad_top - 2i: the rows of one parity
// of o + pad_top (a phase r) receive taps r and r + 2 only, from two consecutive input rows.
// So each of the four (row, column) phases of the output is a stride-1 2x2 correlation of the
// input with a 2x2 sub-filter, and a 2x2 correlation computes two outputs from three inputs with
// three products instead of four (B^T = [1 -1 0; 0 1 0; 0 -1 1], G = [1 0; 1 1; 0 1],
// A^T = [1 1 0; 0 1 1]; all coefficients +-1, no rounding of their own). In 2-D: nine products
// [tiles, in_c] x [in_c, out_c] per 2x2 block of a phase instead of sixteen, with no col buffer
// and no col2im: 1.78x fewer multiplications than the product-and-scatter path.
constexpr int64_t kPhaseBandTiles = 256;

struct Phase1D {
  int64_t first = 0;  // the first output index of the phase
  int64_t count = 0;  // its outputs (every second index from `first`)
  int64_t offset =
      0;  // phase output t reads input t + offset - 1 (tap r + 2) and t + offset (tap r)
};

Phase1D PhaseOf(int64_t r, int64_t pad, int64_t out) {
  Phase1D ph;
  ph.first = (((r - pad) % 2) + 2) % 2;
  ph.count = ph.first < out ? (out - ph.first + 1) / 2 : 0;
  ph.offset = (ph.first + pad - r) / 2;
  return ph;
}

bool UsePhaseWinograd(const Conv2DTransposeParams& p) {
  return p.stride_h == 2 && p.stride_w == 2 && p.filter_h == 4 && p.filter_w == 4 &&
         p.dilation_h == 1 && p.dilation_w == 1 && p.in_c >= 16 && p.out_c >= 16 &&
         p.batch * p.out_h * p.out_w >= 4 * 64;
}

// False (the output unspecified) where the filter or the input holds inf or NaN, which the
// transforms would mix into NaN where the direct sum is finite: the caller runs the direct path.
template <typename C>
bool ForwardPhaseWinograd(const Conv2DTransposeParams& p, const C* in, const C* filter, C* out,
                          const Parallel& parallel) {
  using Row = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
  using OutRow = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
  const int64_t ci_n = p.in_c, co_n = p.out_c, plane = ci_n * co_n;
  Phase1D ph_h[2], ph_w[2];
  for (int r = 0; r < 2; ++r) {
    ph_h[r] = PhaseOf(r, p.pad_top, p.out_h);
    ph_w[r] = PhaseOf(r, p.pad_left, p.out_w);
  }
  // Work units: runs of up to kPhaseBandTiles consecutive tiles of one phase, numbered across
  // the whole batch (a small image's tiles join the next image's, so that the products stay
  // wide).
  struct Unit {
    int64_t phase, t0, nt;
  };
  std::vector<Unit> units;
  for (int64_t phase = 0; phase < 4; ++phase) {
    const int64_t tiles =
        p.batch * ((ph_h[phase / 2].count + 1) / 2) * ((ph_w[phase % 2].count + 1) / 2);
    const int64_t runs = (tiles + kPhaseBandTiles - 1) / kPhaseBandTiles;
    for (int64_t r = 0; r < runs; ++r) {
      // Runs of equal size (within one tile).
      const int64_t t0 = r * tiles / runs, t1 = (r + 1) * tiles / runs;
      units.push_back({phase, t0, t1 - t0});
    }
  }
  const int64_t band_tiles_max = kPhaseBandTiles;
  // U[phase][xi] = (G g G^T)[xi] of the phase's sub-filter g[jh][jw] = filter[rh + 2 - 2jh,
  // rw + 2 - 2jw]: with G's 0/1 coefficients, the sum of the taps jh in S(a), jw in S(b) for
  // xi = (a, b), S(0) = {0}, S(1) = {0, 1}, S(2) = {1}. Each is built [out_c, in_c] (rows over
  // in_c, as the filter) in a per-thread buffer and packed at once as the products' right
  // operand [in_c, out_c] given transposed (no full-size intermediate).
  const auto& gemm = gemm::BestGemm<C>();
  std::vector<std::unique_ptr<gemm::PackedB<C>>> packed(36);
  std::atomic<bool> non_finite{false};
  parallel.For(36, 4.0 * static_cast<double>(plane), [&](int64_t begin, int64_t end) {
    const SerialParallel serial;
    Scratch<C> u(static_cast<size_t>(plane));
    for (int64_t i = begin; i < end; ++i) {
      const int64_t phase = i / 9, a = (i % 9) / 3, bb = i % 3;
      const int64_t rh = phase / 2, rw = phase % 2;
      const int jh0 = a == 2 ? 1 : 0, jh1 = a == 0 ? 0 : 1;
      const int jw0 = bb == 2 ? 1 : 0, jw1 = bb == 0 ? 0 : 1;
      for (int64_t co = 0; co < co_n; ++co) {
        OutRow dst(u.data() + co * ci_n, ci_n);
        dst.setZero();
        for (int jh = jh0; jh <= jh1; ++jh) {
          for (int jw = jw0; jw <= jw1; ++jw) {
            dst += Row(filter + (((rh + 2 - 2 * jh) * 4 + (rw + 2 - 2 * jw)) * co_n + co) * ci_n,
                       ci_n);
          }
        }
      }
      if (!AllFiniteValues(u.data(), plane)) non_finite.store(true, std::memory_order_relaxed);
      packed[i] = std::make_unique<gemm::PackedB<C>>(gemm, u.data(), ci_n, /*transposed=*/true,
                                                     ci_n, co_n, band_tiles_max, serial);
    }
  });
  parallel.For(static_cast<int64_t>(units.size()),
               9.0 * static_cast<double>(band_tiles_max * plane), [&](int64_t begin, int64_t end) {
                 Scratch<C> v(static_cast<size_t>(9 * band_tiles_max * ci_n));
                 Scratch<C> m(static_cast<size_t>(9 * band_tiles_max * co_n));
                 const std::vector<C> zeros(static_cast<size_t>(ci_n), C(0));
                 for (int64_t k = begin; k < end; ++k) {
                   const Unit& un = units[static_cast<size_t>(k)];
                   const Phase1D &h = ph_h[un.phase / 2], &w = ph_w[un.phase % 2];
                   const int64_t tiles_w = (w.count + 1) / 2;
                   const int64_t tiles_image = ((h.count + 1) / 2) * tiles_w;
                   const int64_t nt = un.nt;
                   if (non_finite.load(std::memory_order_relaxed)) break;
                   // Input transform: V[xi][t][:] = (B^T d B)[xi] of the 3x3 input block of each
                   // tile.
                   const int64_t vstride = nt * ci_n;
                   for (int64_t t = 0; t < nt; ++t) {
                     const int64_t tile = un.t0 + t, b = tile / tiles_image;
                     const int64_t ty = (tile % tiles_image) / tiles_w, tx = tile % tiles_w;
                     const int64_t h0 = 2 * ty + h.offset - 1, w0 = 2 * tx + w.offset - 1;
                     const C* src[3][3];
                     for (int i = 0; i < 3; ++i)
                       for (int j = 0; j < 3; ++j) {
                         const int64_t hh = h0 + i, ww = w0 + j;
                         src[i][j] = (hh < 0 || hh >= p.in_h || ww < 0 || ww >= p.in_w)
                                         ? zeros.data()
                                         : in + ((b * p.in_h + hh) * p.in_w + ww) * ci_n;
                       }
                     F22InputTransform<C>(src, ci_n, v.data() + t * ci_n, vstride);
                   }
                   if (!AllFiniteValues(v.data(), 9 * nt * ci_n)) {
                     non_finite.store(true, std::memory_order_relaxed);
                     break;
                   }
                   for (int xi = 0; xi < 9; ++xi) {
                     packed[un.phase * 9 + xi]->Multiply(v.data() + xi * nt * ci_n, ci_n,
                                                         m.data() + xi * nt * co_n, nt, co_n);
                   }
                   // Output transform: A^T M A (y0 = m0 + m1, y1 = m1 + m2 on rows, then columns),
                   // written to the phase's output pixels.
                   const int64_t mstride = nt * co_n;
                   for (int64_t t = 0; t < nt; ++t) {
                     const int64_t tile = un.t0 + t, b = tile / tiles_image;
                     const int64_t ty = (tile % tiles_image) / tiles_w, tx = tile % tiles_w;
                     const C* mt = m.data() + t * co_n;
                     auto x = [&](int i, int j) { return Row(mt + (i * 3 + j) * mstride, co_n); };
                     for (int a = 0; a < 2; ++a) {
                       const int64_t th = 2 * ty + a;
                       if (th >= h.count) break;
                       const int64_t oh = h.first + 2 * th;
                       auto r = [&](int j) {
                         return a == 0 ? (x(0, j) + x(1, j)).eval() : (x(1, j) + x(2, j)).eval();
                       };
                       const auto r0 = r(0), r1 = r(1), r2 = r(2);
                       for (int bb = 0; bb < 2; ++bb) {
                         const int64_t tw = 2 * tx + bb;
                         if (tw >= w.count) break;
                         const int64_t ow = w.first + 2 * tw;
                         C* o = out + ((b * p.out_h + oh) * p.out_w + ow) * co_n;
                         if (bb == 0) {
                           OutRow(o, co_n) = r0 + r1;
                         } else {
                           OutRow(o, co_n) = r1 + r2;
                         }
                       }
                     }
                   }
                 }
               });
  return !non_finite.load();
}

// The input gradient of a 4x4 stride-2 filter the same way. grad_in[i] sums grad[2i - pad + f]
// times tap f; with f = r + 2j, that is a 2-tap correlation of the output gradient's phase r
// (every second row from r - pad) with taps r and r + 2, summed over the two phases (four in 2-D).
// Winograd F(2x2, 2x2) on each phase gives nine products per 2x2 block of grad_in, and the
// four phases stack along the products' depth: [tiles, 4 out_c] x [4 out_c, in_c], 1.78x fewer
// multiplications than the direct sum. False (grad_in unspecified) where the filter or the
// gradient holds inf or NaN: the caller runs the direct path.
template <typename C>
bool InputGradPhaseWinograd(const Conv2DTransposeParams& p, const C* grad, const C* filter,
                            C* grad_in, const Parallel& parallel) {
  using Row = Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>>;
  using OutRow = Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>>;
  const int64_t ci_n = p.in_c, co_n = p.out_c, depth = 4 * co_n;
  // U[xi] = [4 out_c, in_c]: rows phase * out_c + co hold (G g G^T)[xi] of the phase's taps
  // g[jh][jw] = filter[rh + 2jh, rw + 2jw, co, :], the sum of the taps jh in S(a), jw in S(b)
  // (S(0) = {0}, S(1) = {0, 1}, S(2) = {1}).
  const auto& gemm = gemm::BestGemm<C>();
  std::vector<std::unique_ptr<gemm::PackedB<C>>> packed(9);
  std::atomic<bool> non_finite{false};
  parallel.For(9, 8.0 * static_cast<double>(depth * ci_n), [&](int64_t begin, int64_t end) {
    const SerialParallel serial;
    Scratch<C> u(static_cast<size_t>(depth * ci_n));
    for (int64_t xi = begin; xi < end; ++xi) {
      const int64_t a = xi / 3, bb = xi % 3;
      const int jh0 = a == 2 ? 1 : 0, jh1 = a == 0 ? 0 : 1;
      const int jw0 = bb == 2 ? 1 : 0, jw1 = bb == 0 ? 0 : 1;
      for (int64_t phase = 0; phase < 4; ++phase) {
        const int64_t rh = phase / 2, rw = phase % 2;
        for (int64_t co = 0; co < co_n; ++co) {
          OutRow dst(u.data() + (phase * co_n + co) * ci_n, ci_n);
          dst.setZero();
          for (int jh = jh0; jh <= jh1; ++jh) {
            for (int jw = jw0; jw <= jw1; ++jw) {
              dst += Row(filter + (((rh + 2 * jh) * 4 + (rw + 2 * jw)) * co_n + co) * ci_n, ci_n);
            }
          }
        }
      }
      if (!AllFiniteValues(u.data(), depth * ci_n))
        non_finite.store(true, std::memory_order_relaxed);
      packed[static_cast<size_t>(xi)] = std::make_unique<gemm::PackedB<C>>(
          gemm, u.data(), ci_n, /*transposed=*/false, depth, ci_n, kPhaseBandTiles, serial);
    }
  });
  if (non_finite.load()) return false;
  const int64_t tiles_h = (p.in_h + 1) / 2, tiles_w = (p.in_w + 1) / 2;
  const int64_t tiles_image = tiles_h * tiles_w, tiles = p.batch * tiles_image;
  const int64_t runs = (tiles + kPhaseBandTiles - 1) / kPhaseBandTiles;
  parallel.For(runs, 9.0 * static_cast<double>(kPhaseBandTiles * depth * ci_n),
               [&](int64_t begin, int64_t end) {
                 Scratch<C> v(static_cast<size_t>(9 * kPhaseBandTiles * depth));
                 Scratch<C> m(static_cast<size_t>(9 * kPhaseBandTiles * ci_n));
                 const std::vector<C> zeros(static_cast<size_t>(co_n), C(0));
                 for (int64_t run = begin; run < end; ++run) {
                   if (non_finite.load(std::memory_order_relaxed)) break;
                   const int64_t t0 = run * tiles / runs, nt = (run + 1) * tiles / runs - t0;
                   // V[xi][t][phase * out_c + :] = (B^T d B)[xi] of the phase's 3x3 block.
                   const int64_t vstride = nt * depth;
                   for (int64_t t = 0; t < nt; ++t) {
                     const int64_t tile = t0 + t, b = tile / tiles_image;
                     const int64_t ty = (tile % tiles_image) / tiles_w, tx = tile % tiles_w;
                     for (int64_t phase = 0; phase < 4; ++phase) {
                       const int64_t rh = phase / 2, rw = phase % 2;
                       const C* src[3][3];
                       for (int i = 0; i < 3; ++i)
                         for (int j = 0; j < 3; ++j) {
                           const int64_t h = 2 * (2 * ty + i) + rh - p.pad_top;
                           const int64_t w = 2 * (2 * tx + j) + rw - p.pad_left;
                           src[i][j] = (h < 0 || h >= p.out_h || w < 0 || w >= p.out_w)
                                           ? zeros.data()
                                           : grad + ((b * p.out_h + h) * p.out_w + w) * co_n;
                         }
                       F22InputTransform<C>(src, co_n, v.data() + t * depth + phase * co_n,
                                            vstride);
                     }
                   }
                   if (!AllFiniteValues(v.data(), 9 * nt * depth)) {
                     non_finite.store(true, std::memory_order_relaxed);
                     break;
                   }
                   for (int xi = 0; xi < 9; ++xi) {
                     packed[static_cast<size_t>(xi)]->Multiply(v.data() + xi * nt * depth, depth,
                                                               m.data() + xi * nt * ci_n, nt, ci_n);
                   }
                   // grad_in's 2x2 block: A^T M A.
                   const int64_t mstride = nt * ci_n;
                   for (int64_t t = 0; t < nt; ++t) {
                     const int64_t tile = t0 + t, b = tile / tiles_image;
                     const int64_t ty = (tile % tiles_image) / tiles_w, tx = tile % tiles_w;
                     const C* mt = m.data() + t * ci_n;
                     auto x = [&](int i, int j) { return Row(mt + (i * 3 + j) * mstride, ci_n); };
                     for (int a = 0; a < 2; ++a) {
                       const int64_t ih = 2 * ty + a;
                       if (ih >= p.in_h) break;
                       auto r = [&](int j) {
                         return a == 0 ? (x(0, j) + x(1, j)).eval() : (x(1, j) + x(2, j)).eval();
                       };
                       const auto r0 = r(0), r1 = r(1), r2 = r(2);
                       C* o = grad_in + ((b * p.in_h + ih) * p.in_w + 2 * tx) * ci_n;
                       OutRow(o, ci_n) = r0 + r1;
                       if (2 * tx + 1 < p.in_w) OutRow(o + ci_n, ci_n) = r1 + r2;
                     }
                   }
                 }
               });
  return !non_finite.load();
}

template <typename C>
void ForwardNhwc(const Conv2DTransposeParams& p, const C* in, const C* filter, C* out,
                 const Parallel& parallel) {
  const int64_t out_row = p.out_w * p.out_c;
  const int64_t out_image = p.out_h * out_row;
  const int64_t k = p.filter_h * p.filter_w * p.out_c;
  const int64_t ci = p.in_c;
  if (p.OutputSize() == 0) return;
  if (p.InputSize() == 0 || k == 0) {
    parallel.For(p.batch * p.out_h, static_cast<double>(out_row), [=](int64_t begin, int64_t end) {
      std::fill(out + begin * out_row, out + end * out_row, C(0));
    });
    return;
  }
  if (UsePhaseWinograd(p) && ForwardPhaseWinograd(p, in, filter, out, parallel)) return;
  // Bands of input rows: whole images (several per step) when they fit the col budget.
  const int64_t row_cols = p.in_w * k;
  const int64_t band_rows = std::clamp<int64_t>(kColBudget / row_cols, 1, p.in_h);
  const int64_t images_per_step =
      band_rows == p.in_h ? std::clamp<int64_t>(kColBudget / (p.in_h * row_cols), 1, p.batch) : 1;
  Scratch<C> col(static_cast<size_t>(images_per_step * band_rows * row_cols));
  // The filter as the right operand [ci, k] (it is stored as its transpose [k, ci]), packed
  // once for every tile's product, in blocks of at most kColBlock columns: a unit of work is a
  // tile and a block of columns, so that a small image still gives every thread work.
  const gemm::PackedB<C> packed(gemm::BestGemm<C>(), filter, ci, /*transposed=*/true, ci, k,
                                kTileRows, parallel, kColBlock);
  const int64_t n_block = packed.layout().n_block;
  const int64_t blocks_per_unit = std::max<int64_t>(1, kColBlock / n_block);
  const int64_t col_blocks = (packed.layout().n_blocks + blocks_per_unit - 1) / blocks_per_unit;

  for (int64_t b0 = 0; b0 < p.batch; b0 += images_per_step) {
    const int64_t nb = std::min(images_per_step, p.batch - b0);
    int64_t initialized_end = 0;  // output rows [0, initialized_end) hold sums already
    for (int64_t r0 = 0; r0 < p.in_h; r0 += band_rows) {
      const int64_t nr = std::min(band_rows, p.in_h - r0);
      const int64_t pixels = nr * p.in_w;  // col rows per image
      const int64_t tiles = (pixels + kTileRows - 1) / kTileRows;
      C* colp = col.data();
      // 1. col[pixel, (fh, fw, co)] = input[pixel, :] . filter[(fh, fw, co), :], in tiles of
      // rows and blocks of columns (a fixed partition: the same products for any thread count).
      parallel.For(
          nb * tiles * col_blocks,
          static_cast<double>(std::min(pixels, kTileRows) * ci * std::min(k, kColBlock)),
          [=, &packed](int64_t begin, int64_t end) {
            for (int64_t u = begin; u < end; ++u) {
              const int64_t nb0 = (u % col_blocks) * blocks_per_unit;
              const int64_t nb1 = std::min(nb0 + blocks_per_unit, packed.layout().n_blocks);
              const int64_t t = u / col_blocks;
              const int64_t b = t / tiles, t0 = (t % tiles) * kTileRows;
              const int64_t rows = std::min(kTileRows, pixels - t0);
              const C* a = in + (((b0 + b) * p.in_h + r0) * p.in_w + t0) * ci;
              packed.MultiplyBlocks(a, ci, colp + (b * pixels + t0) * k, rows, k, nb0, nb1);
            }
          });
      // 2. col2im as a gather: each output row sums what this band sends it. For one output
      // pixel, fh descending means input row ascending (and fw descending, input column
      // ascending), so the additions follow TensorFlow's scatter order: input position
      // row-major, then fh, then fw; bands arrive in ascending input rows too. A row is zeroed
      // just before its first contributions (while it is in cache); rows that no band reaches
      // are zeroed too.
      const int64_t last_band = r0 + nr >= p.in_h;
      const int64_t h_begin = std::clamp<int64_t>(r0 * p.stride_h - p.pad_top, 0, p.out_h);
      int64_t h_end = std::clamp<int64_t>(
          (r0 + nr - 1) * p.stride_h - p.pad_top + (p.filter_h - 1) * p.dilation_h + 1, h_begin,
          p.out_h);
      if (last_band) h_end = p.out_h;
      const int64_t z = initialized_end;
      const int64_t first = std::min(z, h_begin);
      const int64_t nh = h_end - first;
      if (nh > 0) {
        parallel.For(nb * nh, static_cast<double>(out_row * p.filter_h),
                     [=](int64_t begin, int64_t end) {
                       for (int64_t u = begin; u < end; ++u) {
                         const int64_t b = u / nh, h = first + u % nh;
                         C* orow = out + (b0 + b) * out_image + h * out_row;
                         if (h >= z) std::fill(orow, orow + out_row, C(0));
                         for (int64_t fh = p.filter_h - 1; fh >= 0; --fh) {
                           const int64_t ih =
                               SourceIndex(h, fh, p.stride_h, p.pad_top, p.dilation_h, p.in_h);
                           if (ih < r0 || ih >= r0 + nr) continue;
                           const C* crow = colp + (b * pixels + (ih - r0) * p.in_w) * k;
                           for (int64_t w = 0; w < p.out_w; ++w) {
                             for (int64_t fw = p.filter_w - 1; fw >= 0; --fw) {
                               const int64_t iw =
                                   SourceIndex(w, fw, p.stride_w, p.pad_left, p.dilation_w, p.in_w);
                               if (iw < 0) continue;
                               AddTo(orow + w * p.out_c,
                                     crow + iw * k + (fh * p.filter_w + fw) * p.out_c, p.out_c);
                             }
                           }
                         }
                       }
                     });
      }
      initialized_end = std::max(initialized_end, h_end);
    }
  }
}

// The convolution this op transposes: from [B, out_h, out_w, out_c] (this op's output) to
// [B, in_h, in_w, in_c] (its input) with filter [fh, fw, out_c, in_c].
conv::Conv2DGeometry AsConvGeometry(const Conv2DTransposeParams& p) {
  conv::Conv2DGeometry g;
  g.batch = p.batch;
  g.in_h = p.out_h;
  g.in_w = p.out_w;
  g.in_c = p.out_c;
  g.out_h = p.in_h;
  g.out_w = p.in_w;
  g.out_c = p.in_c;
  g.filter_h = p.filter_h;
  g.filter_w = p.filter_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.dilation_h = p.dilation_h;
  g.dilation_w = p.dilation_w;
  g.pad_top = p.pad_top;
  g.pad_left = p.pad_left;
  return g;
}

// The input gradient is that convolution of the output gradient (the convolution core,
// common/conv2d_core.h).
template <typename C>
void InputGradNhwc(const Conv2DTransposeParams& p, const C* grad, const C* filter, C* grad_in,
                   const Parallel& parallel) {
  if (p.InputSize() == 0) return;
  if (p.OutputSize() > 0 && UsePhaseWinograd(p) &&
      InputGradPhaseWinograd(p, grad, filter, grad_in, parallel)) {
    return;
  }
  conv::Conv2DForward<C>(AsConvGeometry(p), grad, filter, grad_in, nullptr, parallel);
}

template <typename C>
void FilterGradNhwc(const Conv2DTransposeParams& p, const C* in, const C* grad, C* grad_filter,
                    const Parallel& parallel) {
  const int64_t ci = p.in_c;
  const int64_t total_pixels = p.batch * p.in_h * p.in_w;
  const int64_t pixels = p.in_h * p.in_w;
  if (p.FilterSize() > 0 && total_pixels > 0 && p.OutputSize() > 0) {
    // A 3x3 stride-1 filter: the filter gradient of the convolution from the output (this op's
    // output gradient) to the input, by Winograd where the core takes it.
    if (conv::Conv2DFilterGradWinograd<C>(AsConvGeometry(p), grad, in, grad_filter, parallel)) {
      return;
    }
  }
  std::fill(grad_filter, grad_filter + p.FilterSize(), C(0));
  if (p.FilterSize() == 0 || total_pixels == 0 || p.OutputSize() == 0) return;
  const int64_t co_blocks = (p.out_c + kFilterGradCoBlock - 1) / kFilterGradCoBlock;
  const int64_t units = p.filter_h * p.filter_w * co_blocks;
  const auto& gemm = gemm::BestGemm<C>();
  // The rows of a tap that fall outside the output gradient (padding) are zeros in the product
  // below. With a finite input that adds exact zeros; an input holding inf or NaN would meet them
  // as 0 x inf = NaN, so then only the rows that exist are gathered (input rows too) and
  // multiplied: padding contributes nothing.
  const bool in_finite = AllFiniteValues(in, total_pixels * ci);
  // One unit per (tap, block of out_channels): grad_filter[fh, fw, block, :] =
  // shifted(grad)[all input pixels, block]^T . input, reduced over the pixels in fixed chunks
  // (the same chunks whatever the thread count, so the same sums).
  parallel.For(
      units, static_cast<double>(total_pixels * ci * std::min(p.out_c, kFilterGradCoBlock)),
      [=, &p, &gemm](int64_t begin, int64_t end) {
        const int64_t chunk_rows = std::min(total_pixels, kFilterGradChunk);
        Scratch<C> g(static_cast<size_t>(chunk_rows * kFilterGradCoBlock));
        Scratch<C> a(in_finite ? 0 : static_cast<size_t>(chunk_rows * ci));
        for (int64_t u = begin; u < end; ++u) {
          const int64_t tap = u / co_blocks, cb = (u % co_blocks) * kFilterGradCoBlock;
          const int64_t fh = tap / p.filter_w, fw = tap % p.filter_w;
          const int64_t nc = std::min(kFilterGradCoBlock, p.out_c - cb);
          C* dst = grad_filter + (tap * p.out_c + cb) * ci;
          for (int64_t r0 = 0; r0 < total_pixels; r0 += chunk_rows) {
            const int64_t rows = std::min(chunk_rows, total_pixels - r0);
            int64_t n = 0;  // rows written to g (and, gathering, to a)
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t q = r0 + r;
              const int64_t b = q / pixels, ih = (q % pixels) / p.in_w, iw = q % p.in_w;
              const int64_t h = ih * p.stride_h - p.pad_top + fh * p.dilation_h;
              const int64_t w = iw * p.stride_w - p.pad_left + fw * p.dilation_w;
              const bool outside = h < 0 || h >= p.out_h || w < 0 || w >= p.out_w;
              if (outside && !in_finite) continue;
              C* d = g.data() + n * nc;
              if (outside) {
                std::fill(d, d + nc, C(0));
              } else {
                std::memcpy(d, grad + ((b * p.out_h + h) * p.out_w + w) * p.out_c + cb,
                            sizeof(C) * static_cast<size_t>(nc));
              }
              if (!in_finite) {
                std::memcpy(a.data() + n * ci, in + q * ci, sizeof(C) * static_cast<size_t>(ci));
              }
              ++n;
            }
            if (n > 0) {
              gemm.at_b_add(g.data(), in_finite ? in + r0 * ci : a.data(), dst, nc, n, ci);
            }
          }
        }
      });
}

enum class Pass { kForward, kInputGrad, kFilterGrad };

template <typename T>
constexpr onednn::DType OnednnType() {
  return std::is_same_v<T, Eigen::bfloat16> ? onednn::DType::kBFloat16 : onednn::DType::kFloat32;
}

// Which passes run on oneDNN (common/onednn.h) rather than on opforge's own kernels, each choice
// the faster of the two against TensorFlow's Conv2DBackpropInput / Conv2DBackpropFilter at the
// YOLO and DCGAN shapes of `opforge bench conv2d_transpose` (--dtype bfloat16 for bfloat16;
// OPFORGE_MAX_ISA=avx2 for an AVX2 CPU):
//  - bfloat16: all (oneDNN multiplies bfloat16 at the CPU's bfloat16 rate, several times the
//    float32 rate with AMX; opforge's products run at the float32 rate);
//  - float32: all but the 3x3 stride-1 filters with 16+ channels on each side, where opforge's
//    Winograd needs fewer multiplications than any direct kernel; at the other shapes oneDNN's
//    kernels beat opforge's im2col, phase-Winograd and filter-gradient kernels.
// Elsewhere, and where oneDNN is not available or refuses a geometry, opforge's own kernels.
// Without AVX-512 (an AVX2 CPU, or OPFORGE_MAX_ISA=avx2), the 4x4 stride-2 forward and input
// gradient keep opforge's phases and Winograd F(2x2, 2x2): there oneDNN's AVX2 kernels are slower
// than TensorFlow's and the phases faster.
template <typename T>
bool UseOnednn(const Conv2DTransposeParams& p, Pass pass) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    return true;
  } else if constexpr (std::is_same_v<T, float>) {
    if (pass != Pass::kFilterGrad && UsePhaseWinograd(p) && !CpuHasAvx512()) return false;
    return !(p.filter_h == 3 && p.filter_w == 3 && p.stride_h == 1 && p.stride_w == 1 &&
             p.dilation_h == 1 && p.dilation_w == 1 && p.in_c >= 16 && p.out_c >= 16);
  } else {
    return false;
  }
}

// The float forward pass: NHWC in the compute type (converted and transposed where needed).
template <typename T>
void ForwardFloat(const Conv2DTransposeParams& p, const T* input, const T* filter, T* output,
                  const Parallel& parallel) {
  using C = Compute<T>;
  const View<C> in = AsNhwc<T, C>(input, p.nchw, p.batch, p.in_h, p.in_w, p.in_c, parallel);
  const View<C> f = AsNhwc<T, C>(filter, false, 1, 1, 1, p.FilterSize(), parallel);
  if constexpr (std::is_same_v<T, C>) {
    if (!p.nchw) {
      ForwardNhwc<C>(p, in.data, f.data, output, parallel);
      return;
    }
  }
  Scratch<C> out(static_cast<size_t>(p.OutputSize()));
  ForwardNhwc<C>(p, in.data, f.data, out.data(), parallel);
  StoreNhwc<C, T>(out.data(), p.nchw, p.batch, p.out_h, p.out_w, p.out_c, output, parallel);
}

// The integer forward pass: a direct gather, each output element summed by one thread over
// (fh, fw, ci) in unsigned arithmetic of T's width. Sums modulo 2^bits do not depend on their
// order, so this is TensorFlow's result (its int32 kernel, an Eigen contraction, wraps too)
// bit for bit. Reads both layouts in place (TensorFlow's CPU kernel takes NHWC only).
template <typename T>
void ForwardDirectInteger(const Conv2DTransposeParams& p, const T* input, const T* filter,
                          T* output, const Parallel& parallel) {
  using U = std::make_unsigned_t<T>;
  static_assert(sizeof(U) >= sizeof(unsigned), "narrow integers would promote to int");
  // Element strides of batch, row, column and channel in each layout.
  const int64_t in_sc = p.nchw ? p.in_h * p.in_w : 1;
  const int64_t in_sw = p.nchw ? 1 : p.in_c;
  const int64_t in_sh = p.in_w * in_sw;
  const int64_t in_sb = p.in_h * p.in_w * p.in_c;
  const int64_t out_sc = p.nchw ? p.out_h * p.out_w : 1;
  const int64_t out_sw = p.nchw ? 1 : p.out_c;
  const int64_t out_sh = p.out_w * out_sw;
  const int64_t out_sb = p.out_h * p.out_w * p.out_c;
  const int64_t taps = std::max<int64_t>(
      1, (p.filter_h / p.stride_h + 1) * (p.filter_w / p.stride_w + 1));  // per output pixel
  const double cost = static_cast<double>(p.out_w) * static_cast<double>(p.out_c) *
                      static_cast<double>(p.in_c) * static_cast<double>(taps);
  parallel.For(p.batch * p.out_h, cost, [&](int64_t begin, int64_t end) {
    std::vector<U> acc(static_cast<size_t>(p.out_c));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / p.out_h, oh = r % p.out_h;
      for (int64_t ow = 0; ow < p.out_w; ++ow) {
        std::fill(acc.begin(), acc.end(), U(0));
        for (int64_t fh = 0; fh < p.filter_h; ++fh) {
          const int64_t ih = SourceIndex(oh, fh, p.stride_h, p.pad_top, p.dilation_h, p.in_h);
          if (ih < 0) continue;
          for (int64_t fw = 0; fw < p.filter_w; ++fw) {
            const int64_t iw = SourceIndex(ow, fw, p.stride_w, p.pad_left, p.dilation_w, p.in_w);
            if (iw < 0) continue;
            const T* x = input + b * in_sb + ih * in_sh + iw * in_sw;
            const T* f = filter + (fh * p.filter_w + fw) * p.out_c * p.in_c;  // [co, ci]
            for (int64_t co = 0; co < p.out_c; ++co) {
              const T* fr = f + co * p.in_c;
              U s = acc[static_cast<size_t>(co)];
              for (int64_t ci = 0; ci < p.in_c; ++ci) {
                s += static_cast<U>(x[ci * in_sc]) * static_cast<U>(fr[ci]);
              }
              acc[static_cast<size_t>(co)] = s;
            }
          }
        }
        T* o = output + b * out_sb + oh * out_sh + ow * out_sw;
        for (int64_t co = 0; co < p.out_c; ++co) {
          o[co * out_sc] = static_cast<T>(acc[static_cast<size_t>(co)]);
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void Conv2DTransposeForward(const Conv2DTransposeParams& p, const T* input, const T* filter,
                            T* output, const Parallel& parallel) {
  if (p.OutputSize() == 0) return;
  if (UseOnednn<T>(p, Pass::kForward) &&
      onednn::ConvBackwardData(onednn::ShapeOf(AsConvGeometry(p), p.nchw), OnednnType<T>(), input,
                               filter, output)) {
    return;  // this op is the input gradient of the convolution it transposes
  }
  if constexpr (std::is_integral_v<T>) {
    ForwardDirectInteger<T>(p, input, filter, output, parallel);
  } else {
    ForwardFloat<T>(p, input, filter, output, parallel);
  }
}

// Whether x[0, n) holds no inf or NaN (bfloat16 and half by their exponent bits).
template <typename T>
bool AllFiniteInput(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16> || std::is_same_v<T, Eigen::half>) {
    constexpr uint16_t kExp = std::is_same_v<T, Eigen::bfloat16> ? 0x7f80 : 0x7c00;
    // The largest magnitude's bits: inf and NaN are the patterns from kExp up (a loop the
    // compiler vectorises).
    const auto* bits = reinterpret_cast<const uint16_t*>(x);
    uint16_t top = 0;
    for (int64_t i = 0; i < n; ++i) top = std::max<uint16_t>(top, bits[i] & 0x7fff);
    return top < kExp;
  } else {
    return AllFiniteValues<T>(x, n);
  }
}

template <typename T>
void Conv2DTransposeInputGrad(const Conv2DTransposeParams& p, const T* grad, const T* filter,
                              T* grad_input, const Parallel& parallel) {
  using C = Compute<T>;
  if (p.InputSize() == 0) return;
  // oneDNN's AMX bfloat16 kernel multiplies its padding's zeros by the filter and the gradient: an
  // inf or NaN in either gives NaN where the direct sum, as TensorFlow takes it, is finite. Such
  // inputs take opforge's kernels.
  if (UseOnednn<T>(p, Pass::kInputGrad) && AllFiniteInput(grad, p.OutputSize()) &&
      AllFiniteInput(filter, p.FilterSize()) &&
      onednn::ConvForward(onednn::ShapeOf(AsConvGeometry(p), p.nchw), OnednnType<T>(), grad, filter,
                          nullptr, false, 0.f, grad_input)) {
    return;  // the convolution this op transposes
  }
  const View<C> g = AsNhwc<T, C>(grad, p.nchw, p.batch, p.out_h, p.out_w, p.out_c, parallel);
  const View<C> f = AsNhwc<T, C>(filter, false, 1, 1, 1, p.FilterSize(), parallel);
  if constexpr (std::is_same_v<T, C>) {
    if (!p.nchw) {
      InputGradNhwc<C>(p, g.data, f.data, grad_input, parallel);
      return;
    }
  }
  Scratch<C> out(static_cast<size_t>(p.InputSize()));
  InputGradNhwc<C>(p, g.data, f.data, out.data(), parallel);
  StoreNhwc<C, T>(out.data(), p.nchw, p.batch, p.in_h, p.in_w, p.in_c, grad_input, parallel);
}

namespace {

// Whether every filter tap meets at least one output pixel (a tap that meets none, past the
// padding of a small image, has a gradient of 0).
bool EveryTapMeetsTheOutput(const Conv2DTransposeParams& p) {
  auto live = [](int64_t taps, int64_t in, int64_t stride, int64_t pad, int64_t dilation,
                 int64_t out) {
    for (int64_t f = 0; f < taps; ++f) {
      bool met = false;
      for (int64_t i = 0; i < in && !met; ++i) {
        const int64_t o = i * stride - pad + f * dilation;
        met = o >= 0 && o < out;
      }
      if (!met) return false;
    }
    return true;
  };
  return live(p.filter_h, p.in_h, p.stride_h, p.pad_top, p.dilation_h, p.out_h) &&
         live(p.filter_w, p.in_w, p.stride_w, p.pad_left, p.dilation_w, p.out_w);
}

}  // namespace

template <typename T>
void Conv2DTransposeFilterGrad(const Conv2DTransposeParams& p, const T* input, const T* grad,
                               T* grad_filter, const Parallel& parallel) {
  using C = Compute<T>;
  if (p.FilterSize() == 0) return;
  // oneDNN's AVX2 kernels multiply the padding's zeros by `input` (the convolution's output
  // gradient): with inf or NaN there they give NaN for taps whose sum, as TensorFlow takes it,
  // has no such product. Such inputs take opforge's kernels, which skip the padding. So do
  // filters with a tap that meets no output: oneDNN's bfloat16 kernel (AVX512-BF16) returns
  // nonzero values for such taps (conv2d_transpose_test.cc's 1x1 image under a 3x3 filter).
  if (UseOnednn<T>(p, Pass::kFilterGrad) && EveryTapMeetsTheOutput(p) &&
      AllFiniteInput(input, p.InputSize()) &&
      onednn::ConvBackwardWeights(onednn::ShapeOf(AsConvGeometry(p), p.nchw), OnednnType<T>(), grad,
                                  input, grad_filter)) {
    return;  // the convolution's filter gradient, this op's output gradient as its input
  }
  const View<C> in = AsNhwc<T, C>(input, p.nchw, p.batch, p.in_h, p.in_w, p.in_c, parallel);
  const View<C> g = AsNhwc<T, C>(grad, p.nchw, p.batch, p.out_h, p.out_w, p.out_c, parallel);
  if constexpr (std::is_same_v<T, C>) {
    FilterGradNhwc<C>(p, in.data, g.data, grad_filter, parallel);
  } else {
    Scratch<C> out(static_cast<size_t>(p.FilterSize()));
    FilterGradNhwc<C>(p, in.data, g.data, out.data(), parallel);
    StoreNhwc<C, T>(out.data(), false, 1, 1, 1, p.FilterSize(), grad_filter, parallel);
  }
}

#define OPFORGE_INSTANTIATE_FORWARD(T, ...)                                                     \
  template void Conv2DTransposeForward<T>(const Conv2DTransposeParams&, const T*, const T*, T*, \
                                          const Parallel&);
OPFORGE_CONV2D_TRANSPOSE_TYPES(OPFORGE_INSTANTIATE_FORWARD)
#undef OPFORGE_INSTANTIATE_FORWARD
#define OPFORGE_INSTANTIATE(T, ...)                                                                \
  template void Conv2DTransposeInputGrad<T>(const Conv2DTransposeParams&, const T*, const T*, T*,  \
                                            const Parallel&);                                      \
  template void Conv2DTransposeFilterGrad<T>(const Conv2DTransposeParams&, const T*, const T*, T*, \
                                             const Parallel&);
OPFORGE_FLOAT_TYPES(OPFORGE_INSTANTIATE)
#undef OPFORGE_INSTANTIATE

}  // namespace opforge
