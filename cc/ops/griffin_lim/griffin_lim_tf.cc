// TensorFlow binding of GriffinLim: op registration with its shape function, and the op struct
// that TfKernel (common/tf_kernel.h) runs. No gradient (tf.no_gradient in Python).
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/griffin_lim/griffin_lim.h"
#include "ops/griffin_lim/griffin_lim_op.h"

namespace opforge {

namespace {

using namespace griffin_lim_op;  // NOLINT: the op's constants and attr reader, shared with its
                                 // kernels

// magnitude [..., n_freq, T] (and phases) -> audio [..., L]: L = length, or, with n_fft (the attr,
// else 2 (n_freq - 1)), hop (else win_length / 4, win_length else n_fft) and T known,
// n_fft + hop (T - 1), less 2 (n_fft / 2) when centred.
absl::Status GriffinLimShape(InferenceContext* c) {
  GriffinLimParams p;
  Status parsed;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p, &parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(parsed));
  const ShapeFn fn(c, kOp);
  ShapeHandle magnitude, phases;
  TF_RETURN_IF_ERROR(
      fn.RankAtLeast(0, "magnitude", 2, &magnitude, "a tensor of rank >= 2 [..., n_freq, time]"));
  phases = c->input(1);
  if (p.init == GriffinLimInit::kPhases) {
    TF_RETURN_IF_ERROR(fn.MergeInput(1, "phases", magnitude,
                                     "magnitude's shape " + fn.Text(magnitude), &magnitude));
  } else if (fn.Known({phases})) {
    int64_t n = 1;
    for (int64_t d : fn.Dims(phases)) n *= d;
    TF_RETURN_IF_ERROR(ToTfStatus(CheckUnusedPhases(p, n, fn.Text(phases))));
  }
  if (!c->RankKnown(magnitude)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  // The core's checks on what is known: unknown leading dimensions are 1; an unknown n_freq is
  // n_fft's (when given), an unknown T one frame (when no length is given). Both pass every check,
  // so the message is about what is known (shown with "?" for the unknown dimensions).
  std::vector<int64_t> dims = ShapeFn(c, "GriffinLim").Dims(magnitude);
  const size_t rank = dims.size();
  const int64_t n_freq = dims[rank - 2], frames = dims[rank - 1];
  bool checkable = true;
  if (n_freq < 0) {
    if (p.n_fft > 0) {
      dims[rank - 2] = p.n_fft / 2 + 1;
    } else {
      checkable = false;
    }
  }
  if (frames < 0) {
    if (p.length == 0) {
      dims[rank - 1] = 1;
    } else {
      checkable = false;
    }
  }
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (dims[i] < 0) dims[i] = 1;
  }
  GriffinLimParams full = p;
  if (full.seed == kFreshSeed) full.seed = 0;
  if (checkable) {
    const std::vector<int64_t>* given = p.init == GriffinLimInit::kPhases ? &dims : nullptr;
    const Status s = ValidateGriffinLim(dims, given, &full);
    if (!s.ok()) {
      std::string message = s.message();
      const std::string from = ShapeString(dims);
      const size_t at = message.find(from);
      if (at != std::string::npos) message.replace(at, from.size(), fn.Text(magnitude));
      return absl::InvalidArgumentError(message);
    }
  }
  DimensionHandle length = c->UnknownDim();
  if (p.length > 0) {
    length = c->MakeDim(p.length);
  } else if (checkable && frames >= 0) {
    length = c->MakeDim(full.out_length);  // from the real T (and the real or given n_freq)
  }
  ShapeHandle batch, out;
  TF_RETURN_IF_ERROR(c->Subshape(magnitude, 0, -2, &batch));
  TF_RETURN_IF_ERROR(c->Concatenate(batch, c->Vector(length), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

}  // namespace

// Stateful: with seed = -1 every call draws new phases, so two calls must not be merged or folded.
OPFORGE_REGISTER_OP(GriffinLimOp)
    .SetIsStateful()
    .SetShapeFn(GriffinLimShape)
    .Doc(
        "The fast Griffin-Lim algorithm with momentum, as librosa.griffinlim: audio [..., L] "
        "whose STFT magnitude approximates magnitude [..., n_fft / 2 + 1, T], after n_iter "
        "iterations of STFT/ISTFT (window 'hann', 'hamming', 'blackman' or 'boxcar' of "
        "win_length (0: n_fft) samples centred in n_fft; hop_length (0: win_length / 4); "
        "center: frames centred on the signal padded with pad_mode 'constant', 'edge', 'reflect' "
        "or 'symmetric'; length: crop or zero-pad to exactly that many samples, 0: "
        "n_fft + hop (T - 1), less 2 (n_fft / 2) when centred). n_fft: 0 takes 2 (n_freq - 1). "
        "init 'random': phases uniform in [0, 2 pi) from numpy's RandomState(seed).random "
        "(bit for bit, so the result is librosa's with random_state=seed); seed = -1 draws a "
        "fresh seed from std::random_device on every call (nondeterministic). init 'none': "
        "phases 0 (librosa's init=None). init 'phases': the given phases (radians, magnitude's "
        "shape); otherwise phases must be an empty tensor. Magnitudes and phases must be finite. "
        "No gradient.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(GriffinLimOp::kSignature.name), GriffinLimOp,
                         OPFORGE_GRIFFIN_LIM_TYPES, OPFORGE_GRIFFIN_LIM_TYPES)

}  // namespace
}  // namespace opforge
