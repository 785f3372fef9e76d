// opforge's LiteRT (TensorFlow Lite) external delegate plugin, libopforge_lite.so.
//
// Loaded by tf.lite.experimental.load_delegate(path) or ai_edge_litert's load_delegate(path) and
// passed as experimental_delegates=[...]; it claims every node whose custom op name is one of
// the ops registered with OPFORGE_LITE_OP (common/lite_kernel.h), one partition per node, and
// runs the op struct on it. The library links nothing of TensorFlow or LiteRT: it uses only the
// C structs and function pointers of tensorflow/lite/core/c/common.h (TfLiteContext, TfLiteNode,
// TfLiteTensor, TfLiteRegistration, TfLiteDelegate), whose layout LiteRT keeps stable (fields are
// only appended), and checks that layout at run time before it touches anything (ProbeLayout).
// It exports tflite_plugin_create_delegate / tflite_plugin_destroy_delegate (the external
// delegate ABI) and OpforgeLiteOpNames(); everything else is hidden.
//
// Delegate options (strings): debug=1 prints the layout probe and the claimed nodes to stderr;
// strict_layout=0 runs even where the runtime's struct layout looks different.
#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "common/lite_kernel.h"
#include "flatbuffers/flexbuffers.h"
#include "tensorflow/lite/core/c/common.h"

#define OPFORGE_LITE_EXPORT extern "C" __attribute__((visibility("default")))

namespace opforge {
namespace lite {
namespace {

std::vector<LiteOpDef>& Registry() {
  static std::vector<LiteOpDef> registry;
  return registry;
}

const LiteOpDef* FindOp(const char* name) {
  if (name == nullptr) return nullptr;
  for (const LiteOpDef& def : Registry()) {
    if (std::strcmp(def.name, name) == 0) return &def;
  }
  return nullptr;
}

const char* LiteTypeName(int type) {
  static const char* const kNames[] = {"notype",  "float32", "int32",      "uint8",     "int64",
                                       "string",  "bool",    "int16",      "complex64", "int8",
                                       "float16", "float64", "complex128", "uint64",    "resource",
                                       "variant", "uint32",  "uint16",     "int4",      "bfloat16"};
  return type >= 0 && type < static_cast<int>(sizeof(kNames) / sizeof(kNames[0])) ? kNames[type]
                                                                                  : "unknown";
}

// --- attributes ---------------------------------------------------------------------------------

// The node's custom options as an AttrSource. The converter writes a TensorFlow node's attrs as
// a flexbuffer map: ints (int64), floats (as float64 holding the float32 value), bools, strings,
// and list attrs as vectors; it drops list attrs that are empty (explicit_paddings = []), so a
// missing list reads as an empty one (an op whose list may not be empty says so, naming it).
class FlexAttrSource final : public AttrSource {
 public:
  FlexAttrSource(const char* op, const void* data, size_t size) : op_(op) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    // Verified first: the options come from a model file, which may be damaged or hostile.
    if (bytes != nullptr && size > 0 && flexbuffers::VerifyBuffer(bytes, size)) {
      const flexbuffers::Reference root = flexbuffers::GetRoot(bytes, size);
      if (root.IsMap()) {
        map_ = root.AsMap();
        valid_ = true;
      }
    }
  }

