// XLA FFI's side of the op structs (common/xla_ffi.h): errors, element types, attributes,
// buffers, the thread pool, the registry and the library's entry point.
#include "common/xla_ffi.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace opforge {
namespace ffi {

XLA_FFI_Error* MakeError(const XLA_FFI_Api* api, XLA_FFI_Error_Code code,
                         const std::string& message) {
  XLA_FFI_Error_Create_Args args{};
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.message = message.c_str();  // copied by XLA
  args.errc = code;
  return api->XLA_FFI_Error_Create(&args);
}

std::string TakeMessage(const XLA_FFI_Api* api, XLA_FFI_Error* error) {
  XLA_FFI_Error_GetMessage_Args message{};
  message.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  message.error = error;
  api->XLA_FFI_Error_GetMessage(&message);
  std::string text = message.message != nullptr ? message.message : "no message";
  XLA_FFI_Error_Destroy_Args destroy{};
  destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->XLA_FFI_Error_Destroy(&destroy);
  return text;
}

XLA_FFI_Error* ToFfiError(const XLA_FFI_Api* api, const Status& status) {
  if (status.ok()) return nullptr;
  return MakeError(api,
                   status.code() == Status::Code::kInvalidArgument
                       ? XLA_FFI_Error_Code_INVALID_ARGUMENT
                       : XLA_FFI_Error_Code_INTERNAL,
                   status.message());
}

namespace {

struct TypePair {
  DType dtype;
  XLA_FFI_DataType ffi;
};
constexpr TypePair kTypes[] = {
    {DType::kHalf, XLA_FFI_DataType_F16},      {DType::kBFloat16, XLA_FFI_DataType_BF16},
    {DType::kFloat, XLA_FFI_DataType_F32},     {DType::kDouble, XLA_FFI_DataType_F64},
    {DType::kInt32, XLA_FFI_DataType_S32},     {DType::kInt64, XLA_FFI_DataType_S64},
    {DType::kInt8, XLA_FFI_DataType_S8},       {DType::kUInt8, XLA_FFI_DataType_U8},
    {DType::kInt16, XLA_FFI_DataType_S16},     {DType::kUInt16, XLA_FFI_DataType_U16},
    {DType::kUInt32, XLA_FFI_DataType_U32},    {DType::kUInt64, XLA_FFI_DataType_U64},
    {DType::kComplex64, XLA_FFI_DataType_C64}, {DType::kComplex128, XLA_FFI_DataType_C128},
};

}  // namespace

XLA_FFI_DataType FfiType(DType dtype) {
  for (const TypePair& t : kTypes) {
    if (t.dtype == dtype) return t.ffi;
  }
  return XLA_FFI_DataType_INVALID;
}

bool DTypeOfFfi(XLA_FFI_DataType type, DType* dtype) {
  for (const TypePair& t : kTypes) {
    if (t.ffi == type) {
      *dtype = t.dtype;
      return true;
    }
  }
  return false;
}

bool DTypeByName(std::string_view name, DType* dtype) {
  for (const TypePair& t : kTypes) {
    if (name == DTypeName(t.dtype)) {
      *dtype = t.dtype;
      return true;
    }
  }
  return false;
}

// --- attributes ---------------------------------------------------------------------------------

namespace {

std::string_view NameOf(const XLA_FFI_Attrs& attrs, int64_t i) {
  const XLA_FFI_ByteSpan* span = attrs.names[i];
  return std::string_view(span->ptr, span->len);
}

const char* AttrTypeName(XLA_FFI_AttrType type) {
  switch (type) {
    case XLA_FFI_AttrType_ARRAY:
      return "an array";
    case XLA_FFI_AttrType_DICTIONARY:
      return "a dictionary";
    case XLA_FFI_AttrType_SCALAR:
      return "a scalar";
    case XLA_FFI_AttrType_STRING:
      return "a string";
  }
  return "an unknown kind";
}

}  // namespace

bool FfiAttrSource::Has(std::string_view name) const {
  for (int64_t i = 0; i < attrs_.size; ++i) {
    if (NameOf(attrs_, i) == name) return true;
  }
  return false;
}

const void* FfiAttrSource::Find(std::string_view name, XLA_FFI_AttrType type, const char* kind,
                                Status* status) const {
  // Sorted by name: a binary search would do, but ops have a handful of attributes.
  for (int64_t i = 0; i < attrs_.size; ++i) {
    if (NameOf(attrs_, i) != name) continue;
    if (attrs_.types[i] != type) {
      *status = Status::Invalid(std::string(target_) + ": attribute '" + std::string(name) +
                                "' must be " + kind + ", got " + AttrTypeName(attrs_.types[i]));
      return nullptr;
    }
    return attrs_.attrs[i];
  }
  *status = Status::Invalid(std::string(target_) + ": the custom call has no attribute '" +
                            std::string(name) + "' (" + kind + ")");
  return nullptr;
}

namespace {

// The scalar's value as V when its element type converts exactly (an integer of any width to
// int64, f32 or f64 to float: XLA's hosts write Python's floats as f32 or f64).
template <typename V>
bool ScalarAs(const XLA_FFI_Scalar& scalar, V* value) {
  const void* p = scalar.value;
  switch (scalar.dtype) {
    case XLA_FFI_DataType_PRED:
      if constexpr (std::is_same_v<V, bool>) {
        *value = *static_cast<const bool*>(p);
        return true;
      } else if constexpr (std::is_same_v<V, int64_t>) {
        *value = *static_cast<const bool*>(p) ? 1 : 0;
        return true;
      }
      return false;
    case XLA_FFI_DataType_S8:
    case XLA_FFI_DataType_S16:
    case XLA_FFI_DataType_S32:
    case XLA_FFI_DataType_S64:
    case XLA_FFI_DataType_U8:
    case XLA_FFI_DataType_U16:
    case XLA_FFI_DataType_U32:
    case XLA_FFI_DataType_U64: {
      int64_t v = 0;
      switch (scalar.dtype) {
        case XLA_FFI_DataType_S8:
          v = *static_cast<const int8_t*>(p);
          break;
        case XLA_FFI_DataType_S16:
          v = *static_cast<const int16_t*>(p);
          break;
        case XLA_FFI_DataType_S32:
          v = *static_cast<const int32_t*>(p);
          break;
        case XLA_FFI_DataType_U8:
          v = *static_cast<const uint8_t*>(p);
          break;
        case XLA_FFI_DataType_U16:
          v = *static_cast<const uint16_t*>(p);
          break;
        case XLA_FFI_DataType_U32:
          v = *static_cast<const uint32_t*>(p);
          break;
        default:
          v = *static_cast<const int64_t*>(p);
      }
      if constexpr (std::is_same_v<V, int64_t>) {
        *value = v;
        return true;
      } else if constexpr (std::is_same_v<V, bool>) {  // ONNX-style 0/1 booleans
        if (v != 0 && v != 1) return false;
        *value = v != 0;
        return true;
      }
      return false;
    }
    case XLA_FFI_DataType_F32:
      if constexpr (std::is_same_v<V, float>) {
        *value = *static_cast<const float*>(p);
        return true;
      }
      return false;
    case XLA_FFI_DataType_F64:
      if constexpr (std::is_same_v<V, float>) {
        *value = static_cast<float>(*static_cast<const double*>(p));
        return true;
      }
      return false;
    default:
      return false;
  }
}

template <typename V>
Status GetScalar(const FfiAttrSource& source, std::string_view name, const char* kind,
                 const char* target, V* value) {
  Status status;
  const auto* scalar =
      static_cast<const XLA_FFI_Scalar*>(source.Find(name, XLA_FFI_AttrType_SCALAR, kind, &status));
  if (scalar == nullptr) return status;
  if (!ScalarAs(*scalar, value)) {
    return Status::Invalid(std::string(target) + ": attribute '" + std::string(name) +
                           "' must be " + kind + ", got a scalar of XLA element type " +
                           std::to_string(static_cast<int>(scalar->dtype)));
  }
  return Status::Ok();
}

}  // namespace

Status FfiAttrSource::Get(std::string_view name, float* value) const {
  return GetScalar(*this, name, "a float", target_, value);
}
Status FfiAttrSource::Get(std::string_view name, int64_t* value) const {
  return GetScalar(*this, name, "an int", target_, value);
}
Status FfiAttrSource::Get(std::string_view name, bool* value) const {
  return GetScalar(*this, name, "a bool", target_, value);
}
Status FfiAttrSource::Get(std::string_view name, std::string* value) const {
  Status status;
  const auto* span = static_cast<const XLA_FFI_ByteSpan*>(
      Find(name, XLA_FFI_AttrType_STRING, "a string", &status));
  if (span == nullptr) return status;
  value->assign(span->ptr, span->len);
  return Status::Ok();
}
namespace {

// The array attribute `name` as V: int64 from i64 or i32 elements, float from f32 or f64 ones.
template <typename V>
Status GetArray(const FfiAttrSource& source, std::string_view name, const char* kind,
                const char* target, std::vector<V>* value) {
  Status status;
  const auto* array =
      static_cast<const XLA_FFI_Array*>(source.Find(name, XLA_FFI_AttrType_ARRAY, kind, &status));
  if (array == nullptr) return status;
  constexpr bool kInt = std::is_same_v<V, int64_t>;
  const XLA_FFI_DataType wide = kInt ? XLA_FFI_DataType_S64 : XLA_FFI_DataType_F64;
  const XLA_FFI_DataType narrow = kInt ? XLA_FFI_DataType_S32 : XLA_FFI_DataType_F32;
  if (array->dtype != wide && array->dtype != narrow) {
    return Status::Invalid(std::string(target) + ": attribute '" + std::string(name) +
                           "' must be " + kind + (kInt ? " (i64 or i32)" : " (f32 or f64)") +
                           ", got an array of XLA element type " +
                           std::to_string(static_cast<int>(array->dtype)));
  }
  using Wide = std::conditional_t<kInt, int64_t, double>;
  using Narrow = std::conditional_t<kInt, int32_t, float>;
  value->resize(array->size);
  for (size_t i = 0; i < array->size; ++i) {
    (*value)[i] = array->dtype == wide ? static_cast<V>(static_cast<const Wide*>(array->data)[i])
                                       : static_cast<V>(static_cast<const Narrow*>(array->data)[i]);
  }
  return Status::Ok();
}

}  // namespace

Status FfiAttrSource::Get(std::string_view name, std::vector<int64_t>* value) const {
  return GetArray(*this, name, "a list of ints", target_, value);
}
Status FfiAttrSource::Get(std::string_view name, std::vector<float>* value) const {
  return GetArray(*this, name, "a list of floats", target_, value);
}

// --- the thread pool
// ------------------------------------------------------------------------------

namespace {

// One parallel For: chunks claimed by the caller and the pool's tasks. Shared with the tasks
// (a task may start after the caller has returned; it then finds nothing to claim).
struct ChunkWork {
  const Parallel::Fn* fn = nullptr;
  int64_t total = 0, chunks = 0;
  std::atomic<int64_t> next{0}, done{0};
  std::mutex mutex;
  std::condition_variable all_done;

