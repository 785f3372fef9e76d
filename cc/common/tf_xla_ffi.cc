// The tf2xla side of the ops run under XLA as FFI custom calls (common/tf_xla_ffi.h): the one
// tf2xla kernel, the custom call's attributes, and the registrations with TensorFlow's XLA.
// Compiled once: into opforge's library, and by opforge.build into each user module that
// registers an op this way (the tf2xla and XLA builder headers stay out of the ops' own files).
#include "common/tf_xla_ffi.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/tf_kernel.h"
#include "common/tf_xla.h"
#include "tensorflow/compiler/tf2xla/type_util.h"
#include "tensorflow/core/framework/attr_value.pb.h"

// XLA's FFI API of the running process, exported by libtensorflow_cc.so.2. Its own header
// (xla/ffi/ffi_api.h) includes XLA internals; the declaration is all a caller needs.
namespace xla {
namespace ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace ffi
}  // namespace xla

namespace opforge {
namespace xla_glue {
namespace {

// The opforge name of a TensorFlow element type ("float32"), or "" for none.
const char* FfiTypeName(tensorflow::DataType dtype) {
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
std::string MlirString(const std::string& text) {
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
std::string MlirF32Bits(float value) {
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
absl::Status FfiAttributes(const tensorflow::NodeDef& def, const std::vector<int64_t>* values,
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

// op name -> its op struct's compile-time part; and the ops registered, in order.
struct FfiRegistry {
  std::mutex mu;
  std::map<std::string, MakeFfiShapeRunner> runners;
  std::vector<std::string> ops;
  std::vector<std::string> gpu_ops;  // those with a CUDA handler too
};
FfiRegistry& Registry() {
  static auto* registry = new FfiRegistry;
  return *registry;
}

// The tf2xla kernel of every op run as an FFI custom call (see the header).
class FfiCallKernel : public tensorflow::XlaOpKernel {
 public:
  explicit FfiCallKernel(tensorflow::OpKernelConstruction* context) : XlaOpKernel(context) {
    {
      FfiRegistry& registry = Registry();
      std::lock_guard<std::mutex> lock(registry.mu);
      auto it = registry.runners.find(def().op());
      OP_REQUIRES(context, it != registry.runners.end(),
                  absl::InternalError("opforge: no FFI op struct registered for " + def().op()));
      runner_ = it->second();
    }
    TfAttrSource<tensorflow::OpKernelConstruction> source(context);
    AttrReader reader(source);
    const Status status = runner_->Init(reader);
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
    OP_REQUIRES_OK(context,
                   tensorflow::XlaOpRegistry::CompileTimeConstantInputs(*this, &constants));
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
    const int values_input = runner_->values_input();
    if (values_input >= 0) {
      OP_REQUIRES_OK(context, context->ConstantInputAsIntVector(values_input, &call.values));
    }
    OPFORGE_OP_REQUIRES_OK(context, runner_->Validate(call));

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
                   FfiAttributes(def(), values_input >= 0 ? &call.values : nullptr, &attributes));
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
  std::unique_ptr<FfiShapeRunner> runner_;
  DType dtype_ = DType::kFloat;
};

// Registers an FFI handler with TensorFlow's XLA for `platform`; false (and a line on stderr)
// if XLA refuses it.
bool RegisterFfiHandler(const char* target, XLA_FFI_Handler* handler, const char* platform) {
  const XLA_FFI_Api* api = ::xla::ffi::GetXlaFfiApi();
  XLA_FFI_Handler_Register_Args args{};
  args.struct_size = XLA_FFI_Handler_Register_Args_STRUCT_SIZE;
  args.name = XLA_FFI_ByteSpan{target, std::strlen(target)};
  args.platform = XLA_FFI_ByteSpan{platform, std::strlen(platform)};
  args.bundle.execute = handler;
  args.traits = 0;
  XLA_FFI_Error* error = api->XLA_FFI_Handler_Register(&args);
  if (error == nullptr) return true;
  std::fprintf(stderr, "opforge: XLA refused the FFI handler of %s (%s): %s\n", target, platform,
               ffi::TakeMessage(api, error).c_str());
  return false;
}

}  // namespace

bool RegisterXlaFfiOp(const char* op, XLA_FFI_Handler* handler, XLA_FFI_Handler* gpu_handler,
                      MakeFfiShapeRunner make, std::initializer_list<const char*> constant_inputs) {
  if (!RegisterFfiHandler(op, handler, "Host")) return false;
  bool gpu = false;
#if GOOGLE_CUDA
  // The GPU handler reads a kValuesInput's values from the attribute the kernel above writes;
  // any other constant input's values would be in device memory, out of the op struct's reach.
  if (gpu_handler != nullptr) {
    // (From the op struct's signature: the OpDef may not be registered yet at static
    // initialisation.)
    const std::unique_ptr<FfiShapeRunner> runner = make();
    const int values_input = runner->values_input();
    signature::Parsed parsed;
    gpu = signature::Parse(runner->signature(), &parsed).ok();
    for (const signature::Arg& arg : parsed.inputs) gpu = gpu && arg.number_attr.empty();
    for (const char* input : constant_inputs) {
      gpu = gpu && values_input >= 0 && static_cast<size_t>(values_input) < parsed.inputs.size() &&
            parsed.inputs[static_cast<size_t>(values_input)].name == input;
    }
    gpu = gpu && RegisterFfiHandler(op, gpu_handler, "CUDA");
  }
#else
  (void)gpu_handler;
#endif
  FfiRegistry& registry = Registry();
  {
    std::lock_guard<std::mutex> lock(registry.mu);
    registry.runners[op] = make;
    registry.ops.push_back(op);
    if (gpu) registry.gpu_ops.push_back(op);
  }
  // XLA:CPU, and XLA:GPU where the CUDA handler is registered (elsewhere an XLA:GPU compilation
  // of the op fails with TensorFlow's "no kernel for XLA_GPU_JIT", and the layers do not claim
  // supports_jit where a GPU is visible: opforge/ops/_xla.py).
  for (const char* device : {tensorflow::DEVICE_CPU_XLA_JIT, tensorflow::DEVICE_GPU_XLA_JIT}) {
    if (std::strcmp(device, tensorflow::DEVICE_GPU_XLA_JIT) == 0 && !gpu) continue;
    tensorflow::XlaOpRegistrationBuilder builder = tensorflow::XlaOpRegistrationBuilder::Name(op);
    builder.Device(device);
    for (const char* input : constant_inputs) builder.CompileTimeConstantInput(input);
    XlaRegistration registration(op, builder.Build(&CreateXlaKernel<FfiCallKernel>),
                                 &CreateXlaKernel<FfiCallKernel>, device);
  }
  return true;
}

}  // namespace xla_glue
}  // namespace opforge

namespace {
std::string JoinedFfiOps(bool gpu) {
  opforge::xla_glue::FfiRegistry& registry = opforge::xla_glue::Registry();
  std::lock_guard<std::mutex> lock(registry.mu);
  std::string joined;
  for (const std::string& op : gpu ? registry.gpu_ops : registry.ops) {
    joined += (joined.empty() ? "" : ",") + op;
  }
  return joined;
}
}  // namespace

// The ops that run under XLA as FFI custom calls (a subset of OpforgeXlaLoweredOps), comma-
// separated. Built once, by the first call, after every static registration has run.
extern "C" __attribute__((visibility("default"))) const char* OpforgeXlaFfiOps() {
  static const std::string text = JoinedFfiOps(false);
  return text.c_str();
}

// Those of them whose custom call runs on XLA:GPU too (a CUDA build): comma-separated.
extern "C" __attribute__((visibility("default"))) const char* OpforgeXlaFfiGpuOps() {
  static const std::string text = JoinedFfiOps(true);
  return text.c_str();
}