  Status Get(std::string_view name, float* value) const override {
    flexbuffers::Reference r;
    OPFORGE_RETURN_IF_ERROR(Find(name, &r));
    if (!r.IsNumeric()) return Wrong(name, "a float", r);
    *value = static_cast<float>(r.AsDouble());
    return Status::Ok();
  }
  Status Get(std::string_view name, int64_t* value) const override {
    flexbuffers::Reference r;
    OPFORGE_RETURN_IF_ERROR(Find(name, &r));
    if (!r.IsIntOrUint()) return Wrong(name, "an int", r);
    *value = r.AsInt64();
    return Status::Ok();
  }
  Status Get(std::string_view name, bool* value) const override {
    flexbuffers::Reference r;
    OPFORGE_RETURN_IF_ERROR(Find(name, &r));
    if (!r.IsBool() && !r.IsIntOrUint()) return Wrong(name, "a bool", r);
    *value = r.AsBool();
    return Status::Ok();
  }
  Status Get(std::string_view name, std::string* value) const override {
    flexbuffers::Reference r;
    OPFORGE_RETURN_IF_ERROR(Find(name, &r));
    if (r.IsString()) {
      *value = r.AsString().str();
    } else if (r.IsBlob()) {
      const flexbuffers::Blob blob = r.AsBlob();
      value->assign(reinterpret_cast<const char*>(blob.data()), blob.size());
    } else {
      return Wrong(name, "a string", r);
    }
    return Status::Ok();
  }
  Status Get(std::string_view name, std::vector<int64_t>* value) const override {
    return GetList(
        name, value, "a list of ints",
        [](const flexbuffers::Reference& e) { return e.IsIntOrUint(); },
        [](const flexbuffers::Reference& e) { return e.AsInt64(); });
  }
  Status Get(std::string_view name, std::vector<float>* value) const override {
    return GetList(
        name, value, "a list of floats",
        [](const flexbuffers::Reference& e) { return e.IsNumeric(); },
        [](const flexbuffers::Reference& e) { return static_cast<float>(e.AsDouble()); });
  }

 private:
  Status Find(std::string_view name, flexbuffers::Reference* r) const {
    if (valid_) *r = map_[std::string(name)];
    if (!valid_ || r->IsNull()) {
      return Status::Invalid(std::string(op_) + ": attribute " + std::string(name) +
                             " is missing from the node's custom options" +
                             (valid_ ? "" : " (they are absent or not a flexbuffer map)"));
    }
    return Status::Ok();
  }
  Status Wrong(std::string_view name, const char* expected, const flexbuffers::Reference& r) const {
    return Status::Invalid(std::string(op_) + ": attribute " + std::string(name) + " must be " +
                           expected + ", got flexbuffer type " +
                           std::to_string(static_cast<int>(r.GetType())));
  }
  template <typename V, typename IsElement, typename AsElement>
  Status GetList(std::string_view name, std::vector<V>* value, const char* expected,
                 IsElement is_element, AsElement as_element) const {
    value->clear();
    if (!valid_) return Find(name, nullptr);
    const flexbuffers::Reference r = map_[std::string(name)];
    if (r.IsNull()) return Status::Ok();  // an empty list (see the class comment)
    if (r.IsUntypedVector()) {
      const flexbuffers::Vector v = r.AsVector();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!is_element(v[i])) return Wrong(name, expected, v[i]);
        value->push_back(as_element(v[i]));
      }
    } else if (r.IsTypedVector()) {
      const flexbuffers::TypedVector v = r.AsTypedVector();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!is_element(v[i])) return Wrong(name, expected, v[i]);
        value->push_back(as_element(v[i]));
      }
    } else if (r.IsFixedTypedVector()) {
      const flexbuffers::FixedTypedVector v = r.AsFixedTypedVector();
      for (size_t i = 0; i < v.size(); ++i) {
        if (!is_element(v[i])) return Wrong(name, expected, v[i]);
        value->push_back(as_element(v[i]));
      }
    } else {
      return Wrong(name, expected, r);
    }
    return Status::Ok();
  }

  const char* op_;
  flexbuffers::Map map_ = flexbuffers::Map::EmptyMap();
  bool valid_ = false;
};

// --- denormals ----------------------------------------------------------------------------------

// TensorFlow runs every CPU kernel with denormals flushed to zero (its executor and its thread
// pools hold port::ScopedFlushDenormal); LiteRT does not. The kernels run so here too, so that they
// give TensorFlow's bits (swish of -98 is -0 there, -4e-43 with denormals on).
class ScopedFlushDenormal {
 public:
  ScopedFlushDenormal() {
#if defined(__SSE__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | 0x8040);  // FTZ (bit 15) and DAZ (bit 6)
#elif defined(__aarch64__)
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
    const uint64_t flushed = saved_ | (uint64_t{1} << 24);  // FZ
    __asm__ __volatile__("msr fpcr, %0" : : "r"(flushed));
#endif
  }
  ~ScopedFlushDenormal() {
#if defined(__SSE__)
    _mm_setcsr(saved_);
#elif defined(__aarch64__)
    __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_));
