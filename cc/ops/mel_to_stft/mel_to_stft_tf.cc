// TensorFlow binding of MelToStft: op registration with its shape function, and the op struct that
// TfKernel (common/tf_kernel.h) runs. No gradient (an NNLS solution; tf.no_gradient in Python).
#include <cmath>
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/mel_to_stft/mel_to_stft.h"
#include "ops/mel_to_stft/mel_to_stft_op.h"

namespace opforge {

namespace {

using namespace mel_to_stft_op;  // NOLINT: the op's constants and attr reader, shared with its
                                 // kernels

// mel [..., n_mels, T], filters [0, 0] or [n_mels, n_fft / 2 + 1] -> [..., n_fft / 2 + 1, T].
absl::Status MelToStftShape(InferenceContext* c) {
  MelToStftParams p;
  Status parsed;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p, &parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(CheckAttrs(p)));
  const ShapeFn fn(c, kOp);
  ShapeHandle mel, filters;
  TF_RETURN_IF_ERROR(
      fn.RankAtLeast(0, "mel", 2, &mel, "a tensor of rank >= 2 [..., n_mels, time]"));
  TF_RETURN_IF_ERROR(fn.Rank(1, "filters", 2, &filters,
                             "a 2-D tensor: [0, 0] (librosa's bank from the attrs) or "
                             "[n_mels, n_fft / 2 + 1]"));
  const int64_t n_freq = p.filters.n_fft / 2 + 1;
  if (!c->RankKnown(mel)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  // The core's checks on what is known: an unknown leading or time dimension is 1 (which passes
  // every check), an unknown n_mels that of filters (or 1); the message shows them as "?".
  std::vector<int64_t> dims = ShapeFn(c, "MelToStft").Dims(mel);
  const bool filters_known = fn.Known({filters});
  const std::vector<int64_t> filter_dims =
      filters_known ? fn.Dims(filters) : std::vector<int64_t>{};
  int64_t& n_mels = dims[dims.size() - 2];
  if (n_mels < 0) n_mels = filters_known && filter_dims[0] > 0 ? filter_dims[0] : 1;
  for (int64_t& d : dims) {
    if (d < 0) d = 1;
  }
  MelToStftParams full = p;
  const Status s =
      filters_known ? ValidateMelToStft(dims, filter_dims, &full) : ValidateMelToStft(dims, &full);
  if (!s.ok()) {
    std::string message = s.message();
    const std::string from = ShapeString(dims);
    const size_t at = message.find(from);
    if (at != std::string::npos) message.replace(at, from.size(), fn.Text(mel));
    return absl::InvalidArgumentError(message);
  }
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(mel, -2, c->MakeDim(n_freq), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(MelToStftOp)
    .SetShapeFn(MelToStftShape)
    .Doc(
        "The non-negative least-squares inverse of a Mel filter bank, as "
        "librosa.feature.inverse.mel_to_stft: for every frame of mel [..., n_mels, T], "
        "s = argmin_{s >= 0} |M s - mel|^2, and stft = s ** (1 / power) [..., n_fft / 2 + 1, T]. "
        "M is librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax (< 0: sr / 2), htk, norm "
        "('slaney' or 'none')) when filters is an empty [0, 0] tensor, else filters itself "
        "([n_mels, n_fft / 2 + 1], finite, >= 0, at most two non-zeros per column in adjacent "
        "rows: overlapping triangles, e.g. tf.signal.linear_to_mel_weight_matrix transposed). "
        "Mel values must be finite. No gradient.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(MelToStftOp::kSignature.name), MelToStftOp, OPFORGE_MEL_TO_STFT_TYPES,
                         OPFORGE_MEL_TO_STFT_TYPES)

}  // namespace
}  // namespace opforge
