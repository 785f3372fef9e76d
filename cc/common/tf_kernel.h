// The one Compute skeleton and the one registration macro of every TensorFlow binding.
//
// A binding (cc/ops/<op>/<op>_tf.cc) holds OPFORGE_REGISTER_OP (common/tf_glue.h: REGISTER_OP
// from the op struct's signature) with its shape function and a registration line per kernel;
// the kernel is a small op struct (cc/ops/<op>/<op>_op.h, no TensorFlow header, common/op_call.h:
// the same struct runs in ONNX Runtime, LiteRT and XLA) that says
// only what is particular to it; TfKernel<Op, Device, T> does the rest: it reads the inputs into
// an OpCall (shapes, data pointers), lets the op
// validate and declare its outputs, allocates them (forwarding an input's buffer where the op
// allows it), returns early when every output is empty, and calls the op's CPU or GPU path.
// Core errors become InvalidArgument (Internal for failed CUDA launches) with their messages.
//
//   struct LeakyReluOp {
//     static constexpr OpSignature kSignature{  // name, inputs, outputs, attrs (op_signature.h)
//         "Opforge>LeakyRelu", "features: T", "activations: T",
//         "alpha: float = 0.2; T: {half, bfloat16, float, double} = DT_FLOAT"};
//     using Params = LeakyReluParams;        // per-call parameters handed to Cpu/Gpu
//     LeakyReluParams attrs;                 // read once, when the kernel is constructed
//     Status Init(AttrReader& reader) {
//       reader.Read("alpha", &attrs.alpha);  // GetAttr errors are reported by TfKernel
//       return ValidateLeakyRelu(attrs);
//     }
//     Status Validate(OpCall& call, Params* params) const {  // per call; outputs in order
//       *params = attrs;
//       params->size = call.NumElements(0);
//       call.Output(0, call.shape(0), {0});  // may write into input 0's buffer
//       return Status::Ok();
//     }
//     template <typename T>
//     void Cpu(const Params& p, const OpCall& call, const Parallel& parallel) const {
//       LeakyReluForward<T>(p, call.in<T>(0), call.out<T>(0), nullptr, parallel);
//     }
//     Status Gpu(DType dtype, const Params& p, const OpCall& call, void* stream) const {
//       return LeakyReluForwardGpu(dtype, p, call.in(0), call.out(0), nullptr, stream);
//     }
//   };
//   OPFORGE_REGISTER_OP(LeakyReluOp).SetShapeFn(shape_inference::UnchangedShape);
//   OPFORGE_REGISTER_KERNELS(Name(LeakyReluOp::kSignature.name), LeakyReluOp,
//                            OPFORGE_FLOAT_TYPES, OPFORGE_FLOAT_TYPES)
//
// An op without a GPU kernel has no Gpu and registers OPFORGE_NO_TYPES as its GPU types (the
// GPU path of TfKernel is compiled only for the types registered on the GPU).
// Cpu returns void, or a Status where it checks input values (Validate sees shapes, and on a GPU
// the values are in device memory; the Gpu path checks them its own way).
// A GPU path that needs temporary device memory says how much with
//   int64_t GpuScratchBytes(DType dtype, const Params& p) const;
// TfKernel then allocates it from TensorFlow's allocator (ctx->allocate_temp: TensorFlow owns
// the GPU's memory, and an out-of-memory error stays ResourceExhausted) and hands it to Gpu as
// call.scratch, call.scratch_bytes. It is held until Compute returns; TensorFlow's GPU allocator
// reuses freed memory only in the order of the op's stream, so the kernels Gpu enqueued on that
// stream may still use it afterwards.
// Init runs once per kernel (an op without attrs returns Status::Ok()); Validate, Cpu and Gpu
// are const because one op object serves concurrent calls: per-call state goes in Params.
// An op that reads the values of a small integer input (a size, an output shape: registered
// with .HostMemory(...) so that they are on the host on a GPU too) names it with
// `static constexpr int kValuesInput = <index>;` and finds them in call.values.
#ifndef OPFORGE_COMMON_TF_KERNEL_H_
#define OPFORGE_COMMON_TF_KERNEL_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/op_call.h"
#include "common/tf_glue.h"
#include "common/tf_shape.h"
#if OPFORGE_CUDA_SIM && !GOOGLE_CUDA
#include <mutex>

#include "common/simt/simt_api.h"
#endif

namespace opforge {

// opforge's AttrSource (common/op_call.h) over TensorFlow's attrs: a kernel's
// OpKernelConstruction, or a shape function's InferenceContext (both have GetAttr).
template <typename Context>
class TfAttrSource final : public AttrSource {
 public:
  explicit TfAttrSource(Context* context) : context_(context) {}
  Status Get(std::string_view name, float* value) const override { return GetT(name, value); }
  Status Get(std::string_view name, int64_t* value) const override { return GetT(name, value); }
  Status Get(std::string_view name, bool* value) const override { return GetT(name, value); }
  Status Get(std::string_view name, std::string* value) const override { return GetT(name, value); }
  Status Get(std::string_view name, std::vector<int64_t>* value) const override {
    return GetT(name, value);
  }
  Status Get(std::string_view name, std::vector<float>* value) const override {
    return GetT(name, value);
  }