#endif
  }
  ScopedFlushDenormal(const ScopedFlushDenormal&) = delete;
  ScopedFlushDenormal& operator=(const ScopedFlushDenormal&) = delete;

 private:
#if defined(__SSE__)
  unsigned int saved_ = 0;
#else
  uint64_t saved_ = 0;
#endif
};

// --- threads ------------------------------------------------------------------------------------

// A small persistent pool: `size() - 1` workers and the calling thread run the chunks of one
// Run at a time. A Run that finds the pool busy (another interpreter, or a kernel's nested
// parallel loop) runs its chunks inline: the core's results do not depend on the partition.
class ThreadPool {
 public:
  ~ThreadPool() { Resize(1); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void Resize(int threads) {
    threads = std::max(1, std::min(threads, 256));
    std::lock_guard<std::mutex> run(run_mu_);
    if (threads == size()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
  }

  void Run(int chunks, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock() || workers_.empty() || chunks <= 1) {
      for (int i = 0; i < chunks; ++i) task(i);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      next_ = 0;
      chunks_ = chunks;
      pending_ = chunks;
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    while (next_ < chunks_) {
      const int i = next_++;
      lock.unlock();
      task(i);
      lock.lock();
      --pending_;
    }
    done_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || (task_ != nullptr && next_ < chunks_); });
      if (stop_) return;
      const int i = next_++;
      const std::function<void(int)>* task = task_;
      lock.unlock();
      {
        ScopedFlushDenormal flush;  // as on the calling thread (KernelInvoke)
        (*task)(i);
      }
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex run_mu_;  // one Run (or Resize) at a time
  std::mutex mu_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int next_ = 0, chunks_ = 0, pending_ = 0;
  bool stop_ = false;
};

// opforge::Parallel over the pool. Work below ~one shard's worth runs inline (as TensorFlow's
// Shard does), so small tensors pay no hand-off.
class PoolParallel final : public Parallel {
 public:
  explicit PoolParallel(ThreadPool* pool) : pool_(pool) {}
  void For(int64_t total, double cost_per_unit, const Fn& fn) const override {
    if (total <= 0) return;
    constexpr double kMinShardCost = 20000;  // cycles
    const double work = static_cast<double>(total) * std::max(cost_per_unit, 1.0);
    const int threads = pool_->size();
    int64_t shards = std::min<int64_t>(total, 4 * static_cast<int64_t>(threads));
    shards = std::min<int64_t>(shards, static_cast<int64_t>(work / kMinShardCost));
    if (threads <= 1 || shards <= 1) {
      fn(0, total);
      return;
    }
    pool_->Run(static_cast<int>(shards), [&](int i) {
      const int64_t begin = total / shards * i + std::min<int64_t>(i, total % shards);
      const int64_t end = begin + total / shards + (i < total % shards ? 1 : 0);
      fn(begin, end);
    });
  }

