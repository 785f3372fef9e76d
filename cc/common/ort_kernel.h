// The ONNX Runtime skeleton of every op struct, and its registration line.
//
// libopforge_ort.so is an ONNX Runtime custom-op library (SessionOptions.
// register_custom_ops_library): its one entry point, RegisterCustomOps (common/ort_kernel.cc),
// adds domain "opforge" (OPFORGE_ORT_DOMAIN: a user's library built by opforge.build has its own)
// with every op registered here. An op joins it with one line in cc/ops/<op>/<op>_ort.cc, naming
// a C identifier unique in the file, the op struct of cc/ops/<op>/<op>_op.h (the one TensorFlow
// runs) and its element types:
//
//   OPFORGE_ORT_KERNELS(LeakyRelu, LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
//
// The ONNX op type (TensorFlow's op name after "Opforge>") and each input's and output's element
// type come from the op struct's signature (common/op_signature.h): "T" is the kernel's element
// type, "U" float (double when T is double), an int32/int64 type attr either width, a dtype name
// that type; an input list repeated by an int attr ("y_true: num_scales * T") is ONNX's variadic
// tail (at least one). OrtKernel<Op, T> then does what TfKernel does: reads the node's
// attributes into Init once per kernel (an ONNX int is a TensorFlow int or bool), fills an OpCall
// from ONNX Runtime's tensors, lets the op validate and declare its outputs, allocates them and
// runs its CPU path on ONNX Runtime's intra-op thread pool (KernelContext_ParallelFor). Core errors
// come back as ONNX Runtime errors carrying the core's message (ORT_INVALID_ARGUMENT); nothing
// crosses the library boundary but the C API. A signature ONNX cannot express fails
// RegisterCustomOps with a message naming the op.
//
// ONNX has no variadic input in the middle: an op whose TensorFlow inputs have lists before fixed
// inputs (YoloPostprocess: num_scales features, num_scales anchors, then five scalars) takes its
// fixed inputs first in ONNX (the exporter writes them so), then the lists' tensors, list after
// list; the lists must then share their length attr and element type.
#ifndef OPFORGE_COMMON_ORT_KERNEL_H_
#define OPFORGE_COMMON_ORT_KERNEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/op_call.h"
#include "onnxruntime_c_api.h"

namespace opforge {
namespace ort {

// One input or output of a signature: a fixed element type, or the kernel's T (kT), or int32 /
// int64 (kAnyInt).
constexpr int kT = -1;
constexpr int kAnyInt = -2;
constexpr int kU = -3;  // a parameter type: float, or double when T is double (batch norm's U)

struct Signature {
  std::vector<int> inputs, outputs;  // ONNX order: ONNXTensorElementDataType, kT, kU or kAnyInt
  bool variadic_input = false;       // the last input repeats (at least once)
  bool variadic_output = false;
  // TensorFlow's inputs, when ONNX takes them in another order (fixed ones first); else empty.
  std::vector<signature::Arg> reordered_inputs;
};
// ONNX's view of an op signature: its op type and its Signature, or an error where ONNX cannot
// express it.
Status OnnxSignature(const OpSignature& op, std::string* op_type, Signature* out);
// For each ONNX input of n, the TensorFlow input the op struct reads it as (-1 where n does not
// fit the signature).
std::vector<int> TfInputOrder(const Signature& sig, int n);

// The kernel objects ONNX Runtime creates and destroys through the C API.
class KernelBase {
 public:
  virtual ~KernelBase() = default;
  virtual OrtStatus* Compute(OrtKernelContext* context) = 0;
};

// One registered (op type, element type): ONNX Runtime's OrtCustomOp, first, so that the C
// callbacks can get back to it.
struct Entry {
  OrtCustomOp op{};
  std::string name;
  int element_type = 0;  // T's ONNXTensorElementDataType
  Signature signature;
  std::string error;  // the signature's, reported by RegisterCustomOps
  // Creates the kernel: reads the attributes, runs Init. Sets *error on failure.
  std::unique_ptr<KernelBase> (*create)(const Entry& entry, const OrtApi* api,
                                        const OrtKernelInfo* info, OrtStatus** error) = nullptr;
};

// Adds an entry to the registry (static initialisation of the *_ort.cc files).
bool Register(std::unique_ptr<Entry> entry);
const std::vector<std::unique_ptr<Entry>>& Registry();

// ONNX's element type of a DType (ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED for none) and the
// size of an ONNX element type in bytes.
int OnnxType(DType dtype);
size_t OnnxTypeBytes(int onnx_type);

// opforge::AttrSource over a node's attributes.
class OrtAttrSource final : public AttrSource {
 public:
  OrtAttrSource(const OrtApi* api, const OrtKernelInfo* info, std::string op)
      : api_(api), info_(info), op_(std::move(op)) {}
  Status Get(std::string_view name, float* value) const override;
  Status Get(std::string_view name, int64_t* value) const override;
  Status Get(std::string_view name, bool* value) const override;
  Status Get(std::string_view name, std::string* value) const override;
  Status Get(std::string_view name, std::vector<int64_t>* value) const override;
  Status Get(std::string_view name, std::vector<float>* value) const override;