  void RunClaimed() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) return;
      // The same chunk boundaries whoever runs them.
      const int64_t begin = total * c / chunks, end = total * (c + 1) / chunks;
      (*fn)(begin, end);
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
        const std::lock_guard<std::mutex> lock(mutex);
        all_done.notify_one();
      }
    }
  }

  // The caller, once nothing is left to claim: it sleeps rather than spins, as Eigen's
  // Barrier does under TensorFlow's pool (a spinning caller takes a core from the workers
  // still running its chunks when the pool has as many threads as the machine has cores).
  void Wait() {
    if (done.load(std::memory_order_acquire) == chunks) return;
    std::unique_lock<std::mutex> lock(mutex);
    all_done.wait(lock, [this] { return done.load(std::memory_order_acquire) == chunks; });
  }
};

void RunTask(void* data) {
  std::unique_ptr<std::shared_ptr<ChunkWork>> work(static_cast<std::shared_ptr<ChunkWork>*>(data));
  const ScopedFlushDenormals flush;  // on every thread that runs part of a kernel (op_call.h)
  (*work)->RunClaimed();
}

}  // namespace

void FfiParallel::For(int64_t total, double cost_per_unit, const Fn& fn) const {
  if (total <= 0) return;
  // As the other runtimes' pools: work under ~50k cycles is not worth waking a thread for.
  constexpr double kMinChunkCycles = 50000.0;
  const double work_cycles = static_cast<double>(total) * std::max(cost_per_unit, 1.0);
  int64_t threads = 0;
  if (api_->XLA_FFI_ThreadPool_NumThreads != nullptr && ctx_ != nullptr) {
    XLA_FFI_ThreadPool_NumThreads_Args args{};
    args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
    args.ctx = ctx_;
    args.num_threads = &threads;
    if (XLA_FFI_Error* e = api_->XLA_FFI_ThreadPool_NumThreads(&args)) {
      XLA_FFI_Error_Destroy_Args destroy{};
      destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = e;
      api_->XLA_FFI_Error_Destroy(&destroy);
      threads = 0;  // no pool
    }
  }
  const int64_t chunks =
      std::min<int64_t>({total, 4 * threads, static_cast<int64_t>(work_cycles / kMinChunkCycles)});
  // The caller is one of the pool's `threads` workers: it runs chunks beside threads - 1 pool
  // tasks. (XLA:CPU runs the executable on TensorFlow's calling thread, outside the pool, and the
  // pool has a thread per core: a task for every pool thread put three threads on two cores, and
  // a thread preempted in the middle of a chunk made every call wait for it; 0.76-0.90x of the
  // same kernel under TensorFlow's pool, which runs on as many threads as there are cores.)
  if (threads <= 1 || chunks <= 1) {
    fn(0, total);
    return;
  }
  auto work = std::make_shared<ChunkWork>();
  work->fn = &fn;
  work->total = total;
  work->chunks = chunks;
  const int64_t helpers = std::min<int64_t>(threads - 1, chunks - 1);
  for (int64_t h = 0; h < helpers; ++h) {
    auto* data = new std::shared_ptr<ChunkWork>(work);
    XLA_FFI_ThreadPool_Schedule_Args args{};
    args.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
    args.ctx = ctx_;
    args.task = &RunTask;
    args.data = data;
    if (XLA_FFI_Error* e = api_->XLA_FFI_ThreadPool_Schedule(&args)) {
      delete data;
      XLA_FFI_Error_Destroy_Args destroy{};
      destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      destroy.error = e;
      api_->XLA_FFI_Error_Destroy(&destroy);
      break;  // the caller does the rest
    }
  }
  work->RunClaimed();
  work->Wait();
}