 private:
  ThreadPool* pool_;
};

// --- the delegate
// ---------------------------------------------------------------------------------

struct Options {
  bool debug = false;
  bool strict_layout = true;
};

struct DelegateState {
  Options options;
  ThreadPool pool;
};

void Log(const Options& o, const char* format, ...) {
  if (!o.debug) return;
  va_list args;
  va_start(args, format);
  std::fprintf(stderr, "[opforge-lite] ");
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
}

// One claimed node: the original custom node's tensors (a delegate node's own input list is
// the partition's, deduplicated and without constants, not the op's argument order), its op.
struct NodeState {
  const LiteOpDef* def = nullptr;
  DelegateState* delegate = nullptr;
  std::unique_ptr<LiteOp> op;
  Status init;
  std::vector<int> inputs, outputs;
};

TfLiteStatus Fail(TfLiteContext* context, const std::string& message) {
  context->ReportError(context, "%s", message.c_str());
  return kTfLiteError;
}

bool IsConstant(const TfLiteTensor& t) {
  return (t.allocation_type == kTfLiteMmapRo || t.allocation_type == kTfLitePersistentRo) &&
         (t.data.raw != nullptr || t.bytes == 0);
}

TfLiteIntArray* NewIntArray(const std::vector<int64_t>& dims) {
  // TfLiteIntArrayCreate's layout (int size; int data[]), freed by LiteRT with free(): this
  // library links no LiteRT function.
  auto* array = static_cast<TfLiteIntArray*>(std::malloc(sizeof(int) * (dims.size() + 1)));
  if (array == nullptr) return nullptr;
  array->size = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) array->data[i] = static_cast<int>(dims[i]);
  return array;
}

bool SameDims(const TfLiteIntArray* a, const std::vector<int64_t>& dims) {
  if (a == nullptr || a->size != static_cast<int>(dims.size())) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (a->data[i] != dims[i]) return false;
  }
  return true;
}

// Reads the int32/int64 values of the op's kValuesInput.
Status ReadValues(const NodeState& s, const TfLiteTensor& t, std::vector<int64_t>* values) {
  values->clear();
  int64_t n = 1;
  for (int i = 0; i < t.dims->size; ++i) n *= t.dims->data[i];
  if (t.type != kTfLiteInt32 && t.type != kTfLiteInt64) {
    return Status::Invalid(std::string(s.def->name) + ": input " +
                           std::to_string(s.op->values_input()) + " must be int32 or int64, got " +
                           LiteTypeName(t.type));
  }
  const size_t element = t.type == kTfLiteInt32 ? 4 : 8;
  if (n < 0 || (n > 0 && t.data.raw == nullptr) || t.bytes < static_cast<size_t>(n) * element) {
    return Status::Invalid(std::string(s.def->name) + ": input " +
                           std::to_string(s.op->values_input()) + " has no data");
  }
  for (int64_t i = 0; i < n; ++i) {
    values->push_back(t.type == kTfLiteInt32 ? t.data.i32[i] : t.data.i64[i]);
  }
  return Status::Ok();
}

// Fills `call` from the node's input tensors: shapes, data (only of constant tensors unless
// `with_data`: in prepare the others hold nothing yet) and the values of kValuesInput.
Status FillCall(TfLiteContext* context, const NodeState& s, bool with_data, OpCall* call) {
  call->shapes.clear();
  call->inputs.clear();
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    const TfLiteTensor& t = context->tensors[s.inputs[i]];
    std::vector<int64_t> shape(t.dims->data, t.dims->data + t.dims->size);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    call->shapes.push_back(std::move(shape));
    call->inputs.push_back(n > 0 && (with_data || IsConstant(t)) ? t.data.raw : nullptr);
  }
  const int values = s.op->values_input();
  if (values >= 0) {
    if (values >= static_cast<int>(s.inputs.size())) {
      return Status::Invalid(std::string(s.def->name) + ": the node has " +
                             std::to_string(s.inputs.size()) + " inputs, the op reads input " +
                             std::to_string(values));
    }
    OPFORGE_RETURN_IF_ERROR(ReadValues(s, context->tensors[s.inputs[values]], &call->values));
  }
  return Status::Ok();
}

void* KernelInit(TfLiteContext* context, const char* buffer, size_t) {
  const auto* params = reinterpret_cast<const TfLiteDelegateParams*>(buffer);
  auto state = std::make_unique<NodeState>();
  state->delegate = static_cast<DelegateState*>(params->delegate->data_);
  TfLiteNode* node = nullptr;
  TfLiteRegistration* registration = nullptr;
  if (params->nodes_to_replace->size != 1 ||
      context->GetNodeAndRegistration(context, params->nodes_to_replace->data[0], &node,
                                      &registration) != kTfLiteOk ||
      (state->def = FindOp(registration->custom_name)) == nullptr) {
    state->init = Status::Internal("opforge LiteRT delegate: a partition is not one opforge node");
    return state.release();
  }
  state->inputs.assign(node->inputs->data, node->inputs->data + node->inputs->size);
  state->outputs.assign(node->outputs->data, node->outputs->data + node->outputs->size);
  state->op = state->def->make();
  FlexAttrSource source(state->def->name, node->custom_initial_data,
                        static_cast<size_t>(std::max(node->custom_initial_data_size, 0)));
  AttrReader reader(source);
  state->init = state->op->Init(reader);
  return state.release();
}

