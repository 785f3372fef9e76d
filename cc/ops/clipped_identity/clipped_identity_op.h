// The ClippedIdentity op structs, run by every runtime's skeleton (common/op_call.h).
#ifndef OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_OP_H_
#define OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_OP_H_

#include "common/op_call.h"
#include "ops/clipped_identity/clipped_identity.h"

namespace opforge {

// The attrs of both kernels, validated once when the kernel is built.
struct ClippedIdentityAttrs {
  // Both ops' attrs, for their signatures (common/op_signature.h).
  static constexpr char kAttrs[] =
      "clip_min: float = -1.0; clip_max: float = 1.0; leak: float = 0.01; "
      "T: {half, bfloat16, float, double} = DT_FLOAT";
  using Params = ClippedIdentityParams;
  ClippedIdentityParams attrs;

  Status Init(AttrReader& reader) {
    reader.Read("clip_min", &attrs.clip_min);
    reader.Read("clip_max", &attrs.clip_max);
    reader.Read("leak", &attrs.leak);
    return ValidateClippedIdentity(attrs);
  }
};

struct ClippedIdentityOp : ClippedIdentityAttrs {
  static constexpr OpSignature kSignature{"Opforge>ClippedIdentity", "x: T", "y: T", kAttrs};
  Status Validate(OpCall& call, Params* params) const {
    *params = attrs;
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    ClippedIdentityForward<T>(p, call.in<T>(0), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return ClippedIdentityForwardGpu(dtype, p, call.in(0), call.out(0), stream);
  }
};

struct ClippedIdentityGradOp : ClippedIdentityAttrs {
  static constexpr OpSignature kSignature{"Opforge>ClippedIdentityGrad",
                                          "gradients: T; features: T", "backprops: T", kAttrs};
  Status Validate(OpCall& call, Params* params) const {
    *params = attrs;
    OPFORGE_RETURN_IF_ERROR(ValidateClippedIdentityGrad(*params, call.shape(0), call.shape(1)));
    params->size = call.NumElements(0);
    call.Output(0, call.shape(0), {0, 1});
    return Status::Ok();
  }
  template <typename T>
  void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    ClippedIdentityBackward<T>(p, call.in<T>(0), call.in<T>(1), call.out<T>(0), parallel);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    return ClippedIdentityBackwardGpu(dtype, p, call.in(0), call.in(1), call.out(0), stream);
  }
};

}  // namespace opforge

#endif  // OPFORGE_OPS_CLIPPED_IDENTITY_CLIPPED_IDENTITY_OP_H_
