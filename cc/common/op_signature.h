// One signature per op: its name, inputs, outputs and attrs, written once, in the op struct, and
// read by every runtime's registration.
//
// An op struct (cc/ops/<op>/<op>_op.h, common/op_call.h) holds
//
//   static constexpr OpSignature kSignature{
//       "Opforge>BiasLeakyRelu",                                    // TensorFlow's op name
//       "features: T; bias: T",                                     // inputs
//       "output: T",                                                // outputs
//       "T: {half, bfloat16, float, double} = DT_FLOAT; alpha: float = 0.2"};  // attrs
//
// in TensorFlow's REGISTER_OP spec syntax, one spec per ';'-separated item. From it:
//   - TensorFlow: OPFORGE_REGISTER_OP(BiasLeakyReluOp) (common/tf_kernel.h) is REGISTER_OP with
//     these .Input/.Output/.Attr; the binding chains its shape function and doc after it;
//   - ONNX Runtime: OPFORGE_ORT_KERNELS (common/ort_kernel.h) takes the op type (the name after
//     "Opforge>") and each input's and output's element type from it; an input list repeated
//     by an int attr ("features: num_scales * T") is ONNX's variadic tail, and ONNX takes the
//     fixed inputs first where TensorFlow's order has the list in the middle;
//   - XLA FFI: OPFORGE_FFI_KERNELS (common/xla_ffi.h) takes the custom-call target from it and
//     checks every call frame against it: the number of operands and results, and each operand's
//     element type, before the op struct reads a byte;
//   - LiteRT and TensorFlow's XLA: OPFORGE_LITE_OP (common/lite_kernel.h) and
//     OPFORGE_REGISTER_XLA_FFI_OP (common/tf_xla_ffi.h) take the name from it.
//
// Element types of inputs and outputs: a dtype name of TensorFlow's spec syntax ("float",
// "int32"), or a type attr of the op: "T" is the kernel's element type (the one each runtime
// registers and dispatches on), "U" a parameter type that is float, or double when T is double
// (batch norm's scale and offset), and any other type attr whose values are only int32 and
// int64 ("Tshape: {int32, int64}") an integer input of either width. Nothing here includes a
// framework's header.
#ifndef OPFORGE_COMMON_OP_SIGNATURE_H_
#define OPFORGE_COMMON_OP_SIGNATURE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace opforge {

struct OpSignature {
  const char* name;     // "Opforge>BiasLeakyRelu": TensorFlow's op, the custom-call target
  const char* inputs;   // "features: T; bias: T"
  const char* outputs;  // "output: T"
  const char* attrs;    // "alpha: float = 0.2; T: {float, double}"
};

namespace signature {

// How an input's or output's element type is fixed.
enum class TypeRule {
  kT,       // the kernel's element type
  kU,       // float, or double when T is double
  kAnyInt,  // int32 or int64 (a type attr over those two)
  kFixed,   // `fixed`
};

struct Arg {
  std::string name;
  std::string type;         // as written: "T", "float", "Tshape"
  std::string number_attr;  // "num_scales" for "num_scales * T": a list of that many; else empty
  TypeRule rule = TypeRule::kFixed;
  DType fixed = DType::kFloat;
};

struct Attr {
  std::string name;
  std::string type;                  // "float", "int", "list(int)", "string", "bool", "type"...
  std::vector<std::string> allowed;  // a type attr's dtype names, or a string attr's values
};

// The attr `name` of `attrs`, or null.
inline const Attr* FindAttr(const std::vector<Attr>& attrs, std::string_view name) {
  for (const Attr& a : attrs) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

struct Parsed {
  std::string name;     // "Opforge>BiasLeakyRelu"
  std::string op_type;  // "BiasLeakyRelu": the name after the last '>'
  std::vector<Arg> inputs, outputs;
  std::vector<Attr> attrs;

  const Attr* FindAttr(std::string_view attr) const { return signature::FindAttr(attrs, attr); }
};

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// Splits at `sep` outside braces, brackets, parentheses and quotes; drops empty items.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> items;
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    const char c = i < s.size() ? s[i] : sep;
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '{' || c == '[' || c == '(') {
      ++depth;
    } else if (c == '}' || c == ']' || c == ')') {
      --depth;
    } else if (c == sep && depth == 0) {
      const std::string_view item = Trim(s.substr(start, i - start));
      if (!item.empty()) items.push_back(item);
      start = i + 1;
    }
  }
  return items;
}