void KernelFree(TfLiteContext*, void* buffer) { delete static_cast<NodeState*>(buffer); }

// Checks what every call needs: the node's inputs exist, input 0's type has a kernel.
Status CheckNode(TfLiteContext* context, const NodeState& s) {
  OPFORGE_RETURN_IF_ERROR(s.init);
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    if (s.inputs[i] < 0 || static_cast<size_t>(s.inputs[i]) >= context->tensors_size) {
      return Status::Invalid(std::string(s.def->name) + ": input " + std::to_string(i) +
                             " is missing");
    }
  }
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    if (s.outputs[i] < 0 || static_cast<size_t>(s.outputs[i]) >= context->tensors_size) {
      return Status::Invalid(std::string(s.def->name) + ": output " + std::to_string(i) +
                             " is missing");
    }
  }
  if (s.inputs.empty())
    return Status::Invalid(std::string(s.def->name) + ": the node has no inputs");
  const int type = context->tensors[s.inputs[0]].type;
  if (!s.op->Supports(type)) {
    return Status::Invalid(std::string(s.def->name) + ": input 0 has element type " +
                           LiteTypeName(type) + ", which opforge's LiteRT kernel does not take (" +
                           s.op->TypeNames() + ")");
  }
  return Status::Ok();
}

// The declared output shapes as LiteRT's int dims.
Status CheckDeclared(const NodeState& s, const OpCall& call) {
  for (const OpCall::OutputSpec& spec : call.declared) {
    if (spec.index < 0 || spec.index >= static_cast<int>(s.outputs.size())) {
      return Status::Invalid(std::string(s.def->name) + ": the node has " +
                             std::to_string(s.outputs.size()) + " outputs, the op writes output " +
                             std::to_string(spec.index));
    }
    for (int64_t d : spec.dims) {
      if (d < 0 || d > INT_MAX) {
        return Status::Invalid(std::string(s.def->name) + ": output " + std::to_string(spec.index) +
                               " would have shape " + ShapeString(spec.dims) +
                               ", past LiteRT's int dimensions");
      }
    }
  }
  return Status::Ok();
}

TfLiteStatus KernelPrepare(TfLiteContext* context, TfLiteNode* node) {
  auto* s = static_cast<NodeState*>(node->user_data);
  if (s == nullptr) return Fail(context, "opforge LiteRT delegate: kernel init failed");
  if (s->def == nullptr) return Fail(context, s->init.message());
  Status status = CheckNode(context, *s);
  if (!status.ok()) return Fail(context, status.message());
  s->delegate->pool.Resize(context->recommended_num_threads > 0 ? context->recommended_num_threads
                                                                : 1);
  // Validate now where everything it reads is there: every input's shape, and the values of
  // kValuesInput and of the host inputs (constant tensors only). Else outputs are sized at invoke.
  bool ready = true;
  for (size_t i = 0; i < s->inputs.size(); ++i) {
    const TfLiteTensor& t = context->tensors[s->inputs[i]];
    const bool host =
        static_cast<int>(i) == s->op->values_input() ||
        (s->def->first_host_input >= 0 && static_cast<int>(i) >= s->def->first_host_input);
    if (t.allocation_type == kTfLiteDynamic || (host && !IsConstant(t))) ready = false;
  }
  if (!ready) {
    for (int index : s->outputs) {
      TfLiteTensor& t = context->tensors[index];
      if (t.allocation_type != kTfLiteDynamic) {
        // What LiteRT's SetTensorToDynamic does; an arena tensor's data is the arena's.
        if (t.allocation_type != kTfLiteArenaRw && t.allocation_type != kTfLiteArenaRwPersistent) {
          std::free(t.data.raw);
        }
        t.data.raw = nullptr;
        t.allocation_type = kTfLiteDynamic;
      }
    }
    return kTfLiteOk;
  }
  OpCall call;
  status = FillCall(context, *s, /*with_data=*/false, &call);
  if (status.ok()) status = s->op->Validate(context->tensors[s->inputs[0]].type, call);
  if (status.ok()) status = CheckDeclared(*s, call);
  if (!status.ok()) return Fail(context, status.message());
  for (const OpCall::OutputSpec& spec : call.declared) {
    TfLiteTensor* t = &context->tensors[s->outputs[static_cast<size_t>(spec.index)]];
    if (SameDims(t->dims, spec.dims) && t->allocation_type != kTfLiteDynamic) continue;
    TfLiteIntArray* dims = NewIntArray(spec.dims);
    if (dims == nullptr || context->ResizeTensor(context, t, dims) != kTfLiteOk) {
      return Fail(context, std::string(s->def->name) + ": could not size output " +
                               std::to_string(spec.index) + " to " + ShapeString(spec.dims));
    }
  }
  return kTfLiteOk;
}

