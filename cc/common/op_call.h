// What an op struct sees of one call and of its attributes, in every runtime.
//
// An op (cc/ops/<op>/<op>_op.h) is written once, as a small struct (see common/tf_kernel.h for
// the shape of one), and knows no runtime: it reads its attributes through an AttrReader when a
// kernel is built, and each call hands it an OpCall (input shapes and data, the outputs it
// declares, then their buffers). Each runtime has one skeleton that fills these from its own
// tensors and attributes: TfKernel (common/tf_kernel.h) for TensorFlow, OrtKernel
// (common/ort_kernel.h) for ONNX Runtime, the LiteRT delegate's kernel (common/lite_kernel.h).
// Nothing here includes a runtime's header.
#ifndef OPFORGE_COMMON_OP_CALL_H_
#define OPFORGE_COMMON_OP_CALL_H_

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/op_signature.h"
#include "common/parallel.h"
#include "common/status.h"

namespace opforge {

// A runtime's attributes of one node, by name. Each getter fails (with a message naming the
// attribute) when the node has no such attribute or it has another type. TensorFlow's int attrs
// are int64 and its bools are bools; ONNX has no bool (an int 0/1) and LiteRT's flexbuffer maps
// keep what the converter wrote: each source converts to these six types.
class AttrSource {
 public:
  virtual ~AttrSource() = default;
  virtual Status Get(std::string_view name, float* value) const = 0;
  virtual Status Get(std::string_view name, int64_t* value) const = 0;
  virtual Status Get(std::string_view name, bool* value) const = 0;
  virtual Status Get(std::string_view name, std::string* value) const = 0;
  virtual Status Get(std::string_view name, std::vector<int64_t>* value) const = 0;
  virtual Status Get(std::string_view name, std::vector<float>* value) const = 0;
};

// Reads a kernel's attrs at construction. The first error is kept and reported by the runtime's
// skeleton, so an op's Init may ignore it (Read); shape functions and Init share one reader
// function over an AttrReader (TensorFlow's shape functions wrap their InferenceContext in one).
class AttrReader {
 public:
  explicit AttrReader(const AttrSource& source) : source_(source) {}

  template <typename V>
  Status GetAttr(std::string_view name, V* value) {
    Status s;
    if constexpr (std::is_same_v<V, float> || std::is_same_v<V, bool> ||
                  std::is_same_v<V, int64_t> || std::is_same_v<V, std::string> ||
                  std::is_same_v<V, std::vector<int64_t>> ||
                  std::is_same_v<V, std::vector<float>>) {
      s = source_.Get(name, value);
    } else if constexpr (std::is_same_v<V, double>) {
      float f = 0;
      s = source_.Get(name, &f);
      if (s.ok()) *value = f;
    } else if constexpr (std::is_integral_v<V>) {
      int64_t v = 0;
      s = source_.Get(name, &v);
      if (s.ok()) *value = static_cast<V>(v);
    } else if constexpr (std::is_same_v<V, std::vector<int32_t>>) {
      std::vector<int64_t> v;
      s = source_.Get(name, &v);
      if (s.ok()) value->assign(v.begin(), v.end());
    } else {
      static_assert(sizeof(V) == 0, "attribute type not supported by AttrReader");
    }
    if (status_.ok()) status_ = s;
    return s;
  }
  template <typename V>
  void Read(std::string_view name, V* value) {
    GetAttr(name, value);
  }
  const Status& status() const { return status_; }

 private:
  const AttrSource& source_;
  Status status_;
};

// One call of a kernel, as the op struct sees it: its inputs, the outputs it declares, and
// after allocation their buffers. Data pointers are null for empty tensors.
class OpCall {
 public:
  struct OutputSpec {
    int index;
    std::vector<int64_t> dims;
    std::vector<int> forward;  // inputs whose buffer this output may take over
  };

  int num_inputs() const { return static_cast<int>(shapes.size()); }
  const std::vector<int64_t>& shape(int i) const { return shapes[static_cast<size_t>(i)]; }
  int64_t NumElements(int i) const {
    int64_t n = 1;
    for (int64_t d : shape(i)) n *= d;
    return n;
  }
  const void* in(int i) const { return inputs[static_cast<size_t>(i)]; }
  template <typename T>
  const T* in(int i) const {
    return static_cast<const T*>(in(i));
  }
  void* out(int i) const { return outputs[static_cast<size_t>(i)]; }
  template <typename T>
  T* out(int i) const {
    return static_cast<T*>(out(i));
  }
  size_t out_bytes(int i) const { return output_bytes[static_cast<size_t>(i)]; }

  // Declares output `index` with shape `dims`. Outputs are allocated in the order declared; one
  // with `forward` may take the buffer of the first of those inputs that has its shape and that
  // nobody else holds (the kernel then writes in place; TensorFlow does this, the other runtimes
  // allocate afresh), else a fresh one.
  void Output(int index, std::vector<int64_t> dims, std::vector<int> forward = {}) {
    declared.push_back({index, std::move(dims), std::move(forward)});
  }

