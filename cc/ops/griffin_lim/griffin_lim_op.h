// The GriffinLim op struct, run by every runtime's skeleton (common/op_call.h): attrs,
// validation and outputs, and the core calls. No runtime's header.
#ifndef OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_OP_H_
#define OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_OP_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/op_call.h"
#include "ops/griffin_lim/griffin_lim.h"

namespace opforge {
namespace griffin_lim_op {

inline constexpr const char* kOp = "GriffinLim";

inline constexpr int64_t kFreshSeed = -1;

inline Status ReadAttrs(AttrReader* c, GriffinLimParams* p, Status* parsed) {
  std::string window, pad_mode, init;
  float momentum = 0;
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("n_iter", &p->n_iter));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("n_fft", &p->n_fft));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("hop_length", &p->hop_length));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("win_length", &p->win_length));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("window", &window));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("center", &p->center));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("pad_mode", &pad_mode));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("momentum", &momentum));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("length", &p->length));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("init", &init));
  OPFORGE_RETURN_IF_ERROR(c->GetAttr("seed", &p->seed));
  p->momentum = FloatAttrAsWritten(momentum);
  *parsed = ParseStftWindow(window, &p->window);
  if (parsed->ok()) *parsed = ParseStftPadMode(pad_mode, &p->pad_mode);
  if (parsed->ok()) *parsed = ParseGriffinLimInit(init, &p->init);
  if (parsed->ok() && p->seed != kFreshSeed && (p->seed < 0 || p->seed > int64_t{0xffffffff})) {
    *parsed =
        InvalidArgument(kOp, "seed", "-1 (a fresh seed per call) or in [0, 2^32 - 1]", p->seed);
  }
  return Status::Ok();
}

// The phases input when init is not "phases": an empty tensor (the wrapper passes a [0] one).
inline Status CheckUnusedPhases(const GriffinLimParams& p, int64_t phases_elements,
                                const std::string& phases_text) {
  if (p.init == GriffinLimInit::kPhases || phases_elements == 0) return Status::Ok();
  return InvalidArgument(kOp, "phases", "an empty tensor unless init is \"phases\"",
                         "shape " + phases_text);
}

struct GriffinLimOp {
  static constexpr OpSignature kSignature{"Opforge>GriffinLim", "magnitude: T; phases: T",
                                          "audio: T",
                                          "T: {float, double}; "
                                          "n_iter: int = 32; "
                                          "n_fft: int; "
                                          "hop_length: int = 0; "
                                          "win_length: int = 0; "
                                          "window: string = 'hann'; "
                                          "center: bool = true; "
                                          "pad_mode: string = 'constant'; "
                                          "momentum: float = 0.99; "
                                          "length: int = 0; "
                                          "init: string = 'random'; "
                                          "seed: int = -1"};
  using Params = GriffinLimParams;
  GriffinLimParams attrs;

  Status Init(AttrReader& reader) {
    Status parsed;
    if (!ReadAttrs(&reader, &attrs, &parsed).ok())
      return Status::Ok();  // reported by the runtime's skeleton
    return parsed;
  }
  Status Validate(OpCall& call, Params* p) const {
    *p = attrs;
    if (p->seed == kFreshSeed) {
      // A fresh seed per call, as librosa's random_state=None draws new phases on every call.
      std::random_device device;
      p->seed = static_cast<int64_t>(static_cast<uint32_t>(device()));
    }
    const bool given = p->init == GriffinLimInit::kPhases;
    OPFORGE_RETURN_IF_ERROR(CheckUnusedPhases(*p, call.NumElements(1), ShapeString(call.shape(1))));
    OPFORGE_RETURN_IF_ERROR(ValidateGriffinLim(call.shape(0), given ? &call.shape(1) : nullptr, p));
    std::vector<int64_t> out(call.shape(0).begin(), call.shape(0).end() - 2);
    out.push_back(p->out_length);
    call.Output(0, out);
    return Status::Ok();
  }
  // Checks that magnitudes and phases are finite (on the host here) before iterating.
  template <typename T>
  Status Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
    const bool given = p.init == GriffinLimInit::kPhases;
    return GriffinLimForward<T>(p, call.in<T>(0), given ? call.in<T>(1) : nullptr, call.out<T>(0),
                                parallel);
  }
#if GOOGLE_CUDA || OPFORGE_CUDA_SIM
  // Device scratch for the GPU iterations, from TensorFlow's allocator (TfKernel's allocate_temp).
  int64_t GpuScratchBytes(DType dtype, const Params& p) const {
    return GriffinLimGpuScratchBytes(p);
  }
  Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
    const bool given = p.init == GriffinLimInit::kPhases;
    return GriffinLimForwardGpu(dtype, p, call.in(0), given ? call.in(1) : nullptr, call.out(0),
                                call.scratch, call.scratch_bytes, stream);
  }
#endif
};

}  // namespace griffin_lim_op

using griffin_lim_op::GriffinLimOp;

}  // namespace opforge

#endif  // OPFORGE_OPS_GRIFFIN_LIM_GRIFFIN_LIM_OP_H_