TfLiteStatus KernelInvoke(TfLiteContext* context, TfLiteNode* node) {
  auto* s = static_cast<NodeState*>(node->user_data);
  if (s == nullptr || s->def == nullptr || !s->init.ok()) {
    return Fail(context, "opforge LiteRT delegate: the node was not prepared");
  }
  const int type = context->tensors[s->inputs[0]].type;
  OpCall call;
  Status status = FillCall(context, *s, /*with_data=*/true, &call);
  if (status.ok()) status = s->op->Validate(type, call);
  if (status.ok()) status = CheckDeclared(*s, call);
  if (!status.ok()) return Fail(context, status.message());
  call.outputs.assign(s->outputs.size(), nullptr);
  call.output_bytes.assign(s->outputs.size(), 0);
  bool any = false;
  for (const OpCall::OutputSpec& spec : call.declared) {
    TfLiteTensor* t = &context->tensors[s->outputs[static_cast<size_t>(spec.index)]];
    if (t->allocation_type == kTfLiteDynamic) {
      if (!SameDims(t->dims, spec.dims) || (t->data.raw == nullptr && t->bytes > 0)) {
        TfLiteIntArray* dims = NewIntArray(spec.dims);
        if (dims == nullptr || context->ResizeTensor(context, t, dims) != kTfLiteOk) {
          return Fail(context, std::string(s->def->name) + ": could not size output " +
                                   std::to_string(spec.index) + " to " + ShapeString(spec.dims));
        }
      }
    } else if (!SameDims(t->dims, spec.dims)) {
      return Fail(
          context,
          std::string(s->def->name) + ": output " + std::to_string(spec.index) + " has shape " +
              ShapeString(std::vector<int64_t>(t->dims->data, t->dims->data + t->dims->size)) +
              " but the inputs give " + ShapeString(spec.dims) +
              " (inputs resized without allocate_tensors?)");
    }
    int64_t n = 1;
    for (int64_t d : spec.dims) n *= d;
    if (n == 0) continue;
    if (t->data.raw == nullptr) {
      return Fail(context, std::string(s->def->name) + ": output " + std::to_string(spec.index) +
                               " has no buffer");
    }
    call.outputs[static_cast<size_t>(spec.index)] = t->data.raw;
    call.output_bytes[static_cast<size_t>(spec.index)] = t->bytes;
    any = true;
  }
  if (!any) return kTfLiteOk;
  PoolParallel parallel(&s->delegate->pool);
  {
    ScopedFlushDenormal flush;
    status = s->op->Run(type, call, parallel);
  }
  if (!status.ok()) return Fail(context, status.message());
  return kTfLiteOk;
}

// --- layout probe -------------------------------------------------------------------------------

