// The MfccToMel op structs, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_OP_H_
#define OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_OP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace mfcc_to_mel_op {

// The attrs, read by a shape function (InferenceContext) or a kernel (AttrReader) alike.
inline Status ReadAttrs(AttrReader* c, MfccToMelParams* p, Status* parsed) {
  std::string norm;
  float ref = 1.0f, lifter = 0.0f;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("n_mels", &p->n_mels));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("dct_type", &p->dct_type));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("norm", &norm));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("ref", &ref));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("lifter", &lifter));
  p->ref = FloatAttrAsWritten(ref);
  p->lifter = FloatAttrAsWritten(lifter);
  *parsed = ParseDctNorm(norm, &p->norm);
  return Status::Ok();
}

// The attrs alone: a one-coefficient, one-frame mfcc passes every shape check, so an error is
// about an attr (checked before any shape).
inline Status CheckAttrs(const MfccToMelParams& attrs, bool grad) {
  MfccToMelParams p = attrs;
  if (!grad) return ValidateMfccToMel({1, 1}, &p);
  const int64_t rows = attrs.n_mels > 0 ? attrs.n_mels : 1;
  return ValidateMfccToMelGrad({rows, 1}, {rows, 1}, {1, 1}, &p);
}

inline constexpr char kMfccToMel[] = "MfccToMel";
inline constexpr char kMfccToMelGrad[] = "MfccToMelGrad";

template <const char* kOp>
struct MfccToMelAttrs {
  // Both ops' attrs, for their signatures (common/op_signature.h).
  static constexpr char kAttrs[] =
      "T: {float, double}; n_mels: int = 128; dct_type: int = 2; norm: string = 'ortho'; "
      "ref: float = 1.0; lifter: float = 0";
  using Params = MfccToMelParams;
  MfccToMelParams attrs;

  Status Init(AttrReader& reader) {
    Status parsed;
    if (!ReadAttrs(&reader, &attrs, &parsed).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    OPFORGE_RETURN_IF_ERROR(parsed);
    return CheckAttrs(attrs, kOp == kMfccToMelGrad);
  }
};

struct MfccToMelOp : MfccToMelAttrs<kMfccToMel> {
  static constexpr OpSignature kSignature{"Opforge>MfccToMel", "mfcc: T", "mel: T", kAttrs};
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateMfccToMel(call.shape(0), p));
    std::vector<int64_t> out = call.shape(0);
    out[out.size() - 2] = p->n_mels;
    call.Output(0, out);
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    MfccToMelForward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }
#if GOOGLE_CUDA || OPFORGE_CUDA_SIM
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return MfccToMelForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }
#endif
};

struct MfccToMelGradOp : MfccToMelAttrs<kMfccToMelGrad> {
  static constexpr OpSignature kSignature{"Opforge>MfccToMelGrad", "grad: T; mel: T; mfcc: T",
                                          "grad_mfcc: T", kAttrs};
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateMfccToMelGrad(call.shape(0), call.shape(1), call.shape(2), p));
    call.Output(0, call.shape(2));
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    MfccToMelBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
#if GOOGLE_CUDA || OPFORGE_CUDA_SIM
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return MfccToMelBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
#endif
};

}  // namespace mfcc_to_mel_op

using mfcc_to_mel_op::MfccToMelAttrs;
using mfcc_to_mel_op::MfccToMelGradOp;
using mfcc_to_mel_op::MfccToMelOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_MFCC_TO_MEL_MFCC_TO_MEL_OP_H_