 private:
  template <typename V>
  Status GetT(std::string_view name, V* value) const {
    const absl::Status s = context_->GetAttr(absl::string_view(name.data(), name.size()), value);
    return s.ok() ? Status::Ok() : Status::Invalid(std::string(s.message()));
  }
  Context* context_;
};

// Runs an op's attr reader function (Status(AttrReader&)) in a shape function.
template <typename Read>
absl::Status ReadShapeAttrs(InferenceContext* c, Read&& read) {
  TfAttrSource<InferenceContext> source(c);
  AttrReader reader(source);
  const Status s = read(reader);
  return ToTfStatus(s.ok() ? reader.status() : s);
}

// Runs the attr reader of an op's <op>_op.h (Status ReadAttrs(AttrReader*, Out*...), which its
// kernels' Init call too) in a shape function, so that both read the attrs with the same code:
//   TF_RETURN_IF_ERROR(ReadShapeAttrs(c, ReadAttrs, &params, &parsed));
template <typename... Out>
absl::Status ReadShapeAttrs(InferenceContext* c, Status (*read)(AttrReader*, Out*...),
                            Out*... out) {
  return ReadShapeAttrs(c, [&](AttrReader& reader) { return read(&reader, out...); });
}

namespace internal {

#if OPFORGE_CUDA_SIM && !GOOGLE_CUDA
// One for the whole library (an inline function's static is one object across its files).
inline std::mutex& SimulatedKernelMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
#endif

}  // namespace internal

template <typename Op, typename Device, typename T>
class TfKernel final : public tensorflow::OpKernel {
 public:
  explicit TfKernel(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    TfAttrSource<tensorflow::OpKernelConstruction> source(context);
    AttrReader reader(source);
    const Status status = op_.Init(reader);
    OPFORGE_OP_REQUIRES_OK(context, reader.status());
    OPFORGE_OP_REQUIRES_OK(context, status);
  }

  void Compute(tensorflow::OpKernelContext* context) override {
    OpCall call;
    call.dtype = DTypeOf<T>::value;
    const int num_inputs = context->num_inputs();
    call.shapes.reserve(static_cast<size_t>(num_inputs));
    call.inputs.reserve(static_cast<size_t>(num_inputs));
    for (int i = 0; i < num_inputs; ++i) {
      const tensorflow::Tensor& input = context->input(i);
      call.shapes.push_back(Dims(input.shape()));
      call.inputs.push_back(input.NumElements() == 0 ? nullptr : input.data());
    }
    constexpr int kValuesInput = internal::ValuesInputOf<Op>::value;
    if constexpr (kValuesInput >= 0) call.values = IntValues(context->input(kValuesInput));

    typename Op::Params params;
    OPFORGE_OP_REQUIRES_OK(context, op_.Validate(call, &params));

    call.outputs.assign(static_cast<size_t>(context->num_outputs()), nullptr);
    call.output_bytes.assign(call.outputs.size(), 0);
    bool any = false;
    for (const OpCall::OutputSpec& spec : call.declared) {
      tensorflow::Tensor* output = nullptr;
      const tensorflow::TensorShape shape = ToTensorShape(spec.dims);
      if (spec.forward.empty()) {
        OP_REQUIRES_OK(context, context->allocate_output(spec.index, shape, &output));
      } else {
        OP_REQUIRES_OK(context, context->forward_input_or_allocate_output(spec.forward, spec.index,
                                                                          shape, &output));
      }
      if (output->NumElements() == 0) continue;
      call.outputs[static_cast<size_t>(spec.index)] = output->data();
      call.output_bytes[static_cast<size_t>(spec.index)] = output->TotalBytes();
      any = true;
    }
    if (!any) return;

    if constexpr (std::is_same_v<Device, CpuTag>) {
      OPFORGE_OP_REQUIRES_OK(context, internal::RunCpu<T>(op_, params, call, TfParallel(context)));
    } else {
#if GOOGLE_CUDA || OPFORGE_CUDA_SIM
      tensorflow::Tensor scratch;  // held until the kernels are enqueued (see the top)
      if constexpr (internal::HasGpuScratch<Op>::value) {
        const int64_t bytes = op_.GpuScratchBytes(DTypeOf<T>::value, params);
        if (bytes > 0) {
          OP_REQUIRES_OK(
              context, context->allocate_temp(tensorflow::DT_INT8, tensorflow::TensorShape({bytes}),
                                              &scratch));
          call.scratch = scratch.data();
          call.scratch_bytes = bytes;
        }
      }
      static_assert(internal::HasGpu<Op>::value,
                    "an op registered on the GPU needs a Gpu path; a CPU-only op registers "
                    "OPFORGE_NO_TYPES as its GPU types");
#if GOOGLE_CUDA
      OPFORGE_OP_REQUIRES_OK(context, op_.Gpu(DTypeOf<T>::value, params, call, GpuStream(context)));
#else
      OPFORGE_OP_REQUIRES_OK(context, RunSimulated(context, params, &call));
#endif
#endif
    }
  }