// By-value TfLiteRegistration guard: ReplaceNodeSubsetsWithDelegateKernels takes the struct by
// value, and on every mainstream ABI (x86-64 SysV, AArch64, Win64) a struct this large is passed
// in memory, of which the callee reads sizeof(its struct) bytes. A larger struct with a zero tail
// stays correct where a newer runtime appended fields (zero is their default).
struct PaddedRegistration {
  TfLiteRegistration registration;
  unsigned char zero_tail[256];
};
using ReplaceFn = TfLiteStatus (*)(TfLiteContext*, PaddedRegistration, const TfLiteIntArray*,
                                   TfLiteDelegate*);

// The runtime's struct sizes, from pointer differences (LiteRT keeps nodes as
// std::vector<std::pair<TfLiteNode, TfLiteRegistration>> and tensors as one array): false where
// they differ from the ones this library was compiled with.
bool ProbeLayout(TfLiteContext* context, const TfLiteIntArray* plan, const Options& o) {
  bool ok = true;
  size_t sane = 0;
  for (size_t i = 0; i < context->tensors_size; ++i) {
    const TfLiteTensor& t = context->tensors[i];
    bool good = static_cast<unsigned>(t.type) < 64 && t.dims != nullptr && t.dims->size >= 0 &&
                t.dims->size <= 16;
    if (good && t.type == kTfLiteFloat32 && t.allocation_type != kTfLiteDynamic) {
      size_t n = 1;
      for (int k = 0; k < t.dims->size; ++k) n *= static_cast<size_t>(t.dims->data[k]);
      good = t.bytes == 4 * n;
    }
    sane += good;
  }
  Log(o, "probe: %zu/%zu tensors sane with sizeof(TfLiteTensor)=%zu", sane, context->tensors_size,
      sizeof(TfLiteTensor));
  ok &= sane == context->tensors_size;
  if (context->tensors_size >= 2 && context->GetTensor != nullptr) {
    const ptrdiff_t stride = reinterpret_cast<char*>(context->GetTensor(context, 1)) -
                             reinterpret_cast<char*>(context->GetTensor(context, 0));
    Log(o, "probe: runtime sizeof(TfLiteTensor)=%td", stride);
    ok &= stride == static_cast<ptrdiff_t>(sizeof(TfLiteTensor)) &&
          context->GetTensor(context, 1) == &context->tensors[1];
  }
  if (plan->size >= 2) {
    TfLiteNode *n0 = nullptr, *n1 = nullptr;
    TfLiteRegistration *r0 = nullptr, *r1 = nullptr;
    if (context->GetNodeAndRegistration(context, 0, &n0, &r0) == kTfLiteOk &&
        context->GetNodeAndRegistration(context, 1, &n1, &r1) == kTfLiteOk) {
      const ptrdiff_t node = reinterpret_cast<char*>(r0) - reinterpret_cast<char*>(n0);
      const ptrdiff_t pair = reinterpret_cast<char*>(n1) - reinterpret_cast<char*>(n0);
      Log(o,
          "probe: runtime sizeof(TfLiteNode)=%td (compiled %zu), sizeof(TfLiteRegistration)=%td "
          "(compiled %zu, passed %zu)",
          node, sizeof(TfLiteNode), pair - node, sizeof(TfLiteRegistration),
          sizeof(PaddedRegistration));
      ok &= node == static_cast<ptrdiff_t>(sizeof(TfLiteNode));
      ok &= pair - node <= static_cast<ptrdiff_t>(sizeof(PaddedRegistration));
    }
  }
  return ok;
}

