// ONNX Runtime's side of the op structs (common/ort_kernel.h): the registry, the C callbacks of
// OrtCustomOp, attributes, tensors, the thread pool, and the library's entry points.
#include "common/ort_kernel.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#define OPFORGE_ORT_EXPORT extern "C" __attribute__((visibility("default")))

// The ONNX domain of the library's ops: "opforge" for opforge's own library; a user's library
// (opforge.build with ort_sources) is compiled with its own (-DOPFORGE_ORT_DOMAIN="custom"), so
// both can be registered in one session.
#ifndef OPFORGE_ORT_DOMAIN
#define OPFORGE_ORT_DOMAIN "opforge"
#endif

namespace opforge {
namespace ort {
namespace {

std::vector<std::unique_ptr<Entry>>& MutableRegistry() {
  static auto* registry = new std::vector<std::unique_ptr<Entry>>();
  return *registry;
}

const Entry& EntryOf(const OrtCustomOp* op) { return *reinterpret_cast<const Entry*>(op); }

int Resolve(const Entry& e, int type) {
  if (type == kT) return e.element_type;
  if (type == kU) {
    return e.element_type == ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
               ? ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
               : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  return type;
}

const char* OnnxTypeName(int type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
      return "float32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
      return "float64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
      return "float16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
      return "bfloat16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
      return "int8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
      return "uint8";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
      return "int16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
      return "uint16";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
      return "int32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
      return "uint32";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
      return "int64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
      return "uint64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64:
      return "complex64";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128:
      return "complex128";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
      return "bool";
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING:
      return "string";
    default:
      return "another type";
  }
}

// --- OrtCustomOp callbacks ------------------------------------------------------------------

const char* ORT_API_CALL GetName(const OrtCustomOp* op) { return EntryOf(op).name.c_str(); }
const char* ORT_API_CALL GetExecutionProviderType(const OrtCustomOp*) {
  return "CPUExecutionProvider";
}
size_t ORT_API_CALL GetInputTypeCount(const OrtCustomOp* op) {
  return EntryOf(op).signature.inputs.size();
}
size_t ORT_API_CALL GetOutputTypeCount(const OrtCustomOp* op) {
  return EntryOf(op).signature.outputs.size();
}
ONNXTensorElementDataType ORT_API_CALL GetInputType(const OrtCustomOp* op, size_t i) {
  const Entry& e = EntryOf(op);
  const int t = e.signature.inputs[i];
  // int32 or int64: any type here (ONNX Runtime then matches any), checked at run time.
  if (t == kAnyInt) return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
  return static_cast<ONNXTensorElementDataType>(Resolve(e, t));
}
ONNXTensorElementDataType ORT_API_CALL GetOutputType(const OrtCustomOp* op, size_t i) {
  const Entry& e = EntryOf(op);
  return static_cast<ONNXTensorElementDataType>(Resolve(e, e.signature.outputs[i]));
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL GetInputCharacteristic(const OrtCustomOp* op,
                                                                         size_t i) {
  const Signature& s = EntryOf(op).signature;
  return s.variadic_input && i + 1 == s.inputs.size() ? INPUT_OUTPUT_VARIADIC
                                                      : INPUT_OUTPUT_REQUIRED;
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL GetOutputCharacteristic(const OrtCustomOp* op,
                                                                          size_t i) {
  const Signature& s = EntryOf(op).signature;
  return s.variadic_output && i + 1 == s.outputs.size() ? INPUT_OUTPUT_VARIADIC
                                                        : INPUT_OUTPUT_REQUIRED;
}
OrtMemType ORT_API_CALL GetInputMemoryType(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
int ORT_API_CALL GetVariadicMinArity(const OrtCustomOp*) { return 1; }
int ORT_API_CALL GetVariadicHomogeneity(const OrtCustomOp*) { return 1; }
int ORT_API_CALL GetStartVersion(const OrtCustomOp*) { return 1; }
int ORT_API_CALL GetEndVersion(const OrtCustomOp*) { return 1; }

// The OrtApi of the runtime that loaded the library (set by RegisterCustomOps).
const OrtApi* g_api = nullptr;

OrtStatusPtr ORT_API_CALL CreateKernelV2(const OrtCustomOp* op, const OrtApi* api,
                                         const OrtKernelInfo* info, void** kernel) {
  try {
    OrtStatus* error = nullptr;
    std::unique_ptr<KernelBase> k = EntryOf(op).create(EntryOf(op), api, info, &error);
    if (!k) return error;
    *kernel = k.release();
    return nullptr;
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_RUNTIME_EXCEPTION, e.what());
  }
}

OrtStatusPtr ORT_API_CALL KernelComputeV2(void* kernel, OrtKernelContext* context) {
  try {
    return static_cast<KernelBase*>(kernel)->Compute(context);
  } catch (const std::exception& e) {
    return g_api->CreateStatus(ORT_RUNTIME_EXCEPTION, e.what());
  }
}

void ORT_API_CALL KernelDestroy(void* kernel) { delete static_cast<KernelBase*>(kernel); }

void Fill(Entry* e) {
  OrtCustomOp& op = e->op;
  op.version = ORT_API_VERSION;
  op.GetName = GetName;
  op.GetExecutionProviderType = GetExecutionProviderType;
  op.GetInputType = GetInputType;
  op.GetInputTypeCount = GetInputTypeCount;
  op.GetOutputType = GetOutputType;
  op.GetOutputTypeCount = GetOutputTypeCount;
  op.GetInputCharacteristic = GetInputCharacteristic;
  op.GetOutputCharacteristic = GetOutputCharacteristic;
  op.GetInputMemoryType = GetInputMemoryType;
  op.GetVariadicInputMinArity = GetVariadicMinArity;
  op.GetVariadicInputHomogeneity = GetVariadicHomogeneity;
  op.GetVariadicOutputMinArity = GetVariadicMinArity;
  op.GetVariadicOutputHomogeneity = GetVariadicHomogeneity;
  op.CreateKernelV2 = CreateKernelV2;
  op.KernelComputeV2 = KernelComputeV2;
  op.KernelDestroy = KernelDestroy;
  op.GetStartVersion = GetStartVersion;
  op.GetEndVersion = GetEndVersion;
}

std::string NodeName(const OrtApi* api, const OrtKernelInfo* info) {
  size_t size = 0;
  if (OrtStatus* s = api->KernelInfo_GetNodeName(info, nullptr, &size)) {
    api->ReleaseStatus(s);
    return "";
  }
  std::string name(size, '\0');
  if (OrtStatus* s = api->KernelInfo_GetNodeName(info, name.data(), &size)) {
    api->ReleaseStatus(s);
    return "";
  }
  if (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

}  // namespace

namespace {

int OnnxTypeOfArg(const signature::Arg& arg) {
  switch (arg.rule) {
    case signature::TypeRule::kT:
      return kT;
    case signature::TypeRule::kU:
      return kU;
    case signature::TypeRule::kAnyInt:
      return kAnyInt;
    case signature::TypeRule::kFixed:
      break;
  }
  return OnnxType(arg.fixed);
}

// The ONNX types of args, lists last; *variadic when there is a list. Fails for lists of
// different element types or lengths (ONNX has one variadic tail).
Status OnnxList(const signature::Parsed& parsed, const std::vector<signature::Arg>& args,
                const char* kind, std::vector<int>* types, bool* variadic) {
  const signature::Arg* list = nullptr;
  for (const signature::Arg& a : args) {
    if (a.number_attr.empty()) {
      types->push_back(OnnxTypeOfArg(a));
    } else if (list == nullptr) {
      list = &a;
    } else if (a.number_attr != list->number_attr || a.type != list->type) {
      return Status::Invalid(parsed.name + ": ONNX has one variadic " + kind + " tail; the " +
                             kind + " lists " + list->name + " and " + a.name +
                             " differ in their length or element type");
    }
  }
  if (list != nullptr) {
    types->push_back(OnnxTypeOfArg(*list));
    *variadic = true;
  }
  return Status::Ok();
}

bool ListBeforeFixed(const std::vector<signature::Arg>& args) {
  bool list = false;
  for (const signature::Arg& a : args) {
    if (!a.number_attr.empty()) {
      list = true;
    } else if (list) {
      return true;
    }
  }
  return false;
}

}  // namespace

Status OnnxSignature(const OpSignature& op, std::string* op_type, Signature* out) {
  *out = Signature();
  signature::Parsed parsed;
  OPFORGE_RETURN_IF_ERROR(signature::Parse(op, &parsed));
  *op_type = parsed.op_type;
  OPFORGE_RETURN_IF_ERROR(
      OnnxList(parsed, parsed.inputs, "input", &out->inputs, &out->variadic_input));
  OPFORGE_RETURN_IF_ERROR(
      OnnxList(parsed, parsed.outputs, "output", &out->outputs, &out->variadic_output));
  if (ListBeforeFixed(parsed.outputs)) {
    return Status::Invalid(parsed.name + ": an output list before a fixed output has no ONNX form");
  }
  if (ListBeforeFixed(parsed.inputs)) out->reordered_inputs = parsed.inputs;
  return Status::Ok();
}

std::vector<int> TfInputOrder(const Signature& sig, int n) {
  const std::vector<signature::Arg>& args = sig.reordered_inputs;
  std::vector<int> order(static_cast<size_t>(n > 0 ? n : 0), -1);
  if (args.empty()) {
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    return order;
  }
  int fixed = 0, lists = 0;
  for (const signature::Arg& a : args) (a.number_attr.empty() ? fixed : lists) += 1;
  const int length = lists > 0 ? (n - fixed) / lists : 0;
  if (length < 1 || fixed + lists * length != n) return order;  // -1: the adapter reports it
  int tf = 0, fixed_seen = 0, lists_seen = 0;
  for (const signature::Arg& a : args) {
    if (a.number_attr.empty()) {
      order[static_cast<size_t>(fixed_seen++)] = tf++;
    } else {
      for (int e = 0; e < length; ++e) {
        order[static_cast<size_t>(fixed + lists_seen * length + e)] = tf++;
      }
      ++lists_seen;
    }
  }
  return order;
}

bool Register(std::unique_ptr<Entry> entry) {
  Fill(entry.get());
  MutableRegistry().push_back(std::move(entry));
  return true;
}

const std::vector<std::unique_ptr<Entry>>& Registry() { return MutableRegistry(); }

int OnnxType(DType dtype) {
  switch (dtype) {
    case DType::kHalf:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
    case DType::kBFloat16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
    case DType::kFloat:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    case DType::kDouble:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE;
    case DType::kInt32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
    case DType::kInt64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    case DType::kInt8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
    case DType::kUInt8:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
    case DType::kInt16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16;
    case DType::kUInt16:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16;
    case DType::kUInt32:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32;
    case DType::kUInt64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64;
    case DType::kComplex64:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64;
    case DType::kComplex128:
      return ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128;
  }
  return ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
}

size_t OnnxTypeBytes(int type) {
  switch (type) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
      return 1;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
      return 2;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
      return 4;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64:
      return 8;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

OrtStatus* ToOrtStatus(const OrtApi* api, const Status& status) {
  if (status.ok()) return nullptr;
  return api->CreateStatus(
      status.code() == Status::Code::kInternal ? ORT_RUNTIME_EXCEPTION : ORT_INVALID_ARGUMENT,
      status.message().c_str());
}

// --- attributes -------------------------------------------------------------------------------

Status OrtAttrSource::Failed(std::string_view name, OrtStatus* status, const char* kind) const {
  std::string why = api_->GetErrorMessage(status);
  api_->ReleaseStatus(status);
  std::string node = NodeName(api_, info_);
  return Status::Invalid(op_ + (node.empty() ? "" : " (node '" + node + "')") + ": attribute '" +
                         std::string(name) + "' (" + kind +
                         ") is missing or of another type: " + why);
}

Status OrtAttrSource::Get(std::string_view name, float* value) const {
  const std::string n(name);
  if (OrtStatus* s = api_->KernelInfoGetAttribute_float(info_, n.c_str(), value)) {
    return Failed(name, s, "a float");
  }
  return Status::Ok();
}

Status OrtAttrSource::Get(std::string_view name, int64_t* value) const {
  const std::string n(name);
  if (OrtStatus* s = api_->KernelInfoGetAttribute_int64(info_, n.c_str(), value)) {
    return Failed(name, s, "an int");
  }
  return Status::Ok();
}

Status OrtAttrSource::Get(std::string_view name, bool* value) const {
  int64_t v = 0;
  const std::string n(name);
  if (OrtStatus* s = api_->KernelInfoGetAttribute_int64(info_, n.c_str(), &v)) {
    return Failed(name, s, "an int, 0 or 1");
  }
  if (v != 0 && v != 1) {
    return Status::Invalid(op_ + ": attribute '" + n + "' must be 0 or 1 (a bool), got " +
                           std::to_string(v));
  }
  *value = v != 0;
  return Status::Ok();
}

Status OrtAttrSource::Get(std::string_view name, std::string* value) const {
  const std::string n(name);
  size_t size = 0;
  if (OrtStatus* s = api_->KernelInfoGetAttribute_string(info_, n.c_str(), nullptr, &size)) {
    return Failed(name, s, "a string");
  }
  std::string text(size, '\0');
  if (OrtStatus* s = api_->KernelInfoGetAttribute_string(info_, n.c_str(), text.data(), &size)) {
    return Failed(name, s, "a string");
  }
  if (!text.empty() && text.back() == '\0') text.pop_back();
  *value = std::move(text);
  return Status::Ok();
}

Status OrtAttrSource::Get(std::string_view name, std::vector<int64_t>* value) const {
  const std::string n(name);
  size_t size = 0;
  OrtStatus* s = api_->KernelInfoGetAttributeArray_int64(info_, n.c_str(), nullptr, &size);
  if (s) return Failed(name, s, "a list of ints");
  value->assign(size, 0);
  if (size == 0) return Status::Ok();
  s = api_->KernelInfoGetAttributeArray_int64(info_, n.c_str(), value->data(), &size);
  if (s) return Failed(name, s, "a list of ints");
  return Status::Ok();
}

Status OrtAttrSource::Get(std::string_view name, std::vector<float>* value) const {
  const std::string n(name);
  size_t size = 0;
  OrtStatus* s = api_->KernelInfoGetAttributeArray_float(info_, n.c_str(), nullptr, &size);
  if (s) return Failed(name, s, "a list of floats");
  value->assign(size, 0.0f);
  if (size == 0) return Status::Ok();
  s = api_->KernelInfoGetAttributeArray_float(info_, n.c_str(), value->data(), &size);
  if (s) return Failed(name, s, "a list of floats");
  return Status::Ok();
}

// --- the thread pool ----------------------------------------------------------------------------

namespace {
struct ChunkWork {
  const Parallel::Fn* fn;
  int64_t total;
  int64_t chunks;
};
void RunChunk(void* data, size_t i) {
  const auto* w = static_cast<const ChunkWork*>(data);
  const int64_t c = static_cast<int64_t>(i);
  const int64_t begin = w->total * c / w->chunks;
  const int64_t end = w->total * (c + 1) / w->chunks;
  const ScopedFlushDenormals flush;  // on ONNX Runtime's worker threads too
  if (end > begin) (*w->fn)(begin, end);
}
}  // namespace

void OrtParallel::For(int64_t total, double cost_per_unit, const Fn& fn) const {
  if (total <= 0) return;
  // As TensorFlow's pool: work under ~50k cycles is not worth waking a thread for; otherwise
  // chunks of at least that, at most 64 (ONNX Runtime spreads them over its threads).
  constexpr double kMinChunkCycles = 50000.0;
  const double work = static_cast<double>(total) * std::max(cost_per_unit, 1.0);
  const int64_t chunks =
      std::min<int64_t>({total, int64_t{64}, static_cast<int64_t>(work / kMinChunkCycles)});
  if (chunks <= 1) {
    fn(0, total);
    return;
  }
  ChunkWork w{&fn, total, chunks};
  OrtStatus* s =
      api_->KernelContext_ParallelFor(context_, RunChunk, static_cast<size_t>(chunks), 0, &w);
  if (s) {  // no pool (an older runtime): the same chunks on this thread
    api_->ReleaseStatus(s);
    for (int64_t c = 0; c < chunks; ++c) RunChunk(&w, static_cast<size_t>(c));
  }
}

// --- tensors ------------------------------------------------------------------------------------

OrtStatus* ReadInputs(const OrtApi* api, OrtKernelContext* context, const Entry& entry,
                      int values_input, OpCall* call) {
  size_t count = 0;
  if (OrtStatus* s = api->KernelContext_GetInputCount(context, &count)) return s;
  const int n = static_cast<int>(count);
  const std::vector<int> order = TfInputOrder(entry.signature, n);
  call->shapes.assign(count, {});
  call->inputs.assign(count, nullptr);
  const Signature& sig = entry.signature;
  for (int i = 0; i < n; ++i) {
    const int tf = order[static_cast<size_t>(i)];
    if (tf < 0 || tf >= n) {
      return api->CreateStatus(ORT_INVALID_ARGUMENT,
                               (entry.name + ": " + std::to_string(n) +
                                " inputs do not fit the op's signature (see its attributes)")
                                   .c_str());
    }
    const OrtValue* value = nullptr;
    if (OrtStatus* s = api->KernelContext_GetInput(context, static_cast<size_t>(i), &value))
      return s;
    if (value == nullptr) {
      return api->CreateStatus(
          ORT_INVALID_ARGUMENT,
          (entry.name + ": input " + std::to_string(i) + " is missing").c_str());
    }
    OrtTensorTypeAndShapeInfo* info = nullptr;
    if (OrtStatus* s = api->GetTensorTypeAndShape(value, &info)) return s;
    size_t rank = 0;
    ONNXTensorElementDataType type = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    OrtStatus* s = api->GetDimensionsCount(info, &rank);
    std::vector<int64_t> dims(rank);
    if (!s && rank > 0) s = api->GetDimensions(info, dims.data(), rank);
    if (!s) s = api->GetTensorElementType(info, &type);
    api->ReleaseTensorTypeAndShapeInfo(info);
    if (s) return s;
    const size_t slot = std::min(static_cast<size_t>(i), sig.inputs.size() - 1);
    const int want = sig.inputs[slot];
    const bool ok = want == kAnyInt ? (type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 ||
                                       type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
                                    : type == Resolve(entry, want);
    if (!ok) {
      return api->CreateStatus(
          ORT_INVALID_ARGUMENT,
          (entry.name + ": input " + std::to_string(i) + " must be " +
           (want == kAnyInt ? "int32 or int64" : OnnxTypeName(Resolve(entry, want))) + ", got " +
           OnnxTypeName(type))
              .c_str());
    }
    int64_t elements = 1;
    for (int64_t d : dims) elements *= d;
    void* data = nullptr;
    if (elements > 0) {
      if (OrtStatus* st = api->GetTensorMutableData(const_cast<OrtValue*>(value), &data)) return st;
    }
    call->shapes[static_cast<size_t>(tf)] = std::move(dims);
    call->inputs[static_cast<size_t>(tf)] = elements > 0 ? data : nullptr;
    if (tf == values_input) {
      call->values.assign(static_cast<size_t>(elements), 0);
      for (int64_t k = 0; k < elements; ++k) {
        call->values[static_cast<size_t>(k)] =
            type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64   ? static_cast<const int64_t*>(data)[k]
            : type == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 ? static_cast<const int32_t*>(data)[k]
                                                          : 0;
      }
    }
  }
  return nullptr;
}

OrtStatus* AllocateOutputs(const OrtApi* api, OrtKernelContext* context, const Entry& entry,
                           OpCall* call, bool* any) {
  size_t count = 0;
  if (OrtStatus* s = api->KernelContext_GetOutputCount(context, &count)) return s;
  call->outputs.assign(count, nullptr);
  call->output_bytes.assign(count, 0);
  std::vector<bool> made(count, false);
  const Signature& sig = entry.signature;
  auto make = [&](int index, const std::vector<int64_t>& dims) -> OrtStatus* {
    if (index < 0 || static_cast<size_t>(index) >= count) return nullptr;  // not asked for
    OrtValue* value = nullptr;
    if (OrtStatus* s = api->KernelContext_GetOutput(context, static_cast<size_t>(index),
                                                    dims.data(), dims.size(), &value)) {
      return s;
    }
    made[static_cast<size_t>(index)] = true;
    int64_t elements = 1;
    for (int64_t d : dims) elements *= d;
    if (elements == 0) return nullptr;
    void* data = nullptr;
    if (OrtStatus* s = api->GetTensorMutableData(value, &data)) return s;
    const size_t slot = std::min(static_cast<size_t>(index), sig.outputs.size() - 1);
    const size_t bytes = OnnxTypeBytes(Resolve(entry, sig.outputs[slot]));
    call->outputs[static_cast<size_t>(index)] = data;
    call->output_bytes[static_cast<size_t>(index)] = static_cast<size_t>(elements) * bytes;
    *any = true;
    return nullptr;
  };
  for (const OpCall::OutputSpec& spec : call->declared) {
    if (OrtStatus* s = make(spec.index, spec.dims)) return s;
  }
  for (size_t i = 0; i < count; ++i) {
    if (!made[i]) {
      if (OrtStatus* s = make(static_cast<int>(i), {0})) return s;
    }
  }
  return nullptr;
}

}  // namespace ort
}  // namespace opforge

// --- the library's entry points
// -------------------------------------------------------------------

// Adds domain OPFORGE_ORT_DOMAIN ("opforge") with every registered kernel to the session options.
// ONNX Runtime calls it from SessionOptions.register_custom_ops_library (Python) /
// RegisterCustomOpsLibrary (C, C++, C#, Java).
OPFORGE_ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                             const OrtApiBase* api_base) {
  using opforge::ort::g_api;
  const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
  if (api == nullptr) {
    // A runtime older than the headers the library was built with: it cannot hand out this API.
    // Its first API version still creates a status that says so.
    const OrtApi* first = api_base->GetApi(1);
    const std::string message =
        "opforge's ONNX Runtime adapter needs ONNX Runtime with C API version " +
        std::to_string(ORT_API_VERSION) + " or later (ONNX Runtime 1." +
        std::to_string(ORT_API_VERSION) + "+); this is ONNX Runtime " +
        api_base->GetVersionString();
    return first != nullptr ? first->CreateStatus(ORT_FAIL, message.c_str()) : nullptr;
  }
  g_api = api;
  // One domain for the process: the session options keep a pointer to it.
  static std::once_flag once;
  static OrtCustomOpDomain* domain = nullptr;
  static OrtStatus* failed = nullptr;
  std::call_once(once, [api]() {
    if ((failed = api->CreateCustomOpDomain(OPFORGE_ORT_DOMAIN, &domain))) return;
    for (const auto& entry : opforge::ort::Registry()) {
      if (!entry->error.empty()) {
        failed = api->CreateStatus(ORT_FAIL, ("opforge: " + entry->error).c_str());
        return;
      }
      if ((failed = api->CustomOpDomain_Add(domain, &entry->op))) return;
    }
  });
  if (failed != nullptr) {
    return api->CreateStatus(api->GetErrorCode(failed), api->GetErrorMessage(failed));
  }
  return api->AddCustomOpDomain(options, domain);
}

// The ONNX op types this library has, comma-separated ("BiasLeakyRelu,Conv2DTranspose,...").
OPFORGE_ORT_EXPORT const char* OpforgeOrtOpNames() {
  static const std::string names = [] {
    std::vector<std::string> all;
    for (const auto& entry : opforge::ort::Registry()) all.push_back(entry->name);
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    std::string joined;
    for (const std::string& n : all) joined += (joined.empty() ? "" : ",") + n;
    return joined;
  }();
  return names.c_str();
}

// The ONNX domain of the library's op types (OPFORGE_ORT_DOMAIN).
OPFORGE_ORT_EXPORT const char* OpforgeOrtDomain() { return OPFORGE_ORT_DOMAIN; }

// The C API version the library was built against (ONNX Runtime 1.<version> or later runs it).
OPFORGE_ORT_EXPORT int OpforgeOrtApiVersion() { return ORT_API_VERSION; }
