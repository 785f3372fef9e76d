// XLA lowerings of opforge ops (cc/ops/<op>/<op>_xla.cc): the tf2xla and XLA builder headers,
// and OPFORGE_REGISTER_XLA_OP, which registers an XlaOpKernel so that it works whenever the
// library is loaded.
//
// TensorFlow turns XLA op registrations (XlaOpRegistrar) into kernels for the XLA_CPU_JIT and
// XLA_GPU_JIT devices once per process, in XlaOpRegistry::RegisterCompilationKernels(), the
// first time anything is compiled with XLA. A registration that arrives later (opforge loaded
// after a first tf.function(jit_compile=True) ran) is recorded but never becomes a kernel, and
// the op fails with "No registered ... OpKernel for XLA_CPU_JIT devices". So the registration
// here also checks whether that pass already ran (TensorFlow's own XLA kernel of NoOp exists)
// and, if it did, registers the op's JIT kernels itself, as the pass would have: one KernelDef
// per JIT backend, each type attribute constrained to the op def's allowed types that the
// backend supports.
//
// The file is compiled only into the binding, and only when CMake found TensorFlow's XLA
// library (libtensorflow_cc.so.2) and its headers (see the XLA block of CMakeLists.txt).
#ifndef OPFORGE_COMMON_TF_XLA_H_
#define OPFORGE_COMMON_TF_XLA_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/op_call.h"
#include "common/tf_glue.h"
#include "common/tf_kernel.h"
#if OPFORGE_XLA_FFI
#include "common/xla_ffi.h"
#endif
#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/compiler/tf2xla/xla_helpers.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/attr_value.pb.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_def.pb.h"
// The XLA builder moved from xla/client/ (TensorFlow 2.16, 2.17) to xla/hlo/builder/ (2.18 on).
#if __has_include("xla/hlo/builder/xla_builder.h")
#include "xla/hlo/builder/xla_builder.h"
#else
#include "xla/client/xla_builder.h"
#endif