// --- buffers
// ---------------------------------------------------------------------------------------

bool AnswerMetadata(XLA_FFI_CallFrame* frame, XLA_FFI_Error** error) {
  XLA_FFI_Extension_Base* extension = frame->extension_start;
  if (extension == nullptr || extension->type != XLA_FFI_Extension_Metadata) return false;
  auto* metadata = reinterpret_cast<XLA_FFI_Metadata_Extension*>(extension);
  metadata->metadata->api_version = XLA_FFI_Api_Version{XLA_FFI_Api_Version_STRUCT_SIZE, nullptr,
                                                        XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR};
  metadata->metadata->traits = 0;
#if XLA_FFI_API_MAJOR > 0 || XLA_FFI_API_MINOR >= 2
  // API 0.2 (TensorFlow 2.21) added the handler's state type; 0.1 (2.19, 2.20) has none.
  metadata->metadata->state_type_id = XLA_FFI_UNKNOWN_TYPE_ID;
#endif
  *error = nullptr;
  return true;
}

namespace {

int64_t ElementCount(const XLA_FFI_Buffer& buffer) {
  int64_t n = 1;
  for (int64_t d = 0; d < buffer.rank; ++d) n *= buffer.dims[d];
  return n;
}

size_t ElementBytes(XLA_FFI_DataType type) {
  switch (type) {
    case XLA_FFI_DataType_PRED:
    case XLA_FFI_DataType_S8:
    case XLA_FFI_DataType_U8:
      return 1;
    case XLA_FFI_DataType_S16:
    case XLA_FFI_DataType_U16:
    case XLA_FFI_DataType_F16:
    case XLA_FFI_DataType_BF16:
      return 2;
    case XLA_FFI_DataType_S32:
    case XLA_FFI_DataType_U32:
    case XLA_FFI_DataType_F32:
      return 4;
    case XLA_FFI_DataType_S64:
    case XLA_FFI_DataType_U64:
    case XLA_FFI_DataType_F64:
    case XLA_FFI_DataType_C64:
      return 8;
    case XLA_FFI_DataType_C128:
      return 16;
    default:
      return 0;
  }
}

}  // namespace

