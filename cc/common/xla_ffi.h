// The XLA FFI skeleton of every op struct, and its registration line.
//
// XLA runs code it did not generate through typed-FFI custom calls: a handler, a plain C function
// over XLA's versioned C API (xla/ffi/api/c_api.h, the only XLA header here), receives a call
// frame holding the operands and results as buffers (element type, dims, data) and the custom
// call's attributes by name. FfiKernel<Op, T> runs an op struct (common/op_call.h, the one that
// TfKernel, OrtKernel and the LiteRT kernel run) from such a frame: it reads the attributes into
// Init, fills an OpCall from the operand buffers, lets the op validate and declare its outputs,
// checks them against the result buffers XLA allocated (their shapes were fixed at compile
// time), and runs the op's CPU path with Parallel over the FFI thread pool, denormals flushed as
// TensorFlow runs its kernels. Core errors come back as FFI errors with the core's message
// (INVALID_ARGUMENT), which XLA's host reports as its own error of that code.
//
// An op joins with one line in cc/ops/<op>/<op>_ffi.cc, naming a C identifier, the op struct and
// its element types:
//
//   OPFORGE_FFI_KERNELS(LeakyRelu, LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
//
// The custom-call target is the name in the op struct's signature (common/op_signature.h:
// TensorFlow's op name, "Opforge>LeakyRelu"), and every call frame is checked against that
// signature before the op struct sees it: as many operands as the op has inputs (a list input,
// "features: num_scales * T", as many as its int attr says), as many results as it has outputs,
// and each of the element type the signature gives it, so that a host that calls the handler
// wrongly (a hand-written jax.ffi call) gets an error naming the operand, never a kernel reading
// the wrong bytes.
//
// which defines the handler `OpforgeFfi_LeakyRelu` (extern "C", what a host registers: TensorFlow's
// XLA through common/tf_xla.h, JAX through jax.ffi.pycapsule) and lists it in the library's
// registry (OpforgeFfiTargets). The handler picks the element type from the attribute "T" (the
// element type's name, "float32"; TensorFlow's tf2xla kernel writes every attr of the node, type
// attrs as names). An op whose op struct reads the values of a small integer input
// (kValuesInput: an output shape) finds them in the attribute "opforge_values" (an i64 array)
// when the caller gives it, else in the operand's buffer (on the host). An op that reads other
// host-memory inputs in Validate (NMS's sizes and thresholds) reads them from their buffers, so
// its handler runs on the CPU ("Host") only, as its TensorFlow kernel does.
//
// On the CUDA platform (a CUDA build of the binding, where XLA:GPU runs the call; and the SIMT
// runtime's test of it, common/xla_ffi_gpu_test.cc: OPFORGE_FFI_GPU), OPFORGE_FFI_GPU_KERNELS
// defines a second handler, OpforgeFfiGpu_<ID>, that runs the op struct's Gpu path with XLA's
// stream (XLA_FFI_Stream_Get) and its scratch from XLA's device allocator
// (XLA_FFI_DeviceMemory_Allocate, freed when the handler returns: XLA's allocator reuses it only
// in the order of that stream, as TensorFlow's does). The operands are in device memory there, so
// a kValuesInput's values must come as the "opforge_values" attribute (TensorFlow's tf2xla kernel
// always writes it), and an op whose Validate reads other inputs' values has no GPU handler.
//
// Nothing here includes a framework's header: the handlers live in the TensorFlow binding (whose
// XLA registers them) and in libopforge_ffi.so, which any XLA host can load.
#ifndef OPFORGE_COMMON_XLA_FFI_H_
#define OPFORGE_COMMON_XLA_FFI_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/dtype.h"
#include "common/op_call.h"
#include "common/op_signature.h"
#include "xla/ffi/api/c_api.h"