#if OPFORGE_XLA_FFI
// XLA's FFI API of the running process, exported by libtensorflow_cc.so.2. Its own header
// (xla/ffi/ffi_api.h) includes XLA internals; the declaration is all a caller needs.
namespace xla {
namespace ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla
#endif

namespace opforge {
namespace xla_glue {

// The ops this library lowers to XLA, in registration order, and whether any was registered
// after TensorFlow's registration pass (so by OPFORGE_REGISTER_XLA_OP itself). Read from Python
// through OpforgeXlaLoweredOps() (opforge/_loader.py).
inline std::vector<std::string>& LoweredOps() {
  static auto* ops = new std::vector<std::string>;
  return *ops;
}
inline bool& RegisteredLate() {
  static bool late = false;
  return late;
}

// True once TensorFlow has turned the XLA op registrations into JIT kernels.
inline bool JitKernelsRegistered() {
  tensorflow::NodeDef probe;
  probe.set_name("opforge_xla_probe");
  probe.set_op("NoOp");
  const tensorflow::KernelDef* kdef = nullptr;
  return tensorflow::FindKernelDef(tensorflow::DeviceType(tensorflow::DEVICE_CPU_XLA_JIT), probe,
                                   &kdef, nullptr)
      .ok();
}

// What RegisterCompilationKernels() does for one op without device or type restrictions.
inline void RegisterJitKernelsNow(const std::string& op,
                                  tensorflow::XlaOpRegistry::Factory factory) {
  const tensorflow::OpDef* op_def = nullptr;
  if (!tensorflow::OpRegistry::Global()->LookUpOpDef(op, &op_def).ok()) return;
  // The type lists' lengths differ between TensorFlow versions (22 in 2.16, 25 in 2.21).
  struct Backend {
    const char* device;
    const tensorflow::DataType* types;
    size_t count;
  };
  const Backend backends[] = {
      {tensorflow::DEVICE_CPU_XLA_JIT, tensorflow::kCpuAllTypes.data(),
       tensorflow::kCpuAllTypes.size()},
      {tensorflow::DEVICE_GPU_XLA_JIT, tensorflow::kGpuAllTypes.data(),
       tensorflow::kGpuAllTypes.size()}};
  const std::string existing = tensorflow::KernelsRegisteredForOp(op);
  for (const Backend& backend : backends) {
    if (!tensorflow::XlaOpRegistry::IsBackendRegistered(backend.device)) continue;
    // Registered meanwhile by TensorFlow's own pass (a compilation running in another thread).
    if (existing.find(std::string("device='") + backend.device + "'") != std::string::npos) {
      continue;
    }
    auto kdef = std::make_unique<tensorflow::KernelDef>();
    kdef->set_op(op);
    kdef->set_device_type(backend.device);
    bool satisfiable = true;
    for (const auto& attr : op_def->attr()) {
      if (attr.type() != "type" && attr.type() != "list(type)") continue;
      auto* allowed = kdef->add_constraint();
      allowed->set_name(attr.name());
      auto* list = allowed->mutable_allowed_values()->mutable_list();
      const auto& op_types = attr.allowed_values().list().type();
      for (size_t t = 0; t < backend.count; ++t) {
        const tensorflow::DataType dtype = backend.types[t];
        if (attr.has_allowed_values() &&
            std::find(op_types.begin(), op_types.end(), dtype) == op_types.end()) {
          continue;
        }
        list->add_type(dtype);
      }
      if (list->type().empty()) satisfiable = false;
    }
    if (!satisfiable) continue;
    // Kept for the life of the process, as TensorFlow keeps its own registrars.
    new tensorflow::kernel_factory::OpKernelRegistrar(kdef.release(), "XlaJitOp", factory);
  }
}

// The dimensions of input `index` (the static shape XLA compiles for).
inline absl::Status InputDims(tensorflow::XlaOpKernelContext* context, int index,
                              std::vector<int64_t>* dims) {
  absl::StatusOr<xla::Shape> shape = context->InputXlaShape(index);
  if (!shape.ok()) return shape.status();
  dims->assign(shape->dimensions().begin(), shape->dimensions().end());
  return absl::OkStatus();
}

// Creates the XLA kernel `Kernel` (an XlaOpKernel).
template <typename Kernel>
tensorflow::OpKernel* CreateXlaKernel(tensorflow::OpKernelConstruction* context) {
  return new Kernel(context);
}

// Registers an XLA kernel: with TensorFlow's registry, and as JIT kernels right away when
// TensorFlow's registration pass has already run.
struct XlaRegistration {
  // std::unique_ptr<XlaOpRegistry::OpRegistration> (a type private to the registry).
  using Registration =
      decltype(std::declval<tensorflow::XlaOpRegistrationBuilder&>().Build(nullptr));
  XlaRegistration(const char* op, Registration registration,
                  tensorflow::XlaOpRegistry::Factory factory) {
    tensorflow::XlaOpRegistrar registrar(std::move(registration));
    LoweredOps().push_back(op);
    if (JitKernelsRegistered()) {
      RegisteredLate() = true;
      RegisterJitKernelsNow(op, factory);
    }
  }
};

#if OPFORGE_XLA_FFI
// --- ops as XLA FFI custom calls ------------------------------------------------------------
//
// An op without an exact HLO lowering runs under XLA as a typed-FFI custom call to its op
// struct's handler (common/xla_ffi.h, cc/ops/<op>/<op>_ffi.cc): FfiCallKernel<Op> below is its
// tf2xla kernel. At compile time it runs the op struct's Init and Validate on the static shapes
// (and on the values of the op's compile-time constant inputs: its sizes, thresholds, anchors),
// so bad input fails the compilation with the message the op gives outside XLA, and the output
// shapes are the ones the op declares; it then emits
//   custom_call(target = the op's name, every input, attributes = the node's attrs)
// which XLA runs by calling the handler, registered with TensorFlow's XLA (platform "Host") when
// the library loads. The handler runs the same core as TensorFlow's kernel: the same bits.

// The opforge name of a TensorFlow element type ("float32"), or "" for none.
inline const char* FfiTypeName(tensorflow::DataType dtype) {
  switch (dtype) {
    case tensorflow::DT_HALF:
      return DTypeName(DType::kHalf);
    case tensorflow::DT_BFLOAT16:
      return DTypeName(DType::kBFloat16);
    case tensorflow::DT_FLOAT:
      return DTypeName(DType::kFloat);
    case tensorflow::DT_DOUBLE:
      return DTypeName(DType::kDouble);
    case tensorflow::DT_INT32:
      return DTypeName(DType::kInt32);
    case tensorflow::DT_INT64:
      return DTypeName(DType::kInt64);
    case tensorflow::DT_INT8:
      return DTypeName(DType::kInt8);
    case tensorflow::DT_UINT8:
      return DTypeName(DType::kUInt8);
    case tensorflow::DT_INT16:
      return DTypeName(DType::kInt16);
    case tensorflow::DT_UINT16:
      return DTypeName(DType::kUInt16);
    case tensorflow::DT_UINT32:
      return DTypeName(DType::kUInt32);
    case tensorflow::DT_UINT64:
      return DTypeName(DType::kUInt64);
    case tensorflow::DT_COMPLEX64:
      return DTypeName(DType::kComplex64);
    case tensorflow::DT_COMPLEX128:
      return DTypeName(DType::kComplex128);
    default:
      return "";
  }
}

// An MLIR string literal: printable ASCII as it is, but quote and backslash; those and the rest
// as \XX.
inline std::string MlirString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "\\%02X", c);
      out += hex;
    }
  }
  return out + "\"";
}