Status ReadOperands(const XLA_FFI_CallFrame& frame, const FfiAttrSource& attrs, DType dtype,
                    int values_input, const char* target, OpCall* call, bool device) {
  call->dtype = dtype;
  const int64_t n = frame.args.size;
  call->shapes.reserve(static_cast<size_t>(n));
  call->inputs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {  // buffers of the signature's types (CheckFrame)
    const auto* buffer = static_cast<const XLA_FFI_Buffer*>(frame.args.args[i]);
    call->shapes.emplace_back(buffer->dims, buffer->dims + buffer->rank);
    call->inputs.push_back(ElementCount(*buffer) == 0 ? nullptr : buffer->data);
  }
  if (values_input >= 0 && values_input < n) {
    if (attrs.Has(kValuesAttr)) {
      OPFORGE_RETURN_IF_ERROR(attrs.Get(kValuesAttr, &call->values));
    } else if (device) {
      return Status::Invalid(std::string(target) + ": on the GPU the values of operand " +
                             std::to_string(values_input) + " must come as the attribute '" +
                             kValuesAttr + "' (an i64 array; a compile-time constant)");
    } else {
      const auto* buffer = static_cast<const XLA_FFI_Buffer*>(frame.args.args[values_input]);
      const int64_t count = ElementCount(*buffer);
      call->values.resize(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        if (buffer->dtype == XLA_FFI_DataType_S32) {
          call->values[static_cast<size_t>(i)] = static_cast<const int32_t*>(buffer->data)[i];
        } else if (buffer->dtype == XLA_FFI_DataType_S64) {
          call->values[static_cast<size_t>(i)] = static_cast<const int64_t*>(buffer->data)[i];
        } else {
          call->values.clear();  // the op's Validate names the wrong element type
          break;
        }
      }
    }
  }
  return Status::Ok();
}

