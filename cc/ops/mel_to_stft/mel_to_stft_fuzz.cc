// libFuzzer harness of the MelToStft core, as mel_to_stft_tf.cc calls it (see fuzz/fuzz_util.h).
// Bytes: mode (0 librosa's bank from the attrs, 1 a given bank of drawn values, 2 librosa's bank
// given, scaled by a drawn factor), dtype (float, double), flags; attrs sr FloatOr, n_fft
// IntOr(32), power FloatOr, fmin FloatOr, fmax FloatOr, htk Bool, norm Enum(slaney, none); mel
// Shape(2); filters (modes 1, 2) ShapeOr([n_mels, n_fft / 2 + 1]); then the values.
#include <cmath>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/mel_to_stft/mel_to_stft.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "MelToStft";

template <typename T>
void Fuzz(Input& in, int mode, const FuzzFlags& flags, const MelToStftParams& attrs) {
  std::vector<int64_t> mel = in.Shape(2);
  const int64_t n_mels = mel.size() >= 2 ? mel[mel.size() - 2] : 1;
  std::vector<int64_t> filters = {0, 0};
  if (mode > 0) filters = in.ShapeOr({n_mels, attrs.filters.n_fft / 2 + 1});
  Input::Fix({&mel, &filters});
  Note("mel", mel);
  Note("filters", filters);
  MelToStftParams p = attrs;
  if (!Passed(ValidateMelToStft(mel, filters, &p), {kOp})) return;
  if (!InputsPossible({&mel, &filters})) return;
  if (p.given_filters != (filters != std::vector<int64_t>{0, 0})) Fail("given_filters is wrong");
  std::vector<int64_t> out = mel;
  out[out.size() - 2] = p.n_freq;
  Outputs outs;
  outs.Add<T>("stft", out);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({mel, filters})) return;
  Tensor<T> x(mel), bank(filters);
  x.Fill(in);
  if (mode == 2 && p.given_filters) {
    const std::vector<T> librosa = MelFilterBank<T>(p.filters);
    const double scale = std::abs(static_cast<double>(in.Float()));
    for (int64_t i = 0; i < bank.size(); ++i) {
      bank[i] = static_cast<T>(static_cast<double>(librosa[static_cast<size_t>(i)]) * scale);
    }
  } else {
    bank.Fill(in);
  }
  // The kernel checks the values (a given bank, finite Mel values) before writing anything: an
  // error leaves the output unwritten, and is the binding's InvalidArgument.
  Tensor<T> probe(out);
  const T* given = p.given_filters ? bank.data() : nullptr;
  const Status first = MelToStftForward<T>(p, x.data(), given, probe.data(), SerialParallel());
  if (!Passed(first, {kOp})) return;
  outs.Run(flags, [&](const Parallel& parallel) {
    const Status s = MelToStftForward<T>(p, x.data(), given, outs.Get<T>(0), parallel);
    if (!s.ok()) Fail("an error on a second run: %s", s.message().c_str());
  });
  // s >= 0 (NaN fails); s ** (1 / power) may overflow to inf for finite huge Mel values.
  for (int64_t i = 0; i < outs.Count(0); ++i) {
    const T v = outs.Get<T>(0)[i];
    if (!(v >= T(0))) Fail("stft[%lld] = %g: not >= 0", static_cast<long long>(i), double(v));
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge;
  using namespace opforge::fuzz;
  Input in(data, size);
  const int mode = in.Byte() % 3;
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  // The kernel's constructor: the attrs, parsed and checked on a shape that passes.
  MelToStftParams attrs;
  attrs.filters.sr = in.FloatOr({22050.0f, 8000.0f, 16000.0f});
  attrs.filters.n_fft = in.IntOr(32);
  attrs.power = in.FloatOr({2.0f, 1.0f, 0.5f});
  attrs.filters.fmin = in.FloatOr({0.0f, 300.0f});
  attrs.filters.fmax = in.FloatOr({-1.0f, 3000.0f});
  attrs.filters.htk = in.Bool();
  const std::string norm = in.Enum({"slaney", "none"});
  Note("mode", mode);
  Note("sr", attrs.filters.sr);
  Note("n_fft", attrs.filters.n_fft);
  Note("power", attrs.power);
  Note("fmin", attrs.filters.fmin);
  Note("fmax", attrs.filters.fmax);
  Note("htk", attrs.filters.htk);
  Note("norm", norm);
  if (!Passed(ParseMelNorm(kOp, norm, &attrs.filters.norm), {kOp})) return 0;
  MelToStftParams check = attrs;
  if (!Passed(ValidateMelToStft({1, 1}, &check), {kOp})) return 0;
  if (dtype % 2 == 0) {
    Note("T", "float32");
    Fuzz<float>(in, mode, flags, attrs);
  } else {
    Note("T", "float64");
    Fuzz<double>(in, mode, flags, attrs);
  }
  return 0;
}