// A float32 as an MLIR literal: its bit pattern (exact, infinities and NaNs included).
inline std::string MlirF32Bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08X", bits);
  return text;
}

// The attributes of a custom call (an MLIR dictionary, the typed FFI's backend_config) from a
// node's attrs: float -> f32, int -> i64, bool, string, type -> its name ("float32"),
// list(int) -> array<i64>, list(float) -> array<f32>; attrs starting with '_' (TensorFlow's
// own) are left out. `values`, if given, becomes "opforge_values" (common/xla_ffi.h).
inline absl::Status FfiAttributes(const tensorflow::NodeDef& def, const std::vector<int64_t>* values,
                                  std::string* text) {
  std::vector<std::string> names;
  for (const auto& entry : def.attr()) {
    if (!entry.first.empty() && entry.first[0] != '_') names.push_back(entry.first);
  }
  std::sort(names.begin(), names.end());  // a stable text: one compilation cache entry
  std::string out = "{";
  auto add = [&](const std::string& name, const std::string& value) {
    if (out.size() > 1) out += ", ";
    out += MlirString(name) + " = " + value;
  };
  for (const std::string& name : names) {
    const tensorflow::AttrValue& v = def.attr().at(name);
    switch (v.value_case()) {
      case tensorflow::AttrValue::kF:
        add(name, MlirF32Bits(v.f()) + " : f32");
        break;
      case tensorflow::AttrValue::kI:
        add(name, std::to_string(v.i()) + " : i64");
        break;
      case tensorflow::AttrValue::kB:
        add(name, v.b() ? "true" : "false");
        break;
      case tensorflow::AttrValue::kS:
        add(name, MlirString(v.s()));
        break;
      case tensorflow::AttrValue::kType: {
        const char* type = FfiTypeName(v.type());
        if (*type == '\0') {
          return absl::InvalidArgumentError("opforge: attr " + name + " of " + def.op() +
                                            " has an element type XLA FFI cannot name");
        }
        add(name, MlirString(type));
        break;
      }
      case tensorflow::AttrValue::kList: {
        const auto& list = v.list();
        if (list.f_size() > 0) {
          std::string items;
          for (float f : list.f()) items += (items.empty() ? "" : ", ") + MlirF32Bits(f);
          add(name, "array<f32: " + items + ">");
        } else if (list.i_size() > 0 || (list.s_size() == 0 && list.type_size() == 0 &&
                                         list.b_size() == 0 && list.shape_size() == 0)) {
          // An empty list has no element type in the NodeDef: the op's lists are of ints.
          std::string items;
          for (int64_t i : list.i()) items += (items.empty() ? "" : ", ") + std::to_string(i);
          add(name, items.empty() ? "array<i64>" : "array<i64: " + items + ">");
        } else {
          return absl::InvalidArgumentError("opforge: attr " + name + " of " + def.op() +
                                            " is a list XLA FFI attributes cannot carry");
        }
        break;
      }
      default:
        return absl::InvalidArgumentError("opforge: attr " + name + " of " + def.op() +
                                          " has a kind XLA FFI attributes cannot carry");
    }
  }
  if (values != nullptr) {
    std::string items;
    for (int64_t i : *values) items += (items.empty() ? "" : ", ") + std::to_string(i);
    add(ffi::kValuesAttr, items.empty() ? "array<i64>" : "array<i64: " + items + ">");
  }
  *text = out + "}";
  return absl::OkStatus();
}