Status BindResults(const XLA_FFI_CallFrame& frame, const char* target, OpCall* call, bool* any) {
  const int64_t n = frame.rets.size;
  call->outputs.assign(static_cast<size_t>(n), nullptr);
  call->output_bytes.assign(static_cast<size_t>(n), 0);
  std::vector<bool> declared(static_cast<size_t>(n), false);
  *any = false;
  for (const OpCall::OutputSpec& spec : call->declared) {
    if (spec.index < 0 || spec.index >= n) {
      return Status::Invalid(std::string(target) + ": the op declares output " +
                             std::to_string(spec.index) + " but the custom call has " +
                             std::to_string(n) + " results");
    }
    const auto* buffer = static_cast<const XLA_FFI_Buffer*>(frame.rets.rets[spec.index]);
    const std::vector<int64_t> dims(buffer->dims, buffer->dims + buffer->rank);
    if (dims != spec.dims) {
      return Status::Invalid(std::string(target) + ": result " + std::to_string(spec.index) +
                             " must have shape " + ShapeString(spec.dims) + ", got " +
                             ShapeString(dims));
    }
    declared[static_cast<size_t>(spec.index)] = true;
    const int64_t count = ElementCount(*buffer);
    if (count == 0) continue;
    call->outputs[static_cast<size_t>(spec.index)] = buffer->data;
    call->output_bytes[static_cast<size_t>(spec.index)] =
        static_cast<size_t>(count) * ElementBytes(buffer->dtype);
    *any = true;
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto* buffer = static_cast<const XLA_FFI_Buffer*>(frame.rets.rets[i]);
    if (!declared[static_cast<size_t>(i)] && ElementCount(*buffer) != 0) {
      return Status::Invalid(
          std::string(target) + ": result " + std::to_string(i) +
          " is not an output of the op for these inputs and must be empty, got "
          "shape " +
          ShapeString(std::vector<int64_t>(buffer->dims, buffer->dims + buffer->rank)));
    }
  }
  return Status::Ok();
}

Status FfiStream(const XLA_FFI_Api* api, XLA_FFI_ExecutionContext* ctx, const char* target,
                 void** stream) {
  XLA_FFI_Stream_Get_Args args{};
  args.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
  args.ctx = ctx;
  if (XLA_FFI_Error* error = api->XLA_FFI_Stream_Get(&args)) {
    return Status::Internal(std::string(target) +
                            ": no stream from XLA: " + TakeMessage(api, error));
  }
  *stream = args.stream;
  return Status::Ok();
}

FfiDeviceScratch::~FfiDeviceScratch() {
  if (data_ == nullptr) return;
  XLA_FFI_DeviceMemory_Free_Args args{};
  args.struct_size = XLA_FFI_DeviceMemory_Free_Args_STRUCT_SIZE;
  args.ctx = ctx_;
  args.size = bytes_;
  args.data = data_;
  if (XLA_FFI_Error* error = api_->XLA_FFI_DeviceMemory_Free(&args)) TakeMessage(api_, error);
}

Status FfiDeviceScratch::Allocate(size_t bytes, const char* target) {
  XLA_FFI_DeviceMemory_Allocate_Args args{};
  args.struct_size = XLA_FFI_DeviceMemory_Allocate_Args_STRUCT_SIZE;
  args.ctx = ctx_;
  args.size = bytes;
  args.alignment = 256;  // cudaMalloc's
  if (XLA_FFI_Error* error = api_->XLA_FFI_DeviceMemory_Allocate(&args)) {
    return Status::Internal(std::string(target) + ": XLA could not allocate " +
                            std::to_string(bytes) +
                            " bytes of device scratch: " + TakeMessage(api_, error));
  }
  data_ = args.data;
  bytes_ = bytes;
  return Status::Ok();
}

Handler::Handler(const OpSignature& op, const TypedExecute* types_in, size_t count_in)
    : target(op.name), types(types_in), count(count_in) {
  status = signature::Parse(op, &parsed);
}

