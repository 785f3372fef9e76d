// Element types, listed once. CPU kernels are templates over the C++ type; the .cu files are
// compiled without Eigen or TensorFlow headers, so their entry points take a DType and untyped
// pointers instead (Eigen::half and __half share one 16-bit layout, as do Eigen::bfloat16 and
// __nv_bfloat16). DTypeOf<T>::value maps a C++ element type to its DType (the bindings and the
// CUDA tests use it); Eigen's types are only declared here, so that .cu files may include this.
#ifndef OPFORGE_COMMON_DTYPE_H_
#define OPFORGE_COMMON_DTYPE_H_

#include <complex>
#include <cstdint>

namespace Eigen {
struct half;
struct bfloat16;
}  // namespace Eigen

// X(enumerator, name, C++ element type), one row per DType.
#define OPFORGE_DTYPES(X)                         \
  X(kHalf, "half", Eigen::half)                   \
  X(kBFloat16, "bfloat16", Eigen::bfloat16)       \
  X(kFloat, "float32", float)                     \
  X(kDouble, "float64", double)                   \
  X(kInt32, "int32", int32_t)                     \
  X(kInt64, "int64", int64_t)                     \
  X(kInt8, "int8", int8_t)                        \
  X(kUInt8, "uint8", uint8_t)                     \
  X(kInt16, "int16", int16_t)                     \
  X(kUInt16, "uint16", uint16_t)                  \
  X(kUInt32, "uint32", uint32_t)                  \
  X(kUInt64, "uint64", uint64_t)                  \
  X(kComplex64, "complex64", std::complex<float>) \
  X(kComplex128, "complex128", std::complex<double>)

// Element-type lists as X-macros: LIST(X, ...) expands X(T, ...) for each C++ type T. An op's
// CPU kernels are instantiated (<op>_cpu.cc) and registered (<op>_tf.cc, common/tf_kernel.h)
// over the same named lists, so those two cannot drift apart; tests/test_specs.py checks the
// registered kernels against the dtypes of the op's Python spec. An op-specific list lives in
// its header.
#define OPFORGE_FLOAT_TYPES(X, ...) \
  X(Eigen::half, __VA_ARGS__)       \
  X(Eigen::bfloat16, __VA_ARGS__)   \
  X(float, __VA_ARGS__)             \
  X(double, __VA_ARGS__)
// No types: the GPU list of an op that runs on the CPU only.
#define OPFORGE_NO_TYPES(X, ...)
#define OPFORGE_FLOAT_INT_TYPES(X, ...) \
  OPFORGE_FLOAT_TYPES(X, __VA_ARGS__)   \
  X(int32_t, __VA_ARGS__)               \
  X(int64_t, __VA_ARGS__)

namespace opforge {

#define OPFORGE_DTYPE_ENUMERATOR_(e, name, type) e,
enum class DType : int { OPFORGE_DTYPES(OPFORGE_DTYPE_ENUMERATOR_) };
#undef OPFORGE_DTYPE_ENUMERATOR_

inline const char* DTypeName(DType t) {
#define OPFORGE_DTYPE_NAME_(e, name, type) \
  case DType::e:                           \
    return name;
  switch (t) { OPFORGE_DTYPES(OPFORGE_DTYPE_NAME_) }
#undef OPFORGE_DTYPE_NAME_
  return "unknown";
}

template <typename T>
struct DTypeOf;
#define OPFORGE_DTYPE_OF_(e, name, type)     \
  template <>                                \
  struct DTypeOf<type> {                     \
    static constexpr DType value = DType::e; \
  };
OPFORGE_DTYPES(OPFORGE_DTYPE_OF_)
#undef OPFORGE_DTYPE_OF_

}  // namespace opforge

#endif  // OPFORGE_COMMON_DTYPE_H_