// The tf2xla kernel of an op run as an FFI custom call (see above).
template <typename Op>
class FfiCallKernel : public tensorflow::XlaOpKernel {
 public:
  explicit FfiCallKernel(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    TfAttrSource<tensorflow::OpKernelConstruction> source(context);
    AttrReader reader(source);
    const Status status = op_.Init(reader);
    OPFORGE_OP_REQUIRES_OK(context, reader.status());
    OPFORGE_OP_REQUIRES_OK(context, status);
    tensorflow::DataType type;
    OP_REQUIRES_OK(context, context->GetAttr(ffi::kTypeAttr, &type));
    OP_REQUIRES(context, ffi::DTypeByName(FfiTypeName(type), &dtype_),
                absl::InvalidArgumentError("opforge: " + def().op() +
                                           " has an element type XLA FFI cannot name"));
  }

  void Compile(tensorflow::XlaOpKernelContext* context) override {
    std::vector<int> constants;
    OP_REQUIRES_OK(context, tensorflow::XlaOpRegistry::CompileTimeConstantInputs(*this, &constants));
    const int n = context->num_inputs();
    OpCall call;
    call.dtype = dtype_;
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Literal> literals(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> dims;
      OP_REQUIRES_OK(context, InputDims(context, i, &dims));
      call.shapes.push_back(dims);
      const void* data = nullptr;
      if (std::find(constants.begin(), constants.end(), i) != constants.end()) {
        OP_REQUIRES_OK(context, context->ConstantInput(i, &literals[static_cast<size_t>(i)]));
        if (literals[static_cast<size_t>(i)].element_count() > 0)
          data = literals[static_cast<size_t>(i)].untyped_data();
      }
      call.inputs.push_back(data);
      operands.push_back(context->Input(i));
    }
    constexpr int kValuesInput = internal::ValuesInputOf<Op>::value;
    if constexpr (kValuesInput >= 0) {
      OP_REQUIRES_OK(context, context->ConstantInputAsIntVector(kValuesInput, &call.values));
    }
    typename Op::Params params;
    OPFORGE_OP_REQUIRES_OK(context, op_.Validate(call, &params));

    // The results: the op's declared outputs, and empty ones for those it leaves out.
    std::vector<xla::Shape> shapes;
    for (int i = 0; i < context->num_outputs(); ++i) {
      xla::PrimitiveType type;
      OP_REQUIRES_OK(context, tensorflow::DataTypeToPrimitiveType(output_type(i), &type));
      std::vector<int64_t> dims = {0};
      for (const OpCall::OutputSpec& spec : call.declared) {
        if (spec.index == i) dims = spec.dims;
      }
      shapes.push_back(xla::ShapeUtil::MakeShape(type, dims));
    }
    std::string attributes;
    OP_REQUIRES_OK(context,
                   FfiAttributes(def(), kValuesInput >= 0 ? &call.values : nullptr, &attributes));
    const xla::Shape shape =
        shapes.size() == 1 ? shapes[0] : xla::ShapeUtil::MakeTupleShape(shapes);
    const xla::XlaOp result =
        xla::CustomCall(context->builder(), def().op(), operands, shape, attributes,
                        /*has_side_effect=*/false, /*output_operand_aliasing=*/{},
                        /*literal=*/nullptr, xla::CustomCallSchedule::SCHEDULE_NONE,
                        xla::CustomCallApiVersion::API_VERSION_TYPED_FFI);
    if (shapes.size() == 1) {
      context->SetOutput(0, result);
    } else {
      for (int i = 0; i < context->num_outputs(); ++i)
        context->SetOutput(i, xla::GetTupleElement(result, i));
    }
  }

