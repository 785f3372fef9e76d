// The one Compute skeleton and the one registration macro of every TensorFlow binding.
//
// A binding (cc/ops/<op>/<op>_tf.cc) holds REGISTER_OP with its shape function, and for each
// kernel a small op struct that says only what is particular to it; TfKernel<Op, Device, T>
// does the rest: it reads the inputs into a TfCall (shapes, data pointers), lets the op
// validate and declare its outputs, allocates them (forwarding an input's buffer where the op
// allows it), returns early when every output is empty, and calls the op's CPU or GPU path.
// Core errors become InvalidArgument (Internal for failed CUDA launches) with their messages.
//
//   struct LeakyReluOp {
//     using Params = LeakyReluParams;        // per-call parameters handed to Cpu/Gpu
//     LeakyReluParams attrs;                 // read once, when the kernel is constructed
//     Status Init(AttrReader& reader) {
//       reader.Read("alpha", &attrs.alpha);  // GetAttr errors are reported by TfKernel
//       return ValidateLeakyRelu(attrs);
//     }
//     Status Validate(TfCall& call, Params* params) const {  // per call; outputs in order
//       *params = attrs;
//       params->size = call.NumElements(0);
//       call.Output(0, call.shape(0), {0});  // may write into input 0's buffer
//       return Status::Ok();
//     }
//     template <typename T>
//     void Cpu(const Params& p, const TfCall& call, const Parallel& parallel) const {
//       LeakyReluForward<T>(p, call.in<T>(0), call.out<T>(0), nullptr, parallel);
//     }
//     Status Gpu(DType dtype, const Params& p, const TfCall& call, void* stream) const {
//       return LeakyReluForwardGpu(dtype, p, call.in(0), call.out(0), nullptr, stream);
//     }
//   };
//   OPFORGE_REGISTER_KERNELS(Name("Opforge>LeakyRelu"), LeakyReluOp, OPFORGE_FLOAT_TYPES,
//                            OPFORGE_FLOAT_TYPES)
//
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

#include "common/tf_glue.h"
#include "common/tf_shape.h"

namespace opforge {

// Reads a kernel's attrs at construction. GetAttr has OpKernelConstruction's signature (so an
// attr reader templated on the context, shared with a shape function, accepts it); the first
// error is kept and reported by TfKernel, so an op's Init may ignore it (Read).
class AttrReader {
 public:
  explicit AttrReader(tensorflow::OpKernelConstruction* context) : context_(context) {}

  template <typename V>
  absl::Status GetAttr(absl::string_view name, V* value) {
    absl::Status s = context_->GetAttr(name, value);
    if (status_.ok()) status_ = s;
    return s;
  }
  template <typename V>
  void Read(absl::string_view name, V* value) {
    GetAttr(name, value).IgnoreError();
  }
  const absl::Status& status() const { return status_; }

 private:
  tensorflow::OpKernelConstruction* context_;
  absl::Status status_;
};

// One call of a kernel, as the op struct sees it: its inputs, the outputs it declares, and
// after allocation their buffers. Data pointers are null for empty tensors.
class TfCall {
 public:
  struct OutputSpec {
    int index;
    std::vector<int64_t> dims;
    std::vector<int> forward;  // inputs whose buffer this output may take over
  };

  const std::vector<int64_t>& shape(int i) const { return shapes[static_cast<size_t>(i)]; }
  int64_t NumElements(int i) const {
    int64_t n = 1;
    for (int64_t d : shape(i)) n *= d;
    return n;
  }
  const void* in(int i) const { return inputs[static_cast<size_t>(i)]; }
  template <typename T>
  const T* in(int i) const {
    return static_cast<const T*>(in(i));
  }
  void* out(int i) const { return outputs[static_cast<size_t>(i)]; }
  template <typename T>
  T* out(int i) const {
    return static_cast<T*>(out(i));
  }
  size_t out_bytes(int i) const { return output_bytes[static_cast<size_t>(i)]; }

  // Declares output `index` with shape `dims`. Outputs are allocated in the order declared; one
  // with `forward` takes the buffer of the first of those inputs that has its shape and that
  // nobody else holds (the kernel then writes in place), else a fresh one.
  void Output(int index, std::vector<int64_t> dims, std::vector<int> forward = {}) {
    declared.push_back({index, std::move(dims), std::move(forward)});
  }

  std::vector<std::vector<int64_t>> shapes;  // of every input
  std::vector<int64_t> values;               // of the op's kValuesInput, if it has one
  // The kernel's element type T: for a Validate that reads the values of a host-memory input
  // (registered .HostMemory(...), so on the host on a GPU too) through an untyped pointer.
  DType dtype = DType::kFloat;
  std::vector<const void*> inputs;
  std::vector<OutputSpec> declared;
  std::vector<void*> outputs;  // indexed by output index
  std::vector<size_t> output_bytes;
  // Device scratch memory of a GPU path that asks for it (GpuScratchBytes), else null and 0.
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
};

namespace internal {

template <typename Op, typename = void>
struct ValuesInputOf {
  static constexpr int value = -1;
};
template <typename Op>
struct ValuesInputOf<Op, std::void_t<decltype(Op::kValuesInput)>> {
  static constexpr int value = Op::kValuesInput;
};

template <typename Op, typename = void>
struct HasGpuScratch : std::false_type {};
template <typename Op>
struct HasGpuScratch<Op, std::void_t<decltype(std::declval<const Op&>().GpuScratchBytes(
                             DType::kFloat, std::declval<const typename Op::Params&>()))>>
    : std::true_type {};

}  // namespace internal

template <typename Op, typename Device, typename T>
class TfKernel final : public tensorflow::OpKernel {
 public:
  explicit TfKernel(tensorflow::OpKernelConstruction* context) : OpKernel(context) {
    AttrReader reader(context);
    const Status status = op_.Init(reader);
    OP_REQUIRES_OK(context, reader.status());
    OPFORGE_OP_REQUIRES_OK(context, status);
  }

  void Compute(tensorflow::OpKernelContext* context) override {
    TfCall call;
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
    for (const TfCall::OutputSpec& spec : call.declared) {
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
      // An op whose CPU path checks input values (which Validate cannot read on a GPU) returns a
      // Status from Cpu; the others return void.
      using CpuResult = decltype(op_.template Cpu<T>(params, call, TfParallel(context)));
      if constexpr (std::is_same_v<CpuResult, Status>) {
        OPFORGE_OP_REQUIRES_OK(context, op_.template Cpu<T>(params, call, TfParallel(context)));
      } else {
        op_.template Cpu<T>(params, call, TfParallel(context));
      }
    } else {
#if GOOGLE_CUDA
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
      OPFORGE_OP_REQUIRES_OK(context, op_.Gpu(DTypeOf<T>::value, params, call, GpuStream(context)));
#endif
    }
  }

 private:
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
#define OPFORGE_REGISTER_KERNELS(BUILDER, OP, CPU_TYPES, GPU_TYPES)                                \
  CPU_TYPES(OPFORGE_REGISTER_KERNEL_, ::tensorflow::DEVICE_CPU, ::opforge::CpuTag, BUILDER, OP)    \
  OPFORGE_IF_GPU_(GPU_TYPES(OPFORGE_REGISTER_KERNEL_, ::tensorflow::DEVICE_GPU, ::opforge::GpuTag, \
                            BUILDER, OP))

#endif  // OPFORGE_COMMON_TF_KERNEL_H_