  std::vector<std::vector<int64_t>> shapes;  // of every input
  std::vector<int64_t> values;               // of the op's kValuesInput, if it has one
  // The kernel's element type T: for a Validate that reads the values of a host-memory input
  // (registered .HostMemory(...), so on the host on a GPU too) through an untyped pointer.
  DType dtype = DType::kFloat;
  std::vector<const void*> inputs;
  std::vector<OutputSpec> declared;
  std::vector<void*> outputs;  // indexed by output index
  std::vector<size_t> output_bytes;
  // Device scratch memory of a GPU path that asks for it (GpuScratchBytes), else null and 0.
  void* scratch = nullptr;
  int64_t scratch_bytes = 0;
};

// TensorFlow's float attrs are float32, so a value written in Python (momentum=0.99, ref=1e-3)
// arrives rounded, ~1e-8 off the float64 a reference library computes with, and an iterative
// kernel compounds the difference (Griffin-Lim: 1e-5 relative after 32 iterations, against
// 1e-12 from FFT rounding). The shortest decimal that rounds to the same float32 (what Python
// prints for numpy.float32(v)) is the literal the caller wrote whenever it had at most 9
// significant digits: this returns it as a double (non-finite values unchanged).
inline double FloatAttrAsWritten(float value) {
  if (!std::isfinite(value)) return static_cast<double>(value);
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, static_cast<double>(value));
    const double decimal = std::strtod(text, nullptr);
    if (static_cast<float>(decimal) == value) return decimal;
  }
  return static_cast<double>(value);
}

// Asks the OS to back a large, freshly allocated CPU output with transparent huge pages before
// the kernel first writes it. TensorFlow's CPU allocator (and ONNX Runtime's arena for big outputs)
// takes big buffers from malloc, which maps buffers above 32 MiB freshly on every call (smaller
// ones are recycled and stay mapped), so every call pays one page fault per 4 KiB on first touch,
// which for a memory-bound kernel with a large output (a resize) costs more than the kernel's own
// work; 2 MiB pages take 512 times fewer faults (`opforge bench resize_bilinear` shows the effect
// at its large sizes). Only the 2 MiB-aligned interior of buffers of 32 MiB or more is advised
// (recycled smaller buffers gain nothing); values are unaffected, and it is a no-op where THP is
// off or not available.
inline void AdviseHugePages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  if (bytes < 16 * kHuge) return;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t last = (begin + bytes) & ~(kHuge - 1);
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// TensorFlow runs every CPU kernel with denormals flushed to zero (FTZ and DAZ set on its
// threads); ONNX Runtime and LiteRT do not. The other runtimes' skeletons hold one of these while
// the core runs (on every thread that runs part of it), so that results are TensorFlow's bits:
// swish(-100) is -0 there, not -4e-43. Restores the caller's mode.
class ScopedFlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR's flush-to-zero and denormals-are-zero
  unsigned saved_;
#else
  ScopedFlushDenormals() = default;
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;
};

// Device tags of the skeletons: one op struct, specialised by where it runs.
struct CpuTag {};
struct GpuTag {};

namespace internal {

template <typename Op, typename = void>
struct ValuesInputOf {
  static constexpr int value = -1;
};
template <typename Op>
struct ValuesInputOf<Op, std::void_t<decltype(Op::kValuesInput)>> {
  static constexpr int value = Op::kValuesInput;
};

// Whether an op struct has a GPU path (Status Gpu(DType, const Params&, const OpCall&, void*
// stream) const). An op without a GPU kernel leaves Gpu out and registers no GPU dtypes
// (OPFORGE_NO_TYPES); a skeleton asks for Gpu only where it registers GPU kernels.
template <typename Op, typename = void>
struct HasGpu : std::false_type {};
template <typename Op>
struct HasGpu<Op, std::void_t<decltype(std::declval<const Op&>().Gpu(
                      DType::kFloat, std::declval<const typename Op::Params&>(),
                      std::declval<const OpCall&>(), std::declval<void*>()))>> : std::true_type {};

// Whether an op struct's GPU path asks for device scratch memory (int64_t GpuScratchBytes(DType,
// const Params&) const; tf_kernel.h says how it is held).
template <typename Op, typename = void>
struct HasGpuScratch : std::false_type {};
template <typename Op>
struct HasGpuScratch<Op, std::void_t<decltype(std::declval<const Op&>().GpuScratchBytes(
                             DType::kFloat, std::declval<const typename Op::Params&>()))>>
    : std::true_type {};

// Runs the op's CPU path, whether it returns void or a Status (an op whose CPU path checks input
// values, which Validate cannot read on a GPU, returns one).
template <typename T, typename Op>
Status RunCpu(const Op& op, const typename Op::Params& params, const OpCall& call,
              const Parallel& parallel) {
  using CpuResult = decltype(op.template Cpu<T>(params, call, parallel));
  if constexpr (std::is_same_v<CpuResult, Status>) {
    return op.template Cpu<T>(params, call, parallel);
  } else {
    op.template Cpu<T>(params, call, parallel);
    return Status::Ok();
  }
}

}  // namespace internal

}  // namespace opforge

#endif  // OPFORGE_COMMON_OP_CALL_H_