 private:
  Op op_;
  DType dtype_ = DType::kFloat;
};

// The ops that run as FFI custom calls, and why the handlers could not be registered (empty
// when they were).
inline std::vector<std::string>& FfiOps() {
  static auto* ops = new std::vector<std::string>;
  return *ops;
}

// Registers an FFI handler with TensorFlow's XLA for `platform`; false (and a line on stderr)
// if XLA refuses it.
inline bool RegisterFfiHandler(const char* target, XLA_FFI_Handler* handler,
                               const char* platform) {
  const XLA_FFI_Api* api = ::xla::ffi::GetXlaFfiApi();
  XLA_FFI_Handler_Register_Args args{};
  args.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE;
  args.name = XLA_FFI_ByteSpan{target, std::strlen(target)};
  args.platform = XLA_FFI_ByteSpan{platform, std::strlen(platform)};
  args.bundle.execute = handler;
  args.traits = 0;
  XLA_FFI_Error* error = api->XLA_FFI_Handler_Register(&args);
  if (error == nullptr) return true;
  XLA_FFI_Error_GetMessage_Args message{};
  message.struct_size = XLA_FFI_Error_GetMessage_Args_STRUCT_SIZE;
  message.error = error;
  api->XLA_FFI_Error_GetMessage(&message);
  std::fprintf(stderr, "opforge: XLA refused the FFI handler of %s (%s): %s\n", target, platform,
               message.message ? message.message : "no message");
  XLA_FFI_Error_Destroy_Args destroy{};
  destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->XLA_FFI_Error_Destroy(&destroy);
  return false;
}

// Registers op `op`'s FFI handler with TensorFlow's XLA and, if XLA took it, its tf2xla kernel
// (so that an op whose handler XLA refused keeps opforge's "no XLA kernel" error).
template <typename MakeRegistration>
bool RegisterFfiOp(const char* op, XLA_FFI_Handler* handler, MakeRegistration make,
                   tensorflow::XlaOpRegistry::Factory factory) {
  if (!RegisterFfiHandler(op, handler, "Host")) return false;
  XlaRegistration registration(op, make(), factory);
  FfiOps().push_back(op);
  return true;
}
#endif  // OPFORGE_XLA_FFI

}  // namespace xla_glue
}  // namespace opforge

// The ops lowered to XLA, comma-separated, prefixed "late:" when they were registered after
// TensorFlow's registration pass (and so by opforge itself). Exported for opforge's Python
// loader (ctypes); absent from a library built without XLA kernels.
//
// The text is built once, by the first call, into a function-local static (C++11 initialises it
// exactly once, other threads waiting for it): every OPFORGE_REGISTER_XLA_OP is a static
// initialiser of this library, so all have run before anything outside can call this, and the
// text cannot change afterwards. Callers on any thread get the same pointer to the same constant
// characters; nothing writes to it after it is built.
extern "C" __attribute__((visibility("default"), used)) inline const char* OpforgeXlaLoweredOps() {
  static const std::string text = [] {
    std::string joined = opforge::xla_glue::RegisteredLate() ? "late:" : "";
    const std::vector<std::string>& ops = opforge::xla_glue::LoweredOps();
    for (size_t i = 0; i < ops.size(); ++i) {
      if (i > 0) joined += ',';
      joined += ops[i];
    }
    return joined;
  }();
  return text.c_str();
}