inline bool IsIdentifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (const char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// A dtype of TensorFlow's spec syntax ("half", "float", "int32") as a DType.
inline bool DTypeOfSpecName(std::string_view name, DType* dtype) {
  if (name == "float16") name = "half";  // dtype.h's names: "half", "float32", "float64"
  if (name == "float") name = "float32";
  if (name == "double") name = "float64";
#define OPFORGE_SIGNATURE_DTYPE_(e, text, type) \
  if (name == text) {                           \
    *dtype = DType::e;                          \
    return true;                                \
  }
  OPFORGE_DTYPES(OPFORGE_SIGNATURE_DTYPE_)
#undef OPFORGE_SIGNATURE_DTYPE_
  return false;
}

inline Status SignatureError(std::string_view op, const std::string& what) {
  return Status::Invalid("the signature of " + std::string(op) + ": " + what);
}

// "name: rest" into the name (an identifier) and the rest, trimmed.
inline Status SplitSpec(std::string_view op, std::string_view spec, std::string* name,
                        std::string_view* rest) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) {
    return SignatureError(op, "\"" + std::string(spec) + "\" is not \"name: type\"");
  }
  *name = std::string(Trim(spec.substr(0, colon)));
  if (!IsIdentifier(*name)) return SignatureError(op, "\"" + *name + "\" is not an identifier");
  *rest = Trim(spec.substr(colon + 1));
  return Status::Ok();
}

// "alpha: float = 0.2", "T: {half, float} = DT_FLOAT", "num_scales: int >= 1",
// "padding: {'SAME', 'VALID'}".
inline Status ParseAttr(std::string_view op, std::string_view spec, Attr* attr) {
  std::string_view rest;
  OPFORGE_RETURN_IF_ERROR(SplitSpec(op, spec, &attr->name, &rest));
  if (!rest.empty() && rest.front() == '{') {
    const size_t close = rest.find('}');
    if (close == std::string_view::npos) {
      return SignatureError(op, "attr " + attr->name + "'s '{' is not closed");
    }
    bool quoted = false;
    for (std::string_view v : Split(rest.substr(1, close - 1), ',')) {
      quoted = v.front() == '\'' || v.front() == '"';
      if (quoted && v.size() >= 2) v = v.substr(1, v.size() - 2);
      attr->allowed.emplace_back(v);
    }
    attr->type = quoted ? "string" : "type";
    if (!quoted) {
      for (const std::string& v : attr->allowed) {
        DType d;
        if (!DTypeOfSpecName(v, &d)) {
          return SignatureError(
              op, "attr " + attr->name + " allows \"" + v + "\", which is not an element type");
        }
      }
    }
    return Status::Ok();
  }
  size_t end = 0;
  int depth = 0;
  while (end < rest.size()) {
    const char c = rest[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ' ' || c == '=' || c == '>' || c == '<')) break;
    ++end;
  }
  attr->type = std::string(rest.substr(0, end));
  if (attr->type.empty()) return SignatureError(op, "attr " + attr->name + " has no type");
  return Status::Ok();
}

