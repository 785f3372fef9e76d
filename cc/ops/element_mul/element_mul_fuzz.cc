// libFuzzer harness of the ElementMul core (forward and broadcast gradient), as
// element_mul_tf.cc calls it (see fuzz/fuzz_util.h). Bytes: mode (0 ElementMul, 1 ElementMulGrad),
// dtype (half, bfloat16, float, double, int32, int64), flags (extra bit 0: swap a and b; grad:
// extra bits 1, 2: need_grad_a, need_grad_b off); a: AnyShape; b: Partner(a); grad:
// ShapeOr(broadcast of a and b); then the values.
#include "common/broadcast_plan.h"
#include "fuzz/fuzz_util.h"
#include "ops/element_mul/element_mul.h"

namespace opforge {
namespace fuzz {
namespace {

// A shape to broadcast against `a`: a itself, a suffix of it with some dims 1 (one byte says
// which), or any shape.
std::vector<int64_t> Partner(Input& in, const std::vector<int64_t>& a) {
  const uint8_t b = in.Byte();
  if (b < 0x40) return a;
  if (b < 0xC0) {
    const size_t rank = in.Byte() % (a.size() + 1);
    std::vector<int64_t> s(a.end() - static_cast<std::ptrdiff_t>(rank), a.end());
    const uint8_t ones = in.Byte();
    for (size_t i = 0; i < s.size(); ++i) {
      if (ones & (1u << (i % 8))) s[i] = 1;
    }
    return s;
  }
  return in.AnyShape();
}

// NumPy's broadcast shape, or `a` where the shapes do not broadcast (only a hint for grad).
std::vector<int64_t> BroadcastHint(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) return a;
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

template <typename T>
void CompareInPlace(const Tensor<T>& got, const T* want, const char* what) {
  for (int64_t i = 0; i < got.size(); ++i) {
    if (!SameOrBothNan(got[i], want[i])) Fail("%s: element %lld differs", what, (long long)i);
  }
}

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags) {
  std::vector<int64_t> a_shape = in.AnyShape();
  std::vector<int64_t> b_shape = Partner(in, a_shape);
  if (flags.extra & 1) std::swap(a_shape, b_shape);
  Input::Fix({&a_shape, &b_shape});
  Note("a", a_shape);
  Note("b", b_shape);
  BroadcastPlan plan;
  if (mode == 0) {
    if (!Passed(ValidateElementMul(a_shape, b_shape, &plan), {"ElementMul"})) return;
    if (!InputsPossible({&a_shape, &b_shape})) return;
    Outputs outs;
    outs.Add<T>("product", plan.out_shape);
    if (NumElements(plan.out_shape) != plan.out_size) {
      Fail("plan.out_size %lld is not the element count of out_shape %s", (long long)plan.out_size,
           Str(plan.out_shape).c_str());
    }
    if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({a_shape, b_shape})) return;
    Tensor<T> a(a_shape), b(b_shape);
    a.Fill(in);
    b.Fill(in);
    outs.Run(flags, [&](const Parallel& parallel) {
      ElementMulForward<T>(plan, a.data(), b.data(), outs.Get<T>(0), parallel);
    });
    if (flags.in_place) {  // product forwarded from a or b, whichever has its shape
      for (int k = 0; k < 2; ++k) {
        const Tensor<T>& src = k == 0 ? a : b;
        if (src.shape() != plan.out_shape) continue;
        Tensor<T> buf(src.shape());
        std::copy(src.data(), src.data() + src.size(), buf.data());
        ElementMulForward<T>(plan, k == 0 ? buf.data() : a.data(), k == 0 ? b.data() : buf.data(),
                             buf.data(), SerialParallel());
        CompareInPlace(buf, outs.Get<T>(0), k == 0 ? "in place of a" : "in place of b");
      }
    }
    return;
  }
  const bool need_a = (flags.extra & 2) == 0, need_b = (flags.extra & 4) == 0;
  std::vector<int64_t> g_shape = in.ShapeOr(BroadcastHint(a_shape, b_shape));
  Input::Fix(&g_shape);
  Note("grad", g_shape);
  Note("need_grad_a", need_a);
  Note("need_grad_b", need_b);
  if (!Passed(ValidateElementMulGrad(g_shape, a_shape, b_shape, &plan), {"ElementMulGrad"})) {
    return;
  }
  if (!InputsPossible({&g_shape, &a_shape, &b_shape})) return;
  // As the binding: grad_b first into a fresh buffer, then grad_a (which may take grad's buffer).
  const std::vector<int64_t> skipped = {0};
  Outputs outs;
  outs.Add<T>("grad_b", need_b ? b_shape : skipped);
  outs.Add<T>("grad_a", need_a ? a_shape : skipped);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({g_shape, a_shape, b_shape})) return;
  Tensor<T> g(g_shape), a(a_shape), b(b_shape);
  g.Fill(in);
  a.Fill(in);
  b.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    if (T* gb = outs.Get<T>(0))
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), nullptr, gb, parallel);
    if (T* ga = outs.Get<T>(1))
      ElementMulBackward<T>(plan, g.data(), a.data(), b.data(), ga, nullptr, parallel);
  });
  if (flags.in_place && need_a && g_shape == a_shape && g.size() > 0) {  // grad_a in grad's buffer
    Tensor<T> buf(g_shape);
    std::copy(g.data(), g.data() + g.size(), buf.data());
    ElementMulBackward<T>(plan, buf.data(), a.data(), b.data(), buf.data(), nullptr,
                          SerialParallel());
    CompareInPlace(buf, outs.Get<T>(1), "grad_a in place of grad");
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge::fuzz;
  Input in(data, size);
  const int mode = in.Byte() % 2;
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  Note("mode", mode);
  auto run = [&](auto t) {
    using T = decltype(t);
    Note("T", TypeName<T>());
    Fuzz<T>(in, mode, flags);
  };
  switch (dtype % 6) {
    case 4:
      run(int32_t());
      break;
    case 5:
      run(int64_t());
      break;
    default:
      WithFloatType(dtype % 6, run);
  }
  return 0;
}