 private:
#if OPFORGE_CUDA_SIM && !GOOGLE_CUDA
  // The GPU path on the SIMT runtime (common/simt/), on the CPU device: the buffers TensorFlow
  // gave the call count as device memory while it runs (but the host-memory inputs), so the
  // runtime's checks of copies and its order check cover them; one simulated kernel at a time
  // in the library, whatever op (the order check restores and compares all device memory, and
  // TensorFlow runs independent ops at once).
  Status RunSimulated(tensorflow::OpKernelContext* context, const typename Op::Params& params,
                      OpCall* call) const {
    std::lock_guard<std::mutex> lock(internal::SimulatedKernelMutex());
    std::vector<const void*> adopted;
    auto adopt = [&](const void* p, size_t bytes) {
      if (p == nullptr || bytes == 0) return;
      simt::AdoptDeviceMemory(p, bytes);
      adopted.push_back(p);
    };
    for (int i = 0; i < context->num_inputs(); ++i) {
      if (context->input_memory_type(i) == tensorflow::HOST_MEMORY) continue;
      adopt(call->inputs[static_cast<size_t>(i)], context->input(i).TotalBytes());
    }
    for (size_t i = 0; i < call->outputs.size(); ++i)
      adopt(call->outputs[i], call->output_bytes[i]);
    adopt(call->scratch, static_cast<size_t>(call->scratch_bytes));
    const Status status = op_.Gpu(DTypeOf<T>::value, params, *call, nullptr);
    for (const void* p : adopted) simt::ReleaseDeviceMemory(p);
    return status;
  }
#endif
  Op op_;
};

}  // namespace opforge

// --- registration -----------------------------------------------------------------------------
//
// Dtype lists are X-macros (LIST(X, ...) expands X(T, ...) for each element type T): the shared
// ones are in common/dtype.h, an op-specific one in its header (if its CPU kernels are
// instantiated over it) or its _tf.cc.
#define OPFORGE_REGISTER_KERNEL_(T, DEVICE, TAG, BUILDER, OP)            \
  REGISTER_KERNEL_BUILDER(BUILDER.Device(DEVICE).TypeConstraint<T>("T"), \
                          ::opforge::TfKernel<OP, TAG, T>);

#if GOOGLE_CUDA
#define OPFORGE_IF_GPU_(...) __VA_ARGS__
#else
#define OPFORGE_IF_GPU_(...)
#endif

// Registers TfKernel<OP, Device, T> for BUILDER (which starts with Name(...), and may add
// .HostMemory(...)) on the CPU for each T of CPU_TYPES and, in a CUDA build, on the GPU for each
// T of GPU_TYPES.
//
// A cuda_sim build (OPFORGE_CUDA_SIM=1, the .cu files compiled for the SIMT runtime,
// common/simt/) registers the GPU kernels of GPU_TYPES on the CPU device too, under the kernel
// label "cuda_sim": a node whose _kernel attr is "cuda_sim" (opforge.cuda_sim selects it) runs
// the GPU path on the CPU. OPFORGE_CUDA_SIM_ONLY=1 registers those alone: a library loaded beside
// the one with the CPU kernels (a second unlabelled CPU kernel would make every call ambiguous).
#if OPFORGE_CUDA_SIM && !GOOGLE_CUDA
#define OPFORGE_REGISTER_SIM_KERNEL_(T, DEVICE, TAG, BUILDER, OP)                          \
  REGISTER_KERNEL_BUILDER(BUILDER.Device(DEVICE).TypeConstraint<T>("T").Label("cuda_sim"), \
                          ::opforge::TfKernel<OP, TAG, T>);
#define OPFORGE_IF_SIM_(...) __VA_ARGS__
#else
#define OPFORGE_IF_SIM_(...)
#endif
#if OPFORGE_CUDA_SIM_ONLY
#define OPFORGE_IF_CPU_(...)
#else
#define OPFORGE_IF_CPU_(...) __VA_ARGS__
#endif

#define OPFORGE_REGISTER_KERNELS(BUILDER, OP, CPU_TYPES, GPU_TYPES)                                \
  OPFORGE_IF_CPU_(CPU_TYPES(OPFORGE_REGISTER_KERNEL_, ::tensorflow::DEVICE_CPU, ::opforge::CpuTag, \
                            BUILDER, OP))                                                          \
  OPFORGE_IF_GPU_(GPU_TYPES(OPFORGE_REGISTER_KERNEL_, ::tensorflow::DEVICE_GPU, ::opforge::GpuTag, \
                            BUILDER, OP))                                                          \
  OPFORGE_IF_SIM_(GPU_TYPES(OPFORGE_REGISTER_SIM_KERNEL_, ::tensorflow::DEVICE_CPU,                \
                            ::opforge::GpuTag, BUILDER, OP))

#endif  // OPFORGE_COMMON_TF_KERNEL_H_
