// An op under TensorFlow's XLA (tf.function(jit_compile=True)) as a typed-FFI custom call to its
// op struct's handler: the registration line, in cc/ops/<op>/<op>_xla.cc (or a user's source).
//
//   OPFORGE_FFI_KERNELS(YoloDecode, YoloDecodeOp, OPFORGE_FLOAT_TYPES)         // in _ffi.cc
//   OPFORGE_REGISTER_XLA_FFI_OP(YoloDecode, YoloDecodeOp, "anchors")           // in _xla.cc
//
// names the handler's identifier (OpforgeFfi_<ID>, defined by OPFORGE_FFI_KERNELS,
// common/xla_ffi.h), the op struct (whose signature names the op, common/op_signature.h) and the
// inputs whose values the op struct reads (its
// host-memory inputs: sizes, thresholds, anchors), which must be compile-time constants under
// XLA. One tf2xla kernel serves every such op (common/tf_xla_ffi.cc): at compile time it runs the
// op struct's Init and Validate on the static shapes (and those constants), so bad input fails
// the compilation with the message the op gives outside XLA and the output shapes are the ones
// the op declares; it then emits
//   custom_call(target = the op's name, every input, attributes = the node's attrs)
// which XLA runs by calling the handler, registered with TensorFlow's XLA (platform "Host") when
// the library loads: the same core as TensorFlow's kernel, the same bits.
//
// This header is light (no tf2xla or XLA builder header): the per-op part is a small template
// over the op struct; the kernel, the attribute encoding and the registrations are compiled
// once, in common/tf_xla_ffi.cc, so a user's op with an XLA kernel compiles as fast as one
// without (opforge.build compiles that file once per configuration, beside its other helpers).
#ifndef OPFORGE_COMMON_TF_XLA_FFI_H_
#define OPFORGE_COMMON_TF_XLA_FFI_H_

#include <initializer_list>
#include <memory>

#include "common/op_call.h"
#include "common/xla_ffi.h"

namespace opforge {
namespace xla_glue {

// What the tf2xla kernel asks of an op struct at compile time.
class FfiShapeRunner {
 public:
  virtual ~FfiShapeRunner() = default;
  virtual Status Init(AttrReader& reader) = 0;
  virtual Status Validate(OpCall& call) = 0;
  // The op struct's kValuesInput (its values go to the handler as "opforge_values"), or -1.
  virtual int values_input() const = 0;
  virtual const OpSignature& signature() const = 0;
};

template <typename Op>
class FfiShapeRunnerOf final : public FfiShapeRunner {
 public:
  Status Init(AttrReader& reader) override { return op_.Init(reader); }
  Status Validate(OpCall& call) override {
    typename Op::Params params;
    return op_.Validate(call, &params);
  }
  int values_input() const override { return internal::ValuesInputOf<Op>::value; }
  const OpSignature& signature() const override { return Op::kSignature; }

 private:
  Op op_;
};

using MakeFfiShapeRunner = std::unique_ptr<FfiShapeRunner> (*)();

// Registers op `op` with TensorFlow's XLA as a custom call to `handler` (platform "Host"); if
// XLA takes the handler, also the tf2xla kernel that emits the call (else the op keeps
// opforge's "no XLA kernel" error). In a CUDA build, `gpu_handler` (null where the op has none)
// is registered for the "CUDA" platform and the tf2xla kernel for XLA_GPU_JIT too, where the
// only input whose values the op struct reads is its kValuesInput (those come as an attribute;
// an op that reads others', such as YoloDecode's anchors, stays on XLA:CPU). `constant_inputs`:
// the names of the inputs whose values the op struct reads. Returns whether the op now has an
// XLA kernel.
bool RegisterXlaFfiOp(const char* op, XLA_FFI_Handler* handler, XLA_FFI_Handler* gpu_handler,
                      MakeFfiShapeRunner make, std::initializer_list<const char*> constant_inputs);

}  // namespace xla_glue
}  // namespace opforge

#define OPFORGE_XLA_FFI_CONCAT_(a, b) a##b
#define OPFORGE_XLA_FFI_CONCAT(a, b) OPFORGE_XLA_FFI_CONCAT_(a, b)
// OpforgeFfiGpu_<ID> is weak: defined only where OPFORGE_FFI_GPU_KERNELS made it (a CUDA build
// of an op with GPU kernels), else null.
#define OPFORGE_REGISTER_XLA_FFI_OP(ID, OPSTRUCT, ...)                                     \
  extern "C" XLA_FFI_Error* OpforgeFfi_##ID(XLA_FFI_CallFrame* frame);                     \
  extern "C" __attribute__((weak, visibility("hidden")))                                   \
  XLA_FFI_Error* OpforgeFfiGpu_##ID(XLA_FFI_CallFrame* frame);                             \
  [[maybe_unused]] static const bool OPFORGE_XLA_FFI_CONCAT(opforge_xla_ffi_registration_, \
                                                            __COUNTER__) =                 \
      ::opforge::xla_glue::RegisterXlaFfiOp(                                               \
          OPSTRUCT::kSignature.name, &OpforgeFfi_##ID, &OpforgeFfiGpu_##ID,                \
          []() -> std::unique_ptr<::opforge::xla_glue::FfiShapeRunner> {                   \
            return std::make_unique<::opforge::xla_glue::FfiShapeRunnerOf<OPSTRUCT>>();    \
          },                                                                               \
          {__VA_ARGS__});

#endif  // OPFORGE_COMMON_TF_XLA_FFI_H_
