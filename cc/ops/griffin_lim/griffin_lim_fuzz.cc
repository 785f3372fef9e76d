// libFuzzer harness of the GriffinLim core, as griffin_lim_tf.cc calls it (see fuzz/fuzz_util.h).
// Bytes: mode (unused), dtype (float, double), flags; attrs n_iter IntOr(2), n_fft IntOr(0),
// hop_length IntOr(0), win_length IntOr(0), window Enum, center Bool, pad_mode Enum, momentum
// FloatOr, length IntOr(0), init Enum(random, none, phases), seed IntOr(-1) (-1: a seed from the
// bytes, where the binding draws one); magnitude Shape(2); phases ShapeOr(magnitude's, or [0]
// unless init is "phases"); then the values. Calls of more than 8 iterations are validated only.
#include <cmath>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/griffin_lim/griffin_lim.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "GriffinLim";

template <typename T>
void Fuzz(Input& in, const FuzzFlags& flags, const GriffinLimParams& attrs) {
  std::vector<int64_t> magnitude = in.Shape(2);
  const bool given = attrs.init == GriffinLimInit::kPhases;
  std::vector<int64_t> phases = in.ShapeOr(given ? magnitude : std::vector<int64_t>{0});
  Input::Fix({&magnitude, &phases});
  Note("magnitude", magnitude);
  Note("phases", phases);
  GriffinLimParams p = attrs;
  // The binding: phases must be empty unless init is "phases"; then the core's checks.
  const int64_t phase_count = NumElements(phases);
  if (!given && phase_count != 0) {
    CheckError(InvalidArgument(kOp, "phases", "an empty tensor unless init is \"phases\"",
                               "shape " + ShapeString(phases)),
               {kOp});
    return;
  }
  if (!Passed(ValidateGriffinLim(magnitude, given ? &phases : nullptr, &p), {kOp})) return;
  if (!InputsPossible({&magnitude, &phases})) return;
  std::vector<int64_t> out(magnitude.begin(), magnitude.end() - 2);
  out.push_back(p.out_length);
  Outputs outs;
  outs.Add<T>("audio", out);
  if (p.n_iter > 8) return;
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({magnitude, phases})) return;
  // The frames the iterations hold: [batch, T, n_fft] samples and spectra.
  if (MulOrMinus1(p.batch * p.n_frames, p.n_fft + 2) > kMaxTotalElements) return;
  Tensor<T> s(magnitude), ph(given ? phases : std::vector<int64_t>{0});
  s.Fill(in);
  ph.Fill(in);
  // The kernel checks the values (finite magnitudes and phases) before writing anything: an
  // error leaves the output unwritten, and is the binding's InvalidArgument.
  Tensor<T> probe(out);
  const T* phase_data = given ? ph.data() : nullptr;
  const Status first =
      GriffinLimForward<T>(p, s.data(), phase_data, probe.data(), SerialParallel());
  if (!Passed(first, {kOp})) return;
  outs.Run(flags, [&](const Parallel& parallel) {
    const Status st = GriffinLimForward<T>(p, s.data(), phase_data, outs.Get<T>(0), parallel);
    if (!st.ok()) Fail("an error on a second run: %s", st.message().c_str());
  });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge;
  using namespace opforge::fuzz;
  Input in(data, size);
  in.Byte();  // mode: one entry point
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  // The kernel's constructor: the attrs, parsed.
  GriffinLimParams attrs;
  attrs.n_iter = in.IntOr(2);
  attrs.n_fft = in.IntOr(0);
  attrs.hop_length = in.IntOr(0);
  attrs.win_length = in.IntOr(0);
  const std::string window = in.Enum({"hann", "hamming", "blackman", "boxcar"});
  attrs.center = !in.Bool();
  const std::string pad_mode = in.Enum({"constant", "edge", "reflect", "symmetric"});
  attrs.momentum = in.FloatOr({0.99f, 0.0f, 0.5f});
  attrs.length = in.IntOr(0);
  const std::string init = in.Enum({"random", "none", "phases"});
  attrs.seed = in.IntOr(-1);
  Note("n_iter", attrs.n_iter);
  Note("n_fft", attrs.n_fft);
  Note("hop_length", attrs.hop_length);
  Note("win_length", attrs.win_length);
  Note("window", window);
  Note("center", attrs.center);
  Note("pad_mode", pad_mode);
  Note("momentum", attrs.momentum);
  Note("length", attrs.length);
  Note("init", init);
  Note("seed", attrs.seed);
  if (!Passed(ParseStftWindow(window, &attrs.window), {kOp})) return 0;
  if (!Passed(ParseStftPadMode(pad_mode, &attrs.pad_mode), {kOp})) return 0;
  if (!Passed(ParseGriffinLimInit(init, &attrs.init), {kOp})) return 0;
  if (attrs.seed != -1 && (attrs.seed < 0 || attrs.seed > int64_t{0xffffffff})) {
    CheckError(
        InvalidArgument(kOp, "seed", "-1 (a fresh seed per call) or in [0, 2^32 - 1]", attrs.seed),
        {kOp});
    return 0;
  }
  if (attrs.seed == -1) attrs.seed = in.Byte();  // the binding: std::random_device
  if (dtype % 2 == 0) {
    Note("T", "float32");
    Fuzz<float>(in, flags, attrs);
  } else {
    Note("T", "float64");
    Fuzz<double>(in, flags, attrs);
  }
  return 0;
}