namespace {

// The number of tensors of each of `args` (lists: their int attr's value).
Status Counts(const std::vector<signature::Arg>& args, const FfiAttrSource& attrs,
              std::vector<int64_t>* counts) {
  counts->clear();
  for (const signature::Arg& a : args) {
    int64_t n = 1;
    if (!a.number_attr.empty()) {
      OPFORGE_RETURN_IF_ERROR(attrs.Get(a.number_attr, &n));
      if (n < 0) n = 0;
    }
    counts->push_back(n);
  }
  return Status::Ok();
}

int64_t Total(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  return total;
}

// "features, anchors (3: num_scales)": the args and their counts, for messages.
std::string CountText(const std::vector<signature::Arg>& args, const std::vector<int64_t>& counts) {
  std::string text;
  for (size_t k = 0; k < args.size(); ++k) {
    text += (text.empty() ? "" : ", ") + args[k].name;
    if (!args[k].number_attr.empty()) {
      text += " (" + std::to_string(counts[k]) + ": " + args[k].number_attr + ")";
    }
  }
  return text;
}

// Checks the element types of `count` buffers against args (expanded by counts).
Status CheckTypes(const char* target, const char* kind, void* const* buffers,
                  const std::vector<signature::Arg>& args, const std::vector<int64_t>& counts,
                  DType t) {
  int64_t i = 0;
  for (size_t k = 0; k < args.size(); ++k) {
    for (int64_t e = 0; e < counts[k]; ++e, ++i) {
      const auto* buffer = static_cast<const XLA_FFI_Buffer*>(buffers[i]);
      DType got;
      const bool known = DTypeOfFfi(buffer->dtype, &got);
      if (known && signature::Accepts(args[k], t, got)) continue;
      const std::string which =
          args[k].number_attr.empty() ? args[k].name : args[k].name + "[" + std::to_string(e) + "]";
      return Status::Invalid(
          std::string(target) + ": " + kind + " " + std::to_string(i) + " (" + which +
          ") must be " + signature::ExpectedName(args[k], t) + ", got " +
          (known ? std::string(DTypeName(got))
                 : "XLA element type " + std::to_string(static_cast<int>(buffer->dtype))));
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckFrame(const XLA_FFI_CallFrame& frame, const FfiAttrSource& attrs,
                  const signature::Parsed& parsed, DType t) {
  const char* target = parsed.name.c_str();
  std::vector<int64_t> in_counts, out_counts;
  OPFORGE_RETURN_IF_ERROR(Counts(parsed.inputs, attrs, &in_counts));
  OPFORGE_RETURN_IF_ERROR(Counts(parsed.outputs, attrs, &out_counts));
  const int64_t inputs = Total(in_counts), outputs = Total(out_counts);
  if (frame.args.size != inputs) {
    return Status::Invalid(std::string(target) + ": the call has " +
                           std::to_string(frame.args.size) + " operands, the op takes " +
                           std::to_string(inputs) + " (" + CountText(parsed.inputs, in_counts) +
                           ")");
  }
  if (frame.rets.size != outputs) {
    return Status::Invalid(std::string(target) + ": the call has " +
                           std::to_string(frame.rets.size) + " results, the op gives " +
                           std::to_string(outputs) + " (" + CountText(parsed.outputs, out_counts) +
                           ")");
  }
  for (int64_t i = 0; i < frame.args.size; ++i) {
    if (frame.args.types[i] != XLA_FFI_ArgType_BUFFER) {
      return Status::Invalid(std::string(target) + ": operand " + std::to_string(i) +
                             " is not a buffer");
    }
  }
  for (int64_t i = 0; i < frame.rets.size; ++i) {
    if (frame.rets.types[i] != XLA_FFI_RetType_BUFFER) {
      return Status::Invalid(std::string(target) + ": result " + std::to_string(i) +
                             " is not a buffer");
    }
  }
  OPFORGE_RETURN_IF_ERROR(
      CheckTypes(target, "operand", frame.args.args, parsed.inputs, in_counts, t));
  return CheckTypes(target, "result", frame.rets.rets, parsed.outputs, out_counts, t);
}

XLA_FFI_Error* Dispatch(XLA_FFI_CallFrame* frame, const Handler& handler) {
  XLA_FFI_Error* error = nullptr;
  if (AnswerMetadata(frame, &error)) return error;
  const XLA_FFI_Api* api = frame->api;
  const char* target = handler.target;
  if (!handler.status.ok()) return ToFfiError(api, handler.status);
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) {
    return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     std::string(target) + ": called at execution stage " +
                         std::to_string(static_cast<int>(frame->stage)) +
                         "; the handler is registered for the execute stage only");
  }
  FfiAttrSource source(frame->attrs, target);
  std::string name;
  Status s = source.Get(kTypeAttr, &name);
  if (!s.ok()) return ToFfiError(api, s);
  DType dtype;
  if (!DTypeByName(name, &dtype)) {
    return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                     std::string(target) +
                         ": attribute 'T' must name an element type "
                         "(\"float32\", \"bfloat16\", ...), got \"" +
                         name + "\"");
  }
  std::string supported;
  for (size_t i = 0; i < handler.count; ++i) {
    if (handler.types[i].dtype != dtype) {
      supported += (i ? ", " : "") + std::string(DTypeName(handler.types[i].dtype));
      continue;
    }
    s = CheckFrame(*frame, source, handler.parsed, dtype);
    if (!s.ok()) return ToFfiError(api, s);
    return handler.types[i].execute(frame, target);
  }
  return MakeError(api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
                   std::string(target) + ": T must be one of " + supported + ", got " + name);
}

// --- the registry
// ----------------------------------------------------------------------------------

namespace {
std::vector<Target>& MutableRegistry() {
  static auto* registry = new std::vector<Target>();
  return *registry;
}
}  // namespace

bool Register(const Target& target) {
  MutableRegistry().push_back(target);
  return true;
}

const std::vector<Target>& Registry() { return MutableRegistry(); }

}  // namespace ffi
}  // namespace opforge

