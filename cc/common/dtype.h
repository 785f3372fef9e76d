// Element types as the core's CUDA entry points see them. CPU kernels are templates over the C++
// type; the .cu files are compiled without Eigen or TensorFlow headers, so their entry points
// take a DType and untyped pointers instead (Eigen::half and __half share one 16-bit layout, as
// do Eigen::bfloat16 and __nv_bfloat16).
#ifndef OPFORGE_COMMON_DTYPE_H_
#define OPFORGE_COMMON_DTYPE_H_

#include <cstdint>

namespace opforge {

enum class DType : int {
  kHalf,
  kBFloat16,
  kFloat,
  kDouble,
  kInt32,
  kInt64,
  kInt8,
  kUInt8,
  kInt16,
  kUInt16
};

inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kHalf:
      return "half";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat:
      return "float32";
    case DType::kDouble:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kInt8:
      return "int8";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt16:
      return "int16";
    case DType::kUInt16:
      return "uint16";
  }
  return "unknown";
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_DTYPE_H_