// "features: T", "output_shape: Tshape", "y_true: num_scales * T".
inline Status ParseArg(std::string_view op, std::string_view spec, const std::vector<Attr>& attrs,
                       Arg* arg) {
  std::string_view type;
  OPFORGE_RETURN_IF_ERROR(SplitSpec(op, spec, &arg->name, &type));
  const size_t star = type.find('*');
  if (star != std::string_view::npos) {
    arg->number_attr = std::string(Trim(type.substr(0, star)));
    type = Trim(type.substr(star + 1));
    const Attr* number = FindAttr(attrs, arg->number_attr);
    if (number == nullptr || number->type != "int") {
      return SignatureError(
          op, arg->name + "'s length \"" + arg->number_attr + "\" is not an int attr of the op");
    }
  }
  arg->type = std::string(type);
  if (DTypeOfSpecName(type, &arg->fixed)) {
    arg->rule = TypeRule::kFixed;
    return Status::Ok();
  }
  const Attr* attr = FindAttr(attrs, type);
  if (attr == nullptr || attr->type != "type") {
    return SignatureError(op, arg->name + "'s type \"" + arg->type +
                                  "\" is neither an element type nor a type attr of the op");
  }
  if (arg->type == "T") {
    arg->rule = TypeRule::kT;
  } else if (arg->type == "U") {
    arg->rule = TypeRule::kU;
  } else {
    bool ints = !attr->allowed.empty();
    for (const std::string& v : attr->allowed) ints = ints && (v == "int32" || v == "int64");
    if (!ints) {
      return SignatureError(op, arg->name + "'s type attr " + arg->type +
                                    " is none of T, U or a type attr over int32 and int64");
    }
    arg->rule = TypeRule::kAnyInt;
  }
  return Status::Ok();
}

inline Status Parse(const OpSignature& sig, Parsed* out) {
  *out = Parsed();
  const std::string_view name = sig.name ? sig.name : "";
  if (name.empty()) return Status::Invalid("an op signature has no name");
  out->name = std::string(name);
  out->op_type = std::string(name.substr(name.rfind('>') + 1));
  for (std::string_view spec : Split(sig.attrs ? sig.attrs : "", ';')) {
    out->attrs.emplace_back();
    OPFORGE_RETURN_IF_ERROR(ParseAttr(name, spec, &out->attrs.back()));
  }
  for (std::string_view spec : Split(sig.inputs ? sig.inputs : "", ';')) {
    out->inputs.emplace_back();
    OPFORGE_RETURN_IF_ERROR(ParseArg(name, spec, out->attrs, &out->inputs.back()));
  }
  for (std::string_view spec : Split(sig.outputs ? sig.outputs : "", ';')) {
    out->outputs.emplace_back();
    OPFORGE_RETURN_IF_ERROR(ParseArg(name, spec, out->attrs, &out->outputs.back()));
  }
  if (out->outputs.empty()) return SignatureError(name, "no outputs");
  return Status::Ok();
}

// The element type an argument must have in a kernel of element type `t`; false for kAnyInt
// (int32 or int64).
inline bool ExpectedDType(const Arg& arg, DType t, DType* dtype) {
  switch (arg.rule) {
    case TypeRule::kT:
      *dtype = t;
      return true;
    case TypeRule::kU:
      *dtype = t == DType::kDouble ? DType::kDouble : DType::kFloat;
      return true;
    case TypeRule::kFixed:
      *dtype = arg.fixed;
      return true;
    case TypeRule::kAnyInt:
      break;
  }
  return false;
}

// Whether `dtype` is what `arg` takes in a kernel of element type `t`.
inline bool Accepts(const Arg& arg, DType t, DType dtype) {
  DType expected;
  if (ExpectedDType(arg, t, &expected)) return dtype == expected;
  return dtype == DType::kInt32 || dtype == DType::kInt64;
}

// "float32", "int32 or int64": what Accepts takes, for messages.
inline std::string ExpectedName(const Arg& arg, DType t) {
  DType expected;
  if (ExpectedDType(arg, t, &expected)) return DTypeName(expected);
  return "int32 or int64";
}

}  // namespace signature
}  // namespace opforge

#endif  // OPFORGE_COMMON_OP_SIGNATURE_H_