namespace opforge {
namespace ffi {

// The attribute holding a kValuesInput's values (an i64 array), and the element type's name.
inline constexpr char kValuesAttr[] = "opforge_values";
inline constexpr char kTypeAttr[] = "T";

// An FFI error with `message` (null for OK: what a handler returns on success).
XLA_FFI_Error* MakeError(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                         const std::string& message);
XLA_FFI_Error* ToFfiError(const XLA_FFI_Api* api, const Status& status);
// An FFI error's message ("no message" without one); the error is destroyed.
std::string TakeMessage(const XLA_FFI_Api* api, XLA_FFI_Error* error);

// The XLA FFI element type of a DType (XLA_FFI_DataType_INVALID for none), and back.
XLA_FFI_DataType FfiType(DType dtype);
bool DTypeOfFfi(XLA_FFI_DataType type, DType* dtype);
// A DType by its name ("float32", "bfloat16": dtype.h's names); false if none has it.
bool DTypeByName(std::string_view name, DType* dtype);

// opforge::AttrSource over a call frame's attributes (sorted by name, as XLA guarantees).
class FfiAttrSource final : public AttrSource {
 public:
  FfiAttrSource(const XLA_FFI_Attrs& attrs, const char* target) : attrs_(attrs), target_(target) {}
  Status Get(std::string_view name, float* value) const override;
  Status Get(std::string_view name, int64_t* value) const override;
  Status Get(std::string_view name, bool* value) const override;
  Status Get(std::string_view name, std::string* value) const override;
  Status Get(std::string_view name, std::vector<int64_t>* value) const override;
  Status Get(std::string_view name, std::vector<float>* value) const override;

  // The attribute `name` of `type`, or null (and *status set) when absent or of another type.
  const void* Find(std::string_view name, XLA_FFI_AttrType type, const char* kind,
                   Status* status) const;
  bool Has(std::string_view name) const;

 private:
  const XLA_FFI_Attrs& attrs_;
  const char* target_;
};

// opforge::Parallel over the FFI thread pool of the call (XLA's intra-op pool; TensorFlow's
// when TensorFlow runs the computation): the range is cut into up to 4 chunks a pool thread (as
// Eigen's pool cuts TensorFlow's kernels), the calling thread and threads - 1 pool tasks claim
// them (the caller counts as a worker: the pool has a thread per core), and the caller sleeps
// until the chunks others claimed are done, so a pool with no free thread only makes the caller
// do all of them. Without a pool, or with a pool of one thread, everything runs on the caller.
class FfiParallel final : public Parallel {
 public:
  FfiParallel(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx) : api_(api), ctx_(ctx) {}
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override;

 private:
  const XLA_FFI_Api* api_;
  XLA_FFI_ExecutionContext* ctx_;
};

// Answers XLA's metadata query (the handler's API version; no traits, no state), when the call
// frame is one. Returns true with *error set (null for success) if it was.
bool AnswerMetadata(XLA_FFI_CallFrame* frame, XLA_FFI_Error** error);

// The input side of a call, after CheckFrame: shapes and data of every operand (data null for
// empty ones), the element type, and for an op with a values input its values (the attribute,
// else the buffer).
// On the device (`device`), the buffers are not readable here: a values input needs the attribute.
Status ReadOperands(const XLA_FFI_CallFrame& frame, const FfiAttrSource& attrs, DType dtype,
                    int values_input, const char* target, OpCall* call, bool device = false);
// Binds the result buffers to the outputs the op declared, checking their shapes against the
// declaration (the host fixed them at compile time from the same Validate). Results the op does
// not declare must be empty. Sets *any when some output is not empty.
Status BindResults(const XLA_FFI_CallFrame& frame, const char* target, OpCall* call, bool* any);

// What both platforms do before the kernel: Init from the attributes, the operands (on the
// device: `device`), Validate, the results bound. Returns a Status; *run is false when every
// output is empty (nothing to compute).
template <typename Op, typename T>
Status PrepareCall(const XLA_FFI_CallFrame& frame, const char* target, bool device, Op* op,
                   OpCall* call, typename Op::Params* params, bool* run) {
  FfiAttrSource source(frame.attrs, target);
  AttrReader reader(source);
  const Status init = op->Init(reader);
  OPFORGE_RETURN_IF_ERROR(reader.status());
  OPFORGE_RETURN_IF_ERROR(init);
  constexpr int kValuesInput = internal::ValuesInputOf<Op>::value;
  OPFORGE_RETURN_IF_ERROR(
      ReadOperands(frame, source, DTypeOf<T>::value, kValuesInput, target, call, device));
  OPFORGE_RETURN_IF_ERROR(op->Validate(*call, params));
  return BindResults(frame, target, call, run);
}

template <typename Op, typename T>
XLA_FFI_Error* ExecuteCpu(XLA_FFI_CallFrame* frame, const char* target) {
  Op op;
  OpCall call;
  typename Op::Params params;
  bool run = false;
  const Status s = PrepareCall<Op, T>(*frame, target, /*device=*/false, &op, &call, &params, &run);
  if (!s.ok() || !run) return ToFfiError(frame->api, s);
  const ScopedFlushDenormals flush;  // TensorFlow's bits (op_call.h)
  return ToFfiError(frame->api,
                    internal::RunCpu<T>(op, params, call, FfiParallel(frame->api, frame->ctx)));
}

// The stream of a call on the CUDA platform (a cudaStream_t), and device scratch memory from
// XLA's allocator, freed when the object goes.
Status FfiStream(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx, const char* target,
                 void** stream);
class FfiDeviceScratch {
 public:
  FfiDeviceScratch(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx) : api_(api), ctx_(ctx) {}
  ~FfiDeviceScratch();
  FfiDeviceScratch(const FfiDeviceScratch&) = delete;
  FfiDeviceScratch& operator=(const FfiDeviceScratch&) = delete;
  Status Allocate(size_t bytes, const char* target);
  void* data() const { return data_; }

