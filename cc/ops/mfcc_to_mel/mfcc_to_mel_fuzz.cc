// libFuzzer harness of the MfccToMel core (forward and gradient), as mfcc_to_mel_tf.cc calls it
// (see fuzz/fuzz_util.h). Bytes: mode (0 MfccToMel, 1 MfccToMelGrad), dtype (float, double),
// flags; attrs n_mels IntOr(16), dct_type IntOr(2), norm Enum(ortho, none), ref FloatOr,
// lifter FloatOr; mfcc Shape(2); gradient: grad and mel ShapeOr(mfcc's with n_mels rows); then
// the values.
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags, const MfccToMelParams& attrs) {
  const char* op = mode == 0 ? "MfccToMel" : "MfccToMelGrad";
  std::vector<int64_t> mfcc = in.Shape(2);
  Input::Fix(&mfcc);
  Note("mfcc", mfcc);
  MfccToMelParams p = attrs;
  if (mode == 0) {
    if (!Passed(ValidateMfccToMel(mfcc, &p), {op})) return;
    if (!InputsPossible({&mfcc})) return;
    std::vector<int64_t> out = mfcc;
    out[out.size() - 2] = p.n_mels;
    Outputs outs;
    outs.Add<T>("mel", out);
    if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({mfcc})) return;
    Tensor<T> x(mfcc);
    x.Fill(in);
    outs.Run(flags, [&](const Parallel& parallel) {
      MfccToMelForward<T>(p, x.data(), outs.Get<T>(0), parallel);
    });
    return;
  }
  std::vector<int64_t> expected = mfcc;
  if (expected.size() >= 2) expected[expected.size() - 2] = attrs.n_mels;
  std::vector<int64_t> grad = in.ShapeOr(expected);
  std::vector<int64_t> mel = in.ShapeOr(expected);
  Input::Fix({&grad, &mel});
  Note("grad", grad);
  Note("mel", mel);
  if (!Passed(ValidateMfccToMelGrad(grad, mel, mfcc, &p), {op})) return;
  if (!InputsPossible({&grad, &mel, &mfcc})) return;
  Outputs outs;
  outs.Add<T>("grad_mfcc", mfcc);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({grad, mel, mfcc})) return;
  Tensor<T> g(grad), m(mel);
  g.Fill(in);
  m.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    MfccToMelBackward<T>(p, g.data(), m.data(), outs.Get<T>(0), parallel);
  });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge;
  using namespace opforge::fuzz;
  Input in(data, size);
  const int mode = in.Byte() % 2;
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  const char* op = mode == 0 ? "MfccToMel" : "MfccToMelGrad";
  // The kernel's constructor: the attrs, parsed and checked on a shape that passes.
  MfccToMelParams attrs;
  attrs.n_mels = in.IntOr(16);
  attrs.dct_type = in.IntOr(2);
  const std::string norm = in.Enum({"ortho", "none"});
  attrs.ref = in.FloatOr({1.0f, 2.5f, 1e-3f});
  attrs.lifter = in.FloatOr({0.0f, 22.0f, 1.0f, 7.5f});
  Note("mode", mode);
  Note("n_mels", attrs.n_mels);
  Note("dct_type", attrs.dct_type);
  Note("norm", norm);
  Note("ref", attrs.ref);
  Note("lifter", attrs.lifter);
  if (!Passed(ParseDctNorm(norm, &attrs.norm), {"MfccToMel"})) return 0;
  MfccToMelParams check = attrs;
  const int64_t rows = attrs.n_mels > 0 ? attrs.n_mels : 1;
  if (!Passed(mode == 0 ? ValidateMfccToMel({1, 1}, &check)
                        : ValidateMfccToMelGrad({rows, 1}, {rows, 1}, {1, 1}, &check),
              {op})) {
    return 0;
  }
  if (dtype % 2 == 0) {
    Note("T", "float32");
    Fuzz<float>(in, mode, flags, attrs);
  } else {
    Note("T", "float64");
    Fuzz<double>(in, mode, flags, attrs);
  }
  return 0;
}
