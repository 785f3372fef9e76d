// TensorFlow binding of MfccToMel and its gradient: op registration with shape functions, and the
// op structs that TfKernel (common/tf_kernel.h) runs.
#include <cmath>
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "ops/mfcc_to_mel/mfcc_to_mel.h"
#include "ops/mfcc_to_mel/mfcc_to_mel_op.h"

namespace opforge {

namespace {

using namespace mfcc_to_mel_op;  // NOLINT: the op's constants and attr reader, shared with its
                                 // kernels

// `dims` of a shape known in part (unknown dimensions -1) with the unknown ones set to 1, which
// passes every check of the core (at least one coefficient, at most n_mels, a non-empty time
// axis, a size that fits), so that its message is about what is known; the message then shows
// the unknown dimensions as "?".
std::vector<int64_t> FillUnknown(std::vector<int64_t> dims) {
  for (int64_t& d : dims) {
    if (d < 0) d = 1;
  }
  return dims;
}

absl::Status WithUnknownShown(const Status& s, const std::vector<std::vector<int64_t>>& filled,
                              const std::vector<std::string>& texts) {
  if (s.ok()) return absl::OkStatus();
  std::string message = s.message();
  for (size_t i = 0; i < filled.size(); ++i) {
    const std::string from = ShapeString(filled[i]);
    const size_t at = message.find(from);
    if (at != std::string::npos) message.replace(at, from.size(), texts[i]);
  }
  return absl::InvalidArgumentError(message);
}

// mfcc [..., n_mfcc, T] -> mel [..., n_mels, T].
absl::Status MfccToMelShape(InferenceContext* c) {
  MfccToMelParams p;
  Status parsed;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p, &parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(CheckAttrs(p, false)));
  const ShapeFn fn(c, "MfccToMel");
  ShapeHandle mfcc;
  TF_RETURN_IF_ERROR(
      fn.RankAtLeast(0, "mfcc", 2, &mfcc, "a tensor of rank >= 2 [..., n_mfcc, time]"));
  if (!c->RankKnown(mfcc)) {
    c->set_output(0, c->UnknownShape());
    return absl::OkStatus();
  }
  const std::vector<int64_t> filled = FillUnknown(ShapeFn(c, "MfccToMel").Dims(mfcc));
  MfccToMelParams full = p;
  TF_RETURN_IF_ERROR(WithUnknownShown(ValidateMfccToMel(filled, &full), {filled}, {fn.Text(mfcc)}));
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(mfcc, -2, c->MakeDim(p.n_mels), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

// grad_mfcc has mfcc's shape (input 2); grad and mel are [..., n_mels, T] with its leading axes.
absl::Status MfccToMelGradShape(InferenceContext* c) {
  MfccToMelParams p;
  Status parsed;
  TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &p, &parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(parsed));
  TF_RETURN_IF_ERROR(ToTfStatus(CheckAttrs(p, true)));
  const ShapeFn fn(c, "MfccToMelGrad");
  const std::string expected = "a tensor of rank >= 2 [..., n_mels, time]";
  ShapeHandle grad, mel, mfcc;
  TF_RETURN_IF_ERROR(fn.RankAtLeast(0, "grad", 2, &grad, expected));
  TF_RETURN_IF_ERROR(fn.RankAtLeast(1, "mel", 2, &mel, expected));
  TF_RETURN_IF_ERROR(
      fn.RankAtLeast(2, "mfcc", 2, &mfcc, "a tensor of rank >= 2 [..., n_mfcc, time]"));
  if (c->RankKnown(grad) && c->RankKnown(mel) && c->RankKnown(mfcc)) {
    std::vector<std::vector<int64_t>> filled = {ShapeFn(c, "MfccToMel").Dims(grad),
                                                ShapeFn(c, "MfccToMel").Dims(mel),
                                                ShapeFn(c, "MfccToMel").Dims(mfcc)};
    // An unknown dimension takes the value the others give it (so that only a real conflict is
    // reported), else 1.
    const size_t rank = filled[2].size();
    for (size_t i = 0; i < rank; ++i) {
      const bool rows = i + 2 == rank;
      int64_t known = -1;
      for (const auto& dims : filled) {
        if (dims.size() == rank && dims[i] >= 0 && !(rows && &dims == &filled[2])) known = dims[i];
      }
      for (auto& dims : filled) {
        if (dims.size() != rank || dims[i] >= 0) continue;
        dims[i] = rows ? (&dims == &filled[2] ? 1 : p.n_mels) : (known >= 0 ? known : 1);
      }
    }
    for (auto& dims : filled) dims = FillUnknown(dims);
    MfccToMelParams full = p;
    TF_RETURN_IF_ERROR(
        WithUnknownShown(ValidateMfccToMelGrad(filled[0], filled[1], filled[2], &full), filled,
                         {fn.Text(grad), fn.Text(mel), fn.Text(mfcc)}));
  }
  c->set_output(0, mfcc);
  return absl::OkStatus();
}

}  // namespace

OPFORGE_REGISTER_OP(MfccToMelOp)
    .SetShapeFn(MfccToMelShape)
    .Doc(
        "Mel-frequency cepstral coefficients mfcc [..., n_mfcc, T] back to a Mel power "
        "spectrogram [..., n_mels, T], as librosa.feature.inverse.mfcc_to_mel: inverse liftering "
        "(lifter > 0), the inverse DCT (dct_type 2 or 3, norm 'ortho' or 'none') zero-padded from "
        "n_mfcc to n_mels, then ref * 10^(0.1 x) (librosa.db_to_power). Computed in float64 for "
        "both element types. NaN and infinity propagate.");

OPFORGE_REGISTER_OP(MfccToMelGradOp)
    .SetShapeFn(MfccToMelGradShape)
    .Doc(
        "Gradient of Opforge>MfccToMel with respect to mfcc, from the upstream gradient grad and "
        "the forward's output mel ([..., n_mels, T]); mfcc gives the shape. Deterministic.");

namespace {

OPFORGE_REGISTER_KERNELS(Name(MfccToMelOp::kSignature.name), MfccToMelOp, OPFORGE_MFCC_TO_MEL_TYPES,
                         OPFORGE_MFCC_TO_MEL_TYPES)
OPFORGE_REGISTER_KERNELS(Name(MfccToMelGradOp::kSignature.name), MfccToMelGradOp,
                         OPFORGE_MFCC_TO_MEL_TYPES, OPFORGE_MFCC_TO_MEL_TYPES)

}  // namespace
}  // namespace opforge
