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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/tf_glue.h"
#include "tensorflow/compiler/tf2xla/xla_helpers.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "tensorflow/core/framework/kernel_def.pb.h"
#include "tensorflow/core/framework/node_def.pb.h"
#include "tensorflow/core/framework/op_def.pb.h"
// The XLA builder moved from xla/client/ (TensorFlow 2.16, 2.17) to xla/hlo/builder/ (2.18 on).
#if __has_include("xla/hlo/builder/xla_builder.h")
#include "xla/hlo/builder/xla_builder.h"
#else
#include "xla/client/xla_builder.h"
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

// What RegisterCompilationKernels() does for one op without type restrictions, on every JIT
// backend or on `only_device` alone.
inline void RegisterJitKernelsNow(const std::string& op, tensorflow::XlaOpRegistry::Factory factory,
                                  const char* only_device = nullptr) {
  const tensorflow::OpDef* op_def = nullptr;
  if (!tensorflow::OpRegistry::Global()->LookUpOpDef(op, &op_def).ok()) return;
  // The type lists' lengths differ between TensorFlow versions (22 in 2.16, 25 in 2.21).
  struct Backend {
    const char* device;
    const tensorflow::DataType* types;
    size_t count;
  };
  const Backend backends[] = {{tensorflow::DEVICE_CPU_XLA_JIT, tensorflow::kCpuAllTypes.data(),
                               tensorflow::kCpuAllTypes.size()},
                              {tensorflow::DEVICE_GPU_XLA_JIT, tensorflow::kGpuAllTypes.data(),
                               tensorflow::kGpuAllTypes.size()}};
  const std::string existing = tensorflow::KernelsRegisteredForOp(op);
  for (const Backend& backend : backends) {
    if (!tensorflow::XlaOpRegistry::IsBackendRegistered(backend.device)) continue;
    if (only_device != nullptr && std::string(only_device) != backend.device) continue;
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
  // `only_device`: the registration is for that JIT device alone (its builder says so too).
  XlaRegistration(const char* op, Registration registration,
                  tensorflow::XlaOpRegistry::Factory factory, const char* only_device = nullptr) {
    tensorflow::XlaOpRegistrar registrar(std::move(registration));
    LoweredOps().push_back(op);
    if (JitKernelsRegistered()) {
      RegisteredLate() = true;
      RegisterJitKernelsNow(op, factory, only_device);
    }
  }
};

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

#endif  // OPFORGE_COMMON_TF_XLA_H_