TfLiteStatus DelegatePrepare(TfLiteContext* context, TfLiteDelegate* delegate) {
  const Options& o = static_cast<DelegateState*>(delegate->data_)->options;
  TfLiteIntArray* plan = nullptr;
  if (context->GetExecutionPlan(context, &plan) != kTfLiteOk) return kTfLiteError;
  if (!ProbeLayout(context, plan, o) && o.strict_layout) {
    context->ReportError(context,
                         "opforge LiteRT delegate: this runtime's TfLite struct layout differs "
                         "from the one libopforge_lite.so was built for; refusing to run it "
                         "(delegate option strict_layout=0 overrides)");
    return kTfLiteDelegateError;
  }
  // Collected first: the plan array is invalidated by ReplaceNodeSubsetsWithDelegateKernels.
  std::vector<int> claimed;
  for (int i = 0; i < plan->size; ++i) {
    TfLiteNode* node = nullptr;
    TfLiteRegistration* registration = nullptr;
    if (context->GetNodeAndRegistration(context, plan->data[i], &node, &registration) !=
        kTfLiteOk) {
      return kTfLiteError;
    }
    if (FindOp(registration->custom_name) != nullptr) {
      Log(o, "node %d: %s", plan->data[i], registration->custom_name);
      claimed.push_back(plan->data[i]);
    }
  }
  PaddedRegistration padded;
  std::memset(&padded, 0, sizeof(padded));
  padded.registration.init = KernelInit;
  padded.registration.free = KernelFree;
  padded.registration.prepare = KernelPrepare;
  padded.registration.invoke = KernelInvoke;
  padded.registration.custom_name = "OpforgeLiteDelegate";
  padded.registration.version = 1;
  auto replace = reinterpret_cast<ReplaceFn>(context->ReplaceNodeSubsetsWithDelegateKernels);
  for (int index : claimed) {  // one partition per node: each keeps its own kernel
    struct {
      int size;
      int data[1];
    } one = {1, {index}};  // a TfLiteIntArray of one element
    const TfLiteStatus status =
        replace(context, padded, reinterpret_cast<const TfLiteIntArray*>(&one), delegate);
    if (status != kTfLiteOk) return status;
  }
  Log(o, "claimed %zu node(s)", claimed.size());
  return kTfLiteOk;
}

}  // namespace

void RegisterLiteOp(const LiteOpDef& def) { Registry().push_back(def); }

}  // namespace lite
}  // namespace opforge

OPFORGE_LITE_EXPORT TfLiteDelegate* tflite_plugin_create_delegate(
    char** keys, char** values, size_t num_options, void (*report_error)(const char*)) {
  using opforge::lite::DelegateState;
  auto state = std::make_unique<DelegateState>();
  for (size_t i = 0; i < num_options; ++i) {
    const bool on = std::strcmp(values[i], "0") != 0 && std::strcmp(values[i], "false") != 0;
    if (std::strcmp(keys[i], "debug") == 0) {
      state->options.debug = on;
    } else if (std::strcmp(keys[i], "strict_layout") == 0) {
      state->options.strict_layout = on;
    } else {
      if (report_error != nullptr) {
        const std::string message = std::string("opforge LiteRT delegate: unknown option ") +
                                    keys[i] + " (options: debug, strict_layout)";
        report_error(message.c_str());
      }
      return nullptr;
    }
  }
  auto delegate = std::make_unique<TfLiteDelegate>();
  std::memset(delegate.get(), 0, sizeof(TfLiteDelegate));  // TfLiteDelegateCreate(), unlinked
  delegate->data_ = state.release();
  delegate->Prepare = opforge::lite::DelegatePrepare;
  delegate->flags = kTfLiteDelegateFlagsAllowDynamicTensors;
  return delegate.release();
}

OPFORGE_LITE_EXPORT void tflite_plugin_destroy_delegate(TfLiteDelegate* delegate) {
  if (delegate == nullptr) return;
  delete static_cast<opforge::lite::DelegateState*>(delegate->data_);
  delete delegate;
}

// The custom op names this library runs, comma-separated (opforge.lite checks a model's ops
// against them before LiteRT would fail with "unresolved custom op").
OPFORGE_LITE_EXPORT const char* OpforgeLiteOpNames() {
  static const std::string names = [] {
    std::string joined;
    for (const opforge::lite::LiteOpDef& def : opforge::lite::Registry()) {
      joined += (joined.empty() ? "" : ",") + std::string(def.name);
    }
    return joined;
  }();
  return names.c_str();
}
