// The MelToStft op struct, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_OP_H_
#define OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/mel_to_stft/mel_to_stft.h"

namespace opforge {
namespace mel_to_stft_op {

inline constexpr const char* kOp = "MelToStft";

inline Status ReadAttrs(AttrReader* c, MelToStftParams* p, Status* parsed) {
  float sr = 0, power = 0, fmin = 0, fmax = 0;
  std::string norm;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("sr", &sr));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("n_fft", &p->filters.n_fft));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("power", &power));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("fmin", &fmin));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("fmax", &fmax));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("htk", &p->filters.htk));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("norm", &norm));
  p->filters.sr = FloatAttrAsWritten(sr);
  p->power = FloatAttrAsWritten(power);
  p->filters.fmin = FloatAttrAsWritten(fmin);
  p->filters.fmax = FloatAttrAsWritten(fmax);
  *parsed = ParseMelNorm(kOp, norm, &p->filters.norm);
  return Status::Ok();
}

// The attrs alone: one Mel band and one frame pass every shape check.
inline Status CheckAttrs(const MelToStftParams& attrs) {
  MelToStftParams p = attrs;
  return ValidateMelToStft({1, 1}, &p);
}

struct MelToStftOp {
  static constexpr OpSignature kSignature{"Opforge>MelToStft", "mel: T; filters: T", "stft: T",
                                          "T: {float, double}; "
                                          "sr: float = 22050; "
                                          "n_fft: int = 2048; "
                                          "power: float = 2.0; "
                                          "fmin: float = 0; "
                                          "fmax: float = -1; "
                                          "htk: bool = false; "
                                          "norm: string = 'slaney'"};
  using Params = MelToStftParams;
  MelToStftParams attrs;

  Status Init(AttrReader& reader) {
    Status parsed;
    if (!ReadAttrs(&reader, &attrs, &parsed).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    OPFORGE_RETURN_IF_ERROR(parsed);
    return CheckAttrs(attrs);
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateMelToStft(call.shape(0), call.shape(1), p));
    std::vector<int64_t> out = call.shape(0);
    out[out.size() - 2] = p->n_freq;
    call.Output(0, out);
    return Status::Ok();
  }
  // Checks a given bank's values and the Mel values (both on the host here) before solving.
  template <typename T>
  Status Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    return MelToStftForward<T>(p, call.in<T>(0), p.given_filters ? call.in<T>(1) : nullptr,
                               call.out<T>(0), parallel);
  }
#if GOOGLE_CUDA || OPFORGE_CUDA_SIM
  // Device scratch for the GPU solver, from TensorFlow's allocator (TfKernel's allocate_temp).
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return MelToStftGpuScratchBytes(p);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return MelToStftForwardGpu(dtype, p, call.in(0), p.given_filters ? call.in(1) : nullptr,
                               call.out(0), call.scratch, call.scratch_bytes, stream);
  }
#endif
};

}  // namespace mel_to_stft_op

using mel_to_stft_op::MelToStftOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_MEL_TO_STFT_MEL_TO_STFT_OP_H_