// The library's FFI targets, one per line: "<target name> <handler symbol>". Built once, after
// every static registration has run.
extern "C" __attribute__((visibility("default"))) const char* OpforgeFfiTargets() {
  static const std::string text = [] {
    std::ostringstream out;
    for (const opforge::ffi::Target& t : opforge::ffi::Registry())
      out << t.name << ' ' << t.symbol << '\n';
    return out.str();
  }();
  return text.c_str();
}

// The signatures of the library's FFI targets (common/op_signature.h), one per line: "<target
// name>\t<inputs>\t<outputs>\t<attrs>\t<kValuesInput or -1>", for a host that builds its calls
// from them (opforge.jax: the results' element types).
extern "C" __attribute__((visibility("default"))) const char* OpforgeFfiSignatures() {
  static const std::string text = [] {
    std::ostringstream out;
    for (const opforge::ffi::Target& t : opforge::ffi::Registry()) {
      out << t.name << '\t' << t.signature->inputs << '\t' << t.signature->outputs << '\t'
          << t.signature->attrs << '\t' << t.values_input << '\n';
    }
    return out.str();
  }();
  return text.c_str();
}

// --- output inference for hosts that trace (opforge.jax) ----------------------------------------

// One attribute of OpforgeFfiInfer: `kind` 0 a float (data: one float), 1 an int (one int64),
// 2 a bool (one int64, 0 or 1), 3 a string (`count` chars), 4 a list of ints (`count` int64s),
// 5 a list of floats (`count` floats).
struct OpforgeFfiAttr {
  const char* name;
  int32_t kind;
  int64_t count;
  const void* data;
};

namespace opforge {
namespace ffi {
namespace {

enum AttrKind : int32_t { kFloat, kInt, kBool, kString, kInts, kFloats };

// opforge::AttrSource over OpforgeFfiInfer's attributes, with FfiAttrSource's messages.
class InferAttrSource final : public AttrSource {
 public:
  InferAttrSource(const OpforgeFfiAttr* attrs, int count, const char* target)
      : attrs_(attrs), count_(count), target_(target) {}
  Status Get(std::string_view name, float* value) const override {
    return Scalar(name, kFloat, "a float", value);
  }
  Status Get(std::string_view name, int64_t* value) const override {
    return Scalar(name, kInt, "an int", value);
  }
  Status Get(std::string_view name, bool* value) const override {
    int64_t v = 0;
    OPFORGE_RETURN_IF_ERROR(Scalar(name, kBool, "a bool", &v));
    *value = v != 0;
    return Status::Ok();
  }
  Status Get(std::string_view name, std::string* value) const override {
    Status status;
    const OpforgeFfiAttr* a = Find(name, kString, "a string", &status);
    if (a == nullptr) return status;
    value->assign(static_cast<const char*>(a->data), static_cast<size_t>(a->count));
    return Status::Ok();
  }
  Status Get(std::string_view name, std::vector<int64_t>* value) const override {
    return List(name, kInts, "a list of ints", value);
  }
  Status Get(std::string_view name, std::vector<float>* value) const override {
    return List(name, kFloats, "a list of floats", value);
  }