#if OPFORGE_XLA_FFI
// The ops that run under XLA as FFI custom calls (a subset of OpforgeXlaLoweredOps), comma-separated.
extern "C" __attribute__((visibility("default"), used)) inline const char* OpforgeXlaFfiOps() {
  static const std::string text = [] {
    std::string joined;
    for (const std::string& op : opforge::xla_glue::FfiOps()) joined += (joined.empty() ? "" : ",") + op;
    return joined;
  }();
  return text.c_str();
}
#endif

#define OPFORGE_XLA_CONCAT_(a, b) a##b
#define OPFORGE_XLA_CONCAT(a, b) OPFORGE_XLA_CONCAT_(a, b)
// OPFORGE_REGISTER_XLA_OP("Opforge>LeakyRelu", Kernel) or, with options (compile-time constant
// inputs), OPFORGE_REGISTER_XLA_OP("Opforge>ResizeBilinear", Kernel, .CompileTimeConstantInput(
// "size")). No type constraint: each type attribute gets the op def's allowed types that the
// XLA backend supports, so a kernel handles every dtype its op accepts.
#define OPFORGE_REGISTER_XLA_OP(OP, KERNEL, ...)                                   \
  [[maybe_unused]] static ::opforge::xla_glue::XlaRegistration OPFORGE_XLA_CONCAT( \
      opforge_xla_registration_, __COUNTER__)(                                     \
      OP,                                                                          \
      ::tensorflow::XlaOpRegistrationBuilder::Name(OP)                             \
          __VA_ARGS__.Build(&::opforge::xla_glue::CreateXlaKernel<KERNEL>),        \
      &::opforge::xla_glue::CreateXlaKernel<KERNEL>);

// OPFORGE_REGISTER_XLA_FFI_OP("Opforge>BiasLeakyRelu", BiasLeakyRelu, BiasLeakyReluOp) runs op
// struct BiasLeakyReluOp under XLA as a custom call to the handler OpforgeFfi_BiasLeakyRelu
// (defined by OPFORGE_FFI_KERNELS(BiasLeakyRelu, ...) in the op's _ffi.cc). Options as for
// OPFORGE_REGISTER_XLA_OP: .CompileTimeConstantInput("anchors") for every input whose values the
// op struct reads (its host-memory inputs: sizes, thresholds, anchors).
#define OPFORGE_REGISTER_XLA_FFI_OP(OP, ID, OPSTRUCT, ...)                                   \
  extern "C" XLA_FFI_Error* OpforgeFfi_##ID(XLA_FFI_CallFrame* frame);                     \
  [[maybe_unused]] static const bool OPFORGE_XLA_CONCAT(opforge_xla_ffi_registration_,     \
                                                        __COUNTER__) =                     \
      ::opforge::xla_glue::RegisterFfiOp(                                                  \
          OP, &OpforgeFfi_##ID,                                                            \
          [] {                                                                             \
            return ::tensorflow::XlaOpRegistrationBuilder::Name(OP) __VA_ARGS__.Build(     \
                &::opforge::xla_glue::CreateXlaKernel<                                     \
                    ::opforge::xla_glue::FfiCallKernel<OPSTRUCT>>);                        \
          },                                                                               \
          &::opforge::xla_glue::CreateXlaKernel<::opforge::xla_glue::FfiCallKernel<OPSTRUCT>>);

#endif  // OPFORGE_COMMON_TF_XLA_H_