 private:
  const XLA_FFI_Api* api_;
  XLA_FFI_ExecutionContext* ctx_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

template <typename Op, typename T>
XLA_FFI_Error* ExecuteGpu(XLA_FFI_CallFrame* frame, const char* target) {
  static_assert(internal::HasGpu<Op>::value, "OPFORGE_FFI_GPU_KERNELS of an op without Gpu");
  const XLA_FFI_Api* api = frame->api;
  Op op;
  OpCall call;
  typename Op::Params params;
  bool run = false;
  Status s = PrepareCall<Op, T>(*frame, target, /*device=*/true, &op, &call, &params, &run);
  if (!s.ok() || !run) return ToFfiError(api, s);
  void* stream = nullptr;
  s = FfiStream(api, frame->ctx, target, &stream);
  if (!s.ok()) return ToFfiError(api, s);
  FfiDeviceScratch scratch(api, frame->ctx);
  if constexpr (internal::HasGpuScratch<Op>::value) {
    const int64_t bytes = op.GpuScratchBytes(DTypeOf<T>::value, params);
    if (bytes > 0) {
      s = scratch.Allocate(static_cast<size_t>(bytes), target);
      if (!s.ok()) return ToFfiError(api, s);
      call.scratch = scratch.data();
      call.scratch_bytes = bytes;
    }
  }
  return ToFfiError(api, op.Gpu(DTypeOf<T>::value, params, call, stream));
}

// One element type's entry of a handler.
struct TypedExecute {
  DType dtype;
  XLA_FFI_Error* (*execute)(XLA_FFI_CallFrame* frame, const char* target);
};

// One op's handler: its signature, parsed once (at the handler's first call), and its element
// types.
struct Handler {
  Handler(const OpSignature& op, const TypedExecute* types, size_t count);
  const char* target;  // the signature's name
  Status status;       // the signature's parse
  signature::Parsed parsed;
  const TypedExecute* types;
  size_t count;
};

// The call frame against the signature: operand and result counts (lists by their int attrs)
// and element types, in a kernel of element type `t`.
Status CheckFrame(const XLA_FFI_CallFrame& frame, const FfiAttrSource& attrs,
                  const signature::Parsed& parsed, DType t);

// The body of every handler: the metadata query, the execution stage, the element type (the "T"
// attribute), the frame against the signature, then the element type's kernel.
XLA_FFI_Error* Dispatch(XLA_FFI_CallFrame* frame, const Handler& handler);

// What a host that must know a call's results before it runs (JAX traces a function into one
// computation with every shape fixed: opforge.jax) asks of an op struct: Init from `attrs`, then
// Validate on the input shapes in `call` (and the values of the inputs whose values the op reads,
// where the host has them), which declares the outputs. The same checks, so the same messages, as
// the handler's call.
using InferFn = Status (*)(const AttrSource& attrs, OpCall* call);
template <typename Op>
Status InferOutputs(const AttrSource& attrs, OpCall* call) {
  Op op;
  AttrReader reader(attrs);
  const Status init = op.Init(reader);
  OPFORGE_RETURN_IF_ERROR(reader.status());
  OPFORGE_RETURN_IF_ERROR(init);
  typename Op::Params params;
  return op.Validate(*call, &params);
}

// The library's handlers, for a host that enumerates them (OpforgeFfiTargets), with their output
// inference (OpforgeFfiInfer) and the op struct's kValuesInput (-1 for none).
struct Target {
  const char* name;
  const char* symbol;
  XLA_FFI_Handler* cpu;
  InferFn infer;
  int values_input;
  const OpSignature* signature;
};
bool Register(const Target& target);
const std::vector<Target>& Registry();

}  // namespace ffi
}  // namespace opforge

#define OPFORGE_FFI_TYPE_(T, OP) {::opforge::DTypeOf<T>::value, &::opforge::ffi::ExecuteCpu<OP, T>},
#define OPFORGE_FFI_GPU_TYPE_(T, OP) \
  {::opforge::DTypeOf<T>::value, &::opforge::ffi::ExecuteGpu<OP, T>},

// Defines the handler SYMBOL (extern "C") of op struct OP over the element types of TYPES, each
// run by EXECUTE (OPFORGE_FFI_TYPE_ or OPFORGE_FFI_GPU_TYPE_); its Handler is built on first use.
#define OPFORGE_FFI_HANDLER_(SYMBOL, OP, TYPES, EXECUTE)                                        \
  namespace {                                                                                   \
  const ::opforge::ffi::TypedExecute kTypes_##SYMBOL[] = {TYPES(EXECUTE, OP)};                  \
  const ::opforge::ffi::Handler& Handler_##SYMBOL() {                                           \
    static const ::opforge::ffi::Handler handler(                                               \
        OP::kSignature, kTypes_##SYMBOL, sizeof(kTypes_##SYMBOL) / sizeof(kTypes_##SYMBOL[0])); \
    return handler;                                                                             \
  }                                                                                             \
  }                                                                                             \
  extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* SYMBOL(                      \
      XLA_FFI_CallFrame* frame) {                                                               \
    return ::opforge::ffi::Dispatch(frame, Handler_##SYMBOL());                                 \
  }

// Defines the FFI handler OpforgeFfi_ID (target: OP's signature's name) of op struct OP over the
// element types of TYPES, and registers it in the library's registry.
#define OPFORGE_FFI_KERNELS(ID, OP, TYPES)                                                        \
  OPFORGE_FFI_HANDLER_(OpforgeFfi_##ID, OP, TYPES, OPFORGE_FFI_TYPE_)                             \
  namespace {                                                                                     \
  [[maybe_unused]] const bool kFfiRegistered_##ID =                                               \
      ::opforge::ffi::Register({OP::kSignature.name, "OpforgeFfi_" #ID, &OpforgeFfi_##ID,         \
                                &::opforge::ffi::InferOutputs<OP>,                                \
                                ::opforge::internal::ValuesInputOf<OP>::value, &OP::kSignature}); \
  }

// Defines OpforgeFfiGpu_ID, the CUDA platform's handler of op struct OP over the element types
// of GPU_TYPES (its TensorFlow GPU kernels' list), in a build that links the ops' CUDA kernels
// (GOOGLE_CUDA, or OPFORGE_FFI_GPU for the SIMT runtime's test); elsewhere nothing. tf_xla_ffi.h
// registers it for TensorFlow's XLA:GPU where it is defined.
#if GOOGLE_CUDA || OPFORGE_FFI_GPU
#define OPFORGE_FFI_GPU_KERNELS(ID, OP, GPU_TYPES) \
  OPFORGE_FFI_HANDLER_(OpforgeFfiGpu_##ID, OP, GPU_TYPES, OPFORGE_FFI_GPU_TYPE_)
#else
#define OPFORGE_FFI_GPU_KERNELS(ID, OP, GPU_TYPES)
#endif

#endif  // OPFORGE_COMMON_XLA_FFI_H_