 private:
  Status Failed(std::string_view name, OrtStatus* status, const char* kind) const;
  const OrtApi* api_;
  const OrtKernelInfo* info_;
  std::string op_;
};

// opforge::Parallel over ONNX Runtime's intra-op thread pool.
class OrtParallel final : public Parallel {
 public:
  OrtParallel(const OrtApi* api, const OrtKernelContext* context) : api_(api), context_(context) {}
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override;

 private:
  const OrtApi* api_;
  const OrtKernelContext* context_;
};

OrtStatus* ToOrtStatus(const OrtApi* api, const Status& status);

// The input side of a call: shapes and data of every input, in the op struct's (TensorFlow's)
// order, after checking the element types against the signature. Returns null or an error.
OrtStatus* ReadInputs(const OrtApi* api, OrtKernelContext* context, const Entry& entry,
                      int values_input, OpCall* call);
// Allocates the outputs the op declared (and empty ones for those it did not).
OrtStatus* AllocateOutputs(const OrtApi* api, OrtKernelContext* context, const Entry& entry,
                           OpCall* call, bool* any);

template <typename Op, typename T>
class OrtKernel final : public KernelBase {
 public:
  static std::unique_ptr<KernelBase> Create(const Entry& entry, const OrtApi* api,
                                            const OrtKernelInfo* info, OrtStatus** error) {
    auto kernel = std::make_unique<OrtKernel>(entry, api);
    OrtAttrSource source(api, info, entry.name);
    AttrReader reader(source);
    const Status status = kernel->op_.Init(reader);
    const Status& first = reader.status().ok() ? status : reader.status();
    if (!first.ok()) {
      *error = ToOrtStatus(api, first);
      return nullptr;
    }
    return kernel;
  }

  OrtKernel(const Entry& entry, const OrtApi* api) : entry_(entry), api_(api) {}

  OrtStatus* Compute(OrtKernelContext* context) override {
    OpCall call;
    call.dtype = DTypeOf<T>::value;
    constexpr int kValuesInput = internal::ValuesInputOf<Op>::value;
    if (OrtStatus* s = ReadInputs(api_, context, entry_, kValuesInput, &call)) return s;
    typename Op::Params params;
    const Status valid = op_.Validate(call, &params);
    if (!valid.ok()) return ToOrtStatus(api_, valid);
    bool any = false;
    if (OrtStatus* s = AllocateOutputs(api_, context, entry_, &call, &any)) return s;
    if (!any) return nullptr;
    const ScopedFlushDenormals flush;  // as TensorFlow runs its kernels (op_call.h)
    return ToOrtStatus(api_, internal::RunCpu<T>(op_, params, call, OrtParallel(api_, context)));
  }

 private:
  const Entry& entry_;
  const OrtApi* api_;
  Op op_;
};

template <typename Op, typename T>
bool RegisterKernel() {
  auto entry = std::make_unique<Entry>();
  entry->element_type = OnnxType(DTypeOf<T>::value);
  const Status status = OnnxSignature(Op::kSignature, &entry->name, &entry->signature);
  if (!status.ok()) entry->error = status.message();
  entry->create = &OrtKernel<Op, T>::Create;
  return Register(std::move(entry));
}

}  // namespace ort
}  // namespace opforge

#define OPFORGE_ORT_KERNEL_(T, OP) ::opforge::ort::RegisterKernel<OP, T>(),

// Registers OrtKernel<OP, T> (domain OPFORGE_ORT_DOMAIN, the op type of OP's signature) for each T
// of TYPES; ID is a C identifier unique in the file.
#define OPFORGE_ORT_KERNELS(ID, OP, TYPES)                                                    \
  namespace {                                                                                 \
  [[maybe_unused]] const bool kOrtRegistered_##ID[] = {TYPES(OPFORGE_ORT_KERNEL_, OP) false}; \
  }

#endif  // OPFORGE_COMMON_ORT_KERNEL_H_