 private:
  const OpforgeFfiAttr* Find(std::string_view name, AttrKind kind, const char* what,
                             Status* status) const {
    for (int i = 0; i < count_; ++i) {
      if (name != attrs_[i].name) continue;
      if (attrs_[i].kind != kind) {
        *status = Status::Invalid(std::string(target_) + ": attribute '" + std::string(name) +
                                  "' must be " + what);
        return nullptr;
      }
      return &attrs_[i];
    }
    *status = Status::Invalid(std::string(target_) + ": the custom call has no attribute '" +
                              std::string(name) + "' (" + what + ")");
    return nullptr;
  }
  template <typename V>
  Status Scalar(std::string_view name, AttrKind kind, const char* what, V* value) const {
    Status status;
    const OpforgeFfiAttr* a = Find(name, kind, what, &status);
    if (a == nullptr) return status;
    *value = *static_cast<const V*>(a->data);
    return Status::Ok();
  }
  template <typename V>
  Status List(std::string_view name, AttrKind kind, const char* what, std::vector<V>* value) const {
    Status status;
    const OpforgeFfiAttr* a = Find(name, kind, what, &status);
    if (a == nullptr) return status;
    const auto* data = static_cast<const V*>(a->data);
    value->assign(data, data + a->count);
    return Status::Ok();
  }

  const OpforgeFfiAttr* attrs_;
  int count_;
  const char* target_;
};

void CopyMessage(const std::string& message, char* error, int64_t error_size) {
  if (error == nullptr || error_size <= 0) return;
  const size_t n = std::min(message.size(), static_cast<size_t>(error_size - 1));
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace
}  // namespace ffi
}  // namespace opforge

// The results of a call of `target` before it runs: its op struct's Init (from `attrs`) and
// Validate on the input shapes (`ranks`, then every input's dims one after another in `dims`),
// with the data of the inputs the host has on the host (`data`, null where it has not: an input
// whose values the op reads must be given) and a kValuesInput's values from the "opforge_values"
// attribute, in a kernel of element type `dtype` ("float32"). Writes each output's rank to
// `out_ranks` (-1 for an output the op leaves out: it is empty) and its dims to `out_dims`
// (`max_rank` slots an output), up to `num_outputs` outputs. Returns 0, or 1 for bad input and 2
// for a call this function cannot answer (no such target, too many outputs), with the message in
// `error`.
extern "C" __attribute__((visibility("default"))) int OpforgeFfiInfer(
    const char* target, const char* dtype, const OpforgeFfiAttr* attrs, int num_attrs,
    int num_inputs, const int32_t* ranks, const int64_t* dims, const void* const* data,
    int num_outputs, int max_rank, int32_t* out_ranks, int64_t* out_dims, char* error,
    int64_t error_size) {
  using namespace opforge;  // NOLINT: the entry point's body
  const ffi::Target* found = nullptr;
  for (const ffi::Target& t : ffi::Registry()) {
    if (std::strcmp(t.name, target) == 0) found = &t;
  }
  if (found == nullptr) {
    ffi::CopyMessage(std::string("opforge: no FFI target ") + target + " in this library", error,
                     error_size);
    return 2;
  }
  OpCall call;
  if (!ffi::DTypeByName(dtype, &call.dtype)) {
    ffi::CopyMessage(std::string(target) + ": no element type named " + dtype, error, error_size);
    return 2;
  }
  const int64_t* d = dims;
  for (int i = 0; i < num_inputs; ++i) {
    call.shapes.emplace_back(d, d + ranks[i]);
    d += ranks[i];
    call.inputs.push_back(data[i]);
  }
  const ffi::InferAttrSource source(attrs, num_attrs, target);
  if (found->values_input >= 0) {
    const Status s = source.Get(ffi::kValuesAttr, &call.values);
    if (!s.ok()) {
      ffi::CopyMessage(s.message(), error, error_size);
      return 2;
    }
  }
  const Status s = found->infer(source, &call);
  if (!s.ok()) {
    ffi::CopyMessage(s.message(), error, error_size);
    return s.code() == Status::Code::kInvalidArgument ? 1 : 2;
  }
  for (int i = 0; i < num_outputs; ++i) out_ranks[i] = -1;
  for (const OpCall::OutputSpec& spec : call.declared) {
    if (spec.index >= num_outputs || static_cast<int>(spec.dims.size()) > max_rank) {
      ffi::CopyMessage(std::string(target) + ": an output beyond what the host gave room for",
                       error, error_size);
      return 2;
    }
    out_ranks[spec.index] = static_cast<int32_t>(spec.dims.size());
    std::copy(spec.dims.begin(), spec.dims.end(), out_dims + spec.index * max_rank);
  }
  return 0;
}
