// The LiteRT (TensorFlow Lite) skeleton that runs an op struct, and its registration line.
//
// LiteRT runs opforge's ops through an external delegate plugin (common/lite_delegate.cc,
// libopforge_lite.so): the converter writes each opforge op as a custom op `Opforge>X` whose
// custom options are a flexbuffer map of the TensorFlow attrs; the delegate claims those nodes
// and runs the same op struct TensorFlow runs (common/tf_kernel.h), through LiteKernel<Op, T...>:
// Init once per node from the flexbuffer attrs, Validate when the input shapes are known (in
// prepare, so outputs get static shapes, and again on every invoke, where the per-call Params
// are made, as TfKernel does on every Compute), then internal::RunCpu<T> with T the element type
// of input 0 (the `T` of every forward op's signature).
//
// One line per op in cc/ops/<op>/<op>_lite.cc registers it under the name of the op struct's
// signature (common/op_signature.h: the custom op's name, "Opforge>LeakyRelu"):
//   OPFORGE_LITE_OP(LeakyReluOp<false>, OPFORGE_FLOAT_TYPES)
// with the same dtype X-macro list as its TensorFlow registration (element types LiteRT has no
// tensor type for never match and cost nothing). An op whose Validate reads the values of inputs
// (TensorFlow's host-memory inputs: NMS scalars, YOLO anchors) names the first of them:
//   OPFORGE_LITE_OP_HOST(CombinedNmsOp, OPFORGE_NMS_TYPES, 2)
// so that prepare runs Validate only where those inputs are constant (their values are not there
// before the first invoke otherwise) and leaves the outputs dynamic (sized at invoke) else. An
// op's kValuesInput (a size, an output shape) is handled the same way without saying so.
//
// This header includes no LiteRT header: the delegate turns tensors into OpCalls.
#ifndef OPFORGE_COMMON_LITE_KERNEL_H_
#define OPFORGE_COMMON_LITE_KERNEL_H_

#include <complex>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "common/dtype.h"
#include "common/op_call.h"
#include "common/status.h"

namespace opforge {
namespace lite {

// LiteRT's TfLiteType number of element type T (the TFLite schema's TensorType numbering, which
// only ever grows), -1 where LiteRT has none. Numbers rather than the enum: bfloat16 (19) is newer
// than the oldest headers the build accepts.
template <typename T>
constexpr int LiteTypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return 1;
  else if constexpr (std::is_same_v<T, int32_t>)
    return 2;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return 3;
  else if constexpr (std::is_same_v<T, int64_t>)
    return 4;
  else if constexpr (std::is_same_v<T, int16_t>)
    return 7;
  else if constexpr (std::is_same_v<T, std::complex<float>>)
    return 8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return 9;
  else if constexpr (std::is_same_v<T, Eigen::half>)
    return 10;
  else if constexpr (std::is_same_v<T, double>)
    return 11;
  else if constexpr (std::is_same_v<T, std::complex<double>>)
    return 12;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return 13;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return 16;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return 17;
  else if constexpr (std::is_same_v<T, Eigen::bfloat16>)
    return 19;
  else
    return -1;
}

// One node's op object, with the element type erased (the delegate sees only this).
class LiteOp {
 public:
  virtual ~LiteOp() = default;
  // Reads the attrs; the reader's first error comes before the op's own.
  virtual Status Init(AttrReader& reader) = 0;
  // Sets call.dtype from `type` and runs the op's Validate, keeping the Params for Run.
  virtual Status Validate(int type, OpCall& call) = 0;
  // Runs the CPU path in element type `type` with the Params of the last Validate.
  virtual Status Run(int type, const OpCall& call, const Parallel& parallel) const = 0;
  virtual bool Supports(int type) const = 0;
  // "float32, float64": the element types Run takes, for error messages.
  virtual std::string TypeNames() const = 0;
  // The op's kValuesInput, -1 if it has none.
  virtual int values_input() const = 0;
};

template <typename Op, typename... Ts>
class LiteKernel final : public LiteOp {
 public:
  Status Init(AttrReader& reader) override {
    const Status status = op_.Init(reader);
    if (!reader.status().ok()) return reader.status();
    return status;
  }
  Status Validate(int type, OpCall& call) override {
    ((LiteTypeOf<Ts>() == type ? (call.dtype = DTypeOf<Ts>::value, true) : false) || ...);
    return op_.Validate(call, &params_);
  }
  Status Run(int type, const OpCall& call, const Parallel& parallel) const override {
    Status status = Status::Internal("no kernel for this element type");
    ((LiteTypeOf<Ts>() == type ? (status = internal::RunCpu<Ts>(op_, params_, call, parallel), true)
                               : false) ||
     ...);
    return status;
  }
  bool Supports(int type) const override { return ((LiteTypeOf<Ts>() == type) || ...); }
  std::string TypeNames() const override {
    std::string names;
    ((LiteTypeOf<Ts>() >= 0
          ? (names += (names.empty() ? "" : ", "), names += DTypeName(DTypeOf<Ts>::value), true)
          : false),
     ...);
    return names;
  }
  int values_input() const override { return internal::ValuesInputOf<Op>::value; }

 private:
  Op op_;
  typename Op::Params params_;
};

// The X-macro dtype lists (common/dtype.h) expand to `void, T1, T2, ...` in LiteTypes<...>.
template <typename... Ts>
struct LiteTypes {};

template <typename Op, typename List>
struct LiteKernelOf;
template <typename Op, typename... Ts>
struct LiteKernelOf<Op, LiteTypes<void, Ts...>> {
  using type = LiteKernel<Op, Ts...>;
};

template <typename Op, typename List>
std::unique_ptr<LiteOp> MakeLiteKernel() {
  return std::make_unique<typename LiteKernelOf<Op, List>::type>();
}

// One registered op: its custom op name, the first input whose values its Validate reads (-1:
// none besides kValuesInput), and its kernel factory.
struct LiteOpDef {
  const char* name;
  int first_host_input;
  std::unique_ptr<LiteOp> (*make)();
};

// Adds an op to the delegate's table (common/lite_delegate.cc); run by static registrars.
void RegisterLiteOp(const LiteOpDef& def);

struct LiteRegistrar {
  LiteRegistrar(const char* name, int first_host_input, std::unique_ptr<LiteOp> (*make)()) {
    RegisterLiteOp({name, first_host_input, make});
  }
};

}  // namespace lite
}  // namespace opforge

#define OPFORGE_LITE_TYPE_(T, ...) , T
#define OPFORGE_LITE_CONCAT_(a, b) a##b
#define OPFORGE_LITE_NAME_(a, b) OPFORGE_LITE_CONCAT_(a, b)
#define OPFORGE_LITE_OP_HOST(OP, TYPES, FIRST_HOST_INPUT)                                 \
  static const ::opforge::lite::LiteRegistrar OPFORGE_LITE_NAME_(opforge_lite_registrar_, \
                                                                 __COUNTER__)(            \
      OP::kSignature.name, FIRST_HOST_INPUT,                                              \
      &::opforge::lite::MakeLiteKernel<                                                   \
          OP, ::opforge::lite::LiteTypes<void TYPES(OPFORGE_LITE_TYPE_, unused)>>);
#define OPFORGE_LITE_OP(OP, TYPES) OPFORGE_LITE_OP_HOST(OP, TYPES, -1)

#endif  // OPFORGE_COMMON_LITE_KERNEL_H_
