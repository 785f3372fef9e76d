// Shared pieces of the libFuzzer harnesses (cc/ops/<op>/<op>_fuzz.cc; built by `make fuzz-build`,
// run by `make fuzz`, seeds in cc/fuzz/corpus/<harness>/ from cc/fuzz/make_corpus.py).
//
// A harness does what the op's TensorFlow binding (<op>_tf.cc) does, with TensorFlow taken out:
// it decodes the fuzz bytes into attrs, input shapes and values, runs the attr check the kernel's
// constructor runs and the per-call validate, declares the outputs the binding declares,
// allocates every tensor at its exact size (null for an empty one, as TfKernel passes), and runs
// the CPU kernel. A sanitizer report, an abort, or one of the checks below failing is a finding:
//   - an error Status is InvalidArgument, with a message "<Op>: ..." naming the op;
//   - a validate that accepts gives output shapes TensorFlow can build (dims >= 0, element count
//     representable: TensorShape::AddDim CHECK-fails, killing the process, otherwise);
//   - a validate that accepts only shapes TensorFlow can build (inputs with a negative dim or an
//     overflowing count come only from direct callers; accepting one is reported);
//   - every output element is written (outputs pre-filled with a canary; an element still holding
//     it is run again with a second canary, so that a kernel copying the canary's bits from its
//     input is not blamed);
//   - the same results (any NaN matching any NaN) when the parallel-for splits the range into
//     other pieces, in another order, and (where the binding allows it) when writing in place.
//
// Byte format, read front to back (short inputs read as zeros for structure, and as a
// deterministic pseudo-random stream, seeded by the bytes, for tensor values):
//   Dim/Int:  b < 0x80: b;  0x80..0xEF: a little-endian u16 follows;  0xF0..0xFE: kSpecialInts;
//             0xFF: a raw little-endian int64 follows.
//   DimOr(v): b < 0xC0: v;  else a Dim follows.
//   Shape(r): b < 0xC0: rank r;  else rank b & 0x0F (0..15);  then rank Dims.
//   AnyShape: b < 0xF0: rank b % 7;  else 7 + (b & 0x0F);  then rank Dims.
//   Float:    b < 0x80: (b - 64) / 16;  0x80..0xEF: kSpecialFloats;  0xF0..0xFF: raw float bits.
//   FloatOr(typical): b < 0x60: typical[b % n];  else a Float follows.
//   Enum:     b < 0xE0: valid[b % n];  else a bad string (kBadStrings, or length + bytes).
//   Values:   b < 0xA0: small ((b - 80) / 8 for floats, b - 80 for ints); 0xA0..0xDF: specials of
//             the type (inf, NaN, -0, subnormals, extremes); 0xE0..0xFF: raw bits of the type.
// Every harness starts with three bytes: mode (which entry point), dtype, flags (FuzzFlags).
#ifndef OPFORGE_FUZZ_FUZZ_UTIL_H_
#define OPFORGE_FUZZ_FUZZ_UTIL_H_

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"

namespace opforge {
namespace fuzz {

// --- limits -----------------------------------------------------------------------------------

// A call runs its kernel only when every tensor has at most kMaxTensorElements elements and all
// of them together at most kMaxTotalElements (enough for the Winograd paths: 16 channels, 16x16
// maps); otherwise only its validation runs. Shapes and attrs themselves range over everything.
constexpr int64_t kMaxTensorElements = int64_t{1} << 14;
constexpr int64_t kMaxTotalElements = int64_t{1} << 16;
// The most elements an input tensor of a real program can have (32 GiB of float32).
constexpr int64_t kMaxRealElements = int64_t{1} << 33;
// TensorShape::MaxDimensions().
constexpr int kMaxTfRank = 254;

// --- findings ---------------------------------------------------------------------------------

inline bool Verbose() {
  static const bool verbose = std::getenv("OPFORGE_FUZZ_VERBOSE") != nullptr;
  return verbose;
}

// What the harness is doing, printed with a finding (set as the call is decoded).
inline std::string& Context() {
  static std::string context;
  return context;
}

[[noreturn]] inline void Fail(const char* format, ...) {
  std::fprintf(stderr, "\n==opforge-fuzz== FINDING: ");
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fprintf(stderr, "\n==opforge-fuzz== call: %s\n", Context().c_str());
  std::fflush(stderr);
  std::abort();
}

inline std::string Str(const std::vector<int64_t>& v) { return ShapeString(v); }

// How far calls get (OPFORGE_FUZZ_STATS=1 prints it at exit): rejected by a validate, accepted,
// kernel run.
struct Stats {
  int64_t rejected = 0, accepted = 0, ran = 0;
  ~Stats() {
    if (std::getenv("OPFORGE_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr, "==opforge-fuzz== rejected %lld, accepted %lld, kernel runs %lld\n",
                   static_cast<long long>(rejected), static_cast<long long>(accepted),
                   static_cast<long long>(ran));
    }
  }
};
inline Stats& GetStats() {
  static Stats stats;
  return stats;
}

// Adds "key=value" to the context.
// (OPFORGE_FUZZ_VERBOSE=1 prints it as it goes, so that a sanitizer report has it before it.)
template <typename V>
void Note(const char* key, const V& value) {
  std::ostringstream s;
  s << " " << key << "=" << value;
  Context() += s.str();
  if (Verbose()) std::fprintf(stderr, "[fuzz] %s\n", s.str().c_str());
}
inline void Note(const char* key, const std::vector<int64_t>& value) { Note(key, Str(value)); }

// --- TensorFlow's shape rules -----------------------------------------------------------------

// TensorShape::AddDim, dim by dim: every dim >= 0 and every running product representable
// (MultiplyWithoutOverflow; a 0 makes every later product 0). Sets *count when given.
inline bool TfShapeOk(const std::vector<int64_t>& shape, int64_t* count = nullptr) {
  if (shape.size() > static_cast<size_t>(kMaxTfRank)) return false;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (n != 0 && d != 0 && n > std::numeric_limits<int64_t>::max() / d) return false;
    n *= d;
  }
  if (count != nullptr) *count = n;
  return true;
}

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 0;
  if (!TfShapeOk(shape, &n)) Fail("NumElements of an impossible shape %s", Str(shape).c_str());
  return n;
}

// a * b for non-negative a, b, or -1 when it overflows (a harness's own arithmetic on sizes).
inline int64_t MulOrMinus1(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return -1;
  if (a != 0 && b > std::numeric_limits<int64_t>::max() / a) return -1;
  return a * b;
}

// --- the checks -------------------------------------------------------------------------------

// An error from a validate: InvalidArgument whose message starts "<name>: " with one of `ops`.
inline void CheckError(const Status& s, std::initializer_list<const char*> ops) {
  if (s.ok()) Fail("CheckError on an OK status");
  if (s.code() != Status::Code::kInvalidArgument) {
    Fail("validation error is not InvalidArgument: \"%s\"", s.message().c_str());
  }
  const std::string& m = s.message();
  for (const char* op : ops) {
    const std::string prefix = std::string(op) + ": ";
    if (m.size() > prefix.size() && m.compare(0, prefix.size(), prefix) == 0) {
      if (Verbose())
        std::fprintf(stderr, "[fuzz] error: %s\n  call:%s\n", m.c_str(), Context().c_str());
      return;
    }
  }
  std::string names;
  for (const char* op : ops) names += std::string(names.empty() ? "" : " or ") + op;
  Fail("validation message does not start with \"%s: \" and a text: \"%s\"", names.c_str(),
       m.c_str());
}

// Checks an attr-or-shape validation result; true when it passed.
inline bool Passed(const Status& s, std::initializer_list<const char*> ops) {
  if (s.ok()) {
    ++GetStats().accepted;
    return true;
  }
  ++GetStats().rejected;
  CheckError(s, ops);
  return false;
}

// A validate passed: whether every input shape is one TensorFlow can build. A harness also feeds
// shapes with negative dims or overflowing counts, which only direct callers of the core can
// pass; a validate that accepts one is noted (a "NOTE" line, the first few times), not failed,
// and the kernel is not run: it would index by impossible sizes. With
// OPFORGE_FUZZ_STRICT_SHAPES=1 it is a finding.
inline bool InputsPossible(std::initializer_list<const std::vector<int64_t>*> inputs) {
  static int notes = 0;
  static const bool strict = std::getenv("OPFORGE_FUZZ_STRICT_SHAPES") != nullptr;
  for (const std::vector<int64_t>* s : inputs) {
    if (!TfShapeOk(*s)) {
      if (strict) {
        Fail("validation accepted an input shape TensorFlow cannot build: %s", Str(*s).c_str());
      }
      if (notes < 5) {
        ++notes;
        std::fprintf(stderr,
                     "==opforge-fuzz== NOTE: validation accepted an input shape TensorFlow "
                     "cannot build: %s; call:%s\n",
                     Str(*s).c_str(), Context().c_str());
      }
      return false;
    }
  }
  return true;
}

// A validate passed: the declared output shape must be one TensorFlow can build.
inline void CheckOutputShape(const char* name, const std::vector<int64_t>& shape) {
  if (!TfShapeOk(shape)) {
    Fail(
        "validation passed but output %s has a shape TensorFlow cannot build: %s "
        "(TensorShape::AddDim would CHECK-fail)",
        name, Str(shape).c_str());
  }
}

// --- byte decoding ----------------------------------------------------------------------------

inline constexpr int64_t kSpecialInts[15] = {
    -1,
    -2,
    int64_t{1} << 30,
    (int64_t{1} << 30) + 1,
    std::numeric_limits<int32_t>::max(),
    int64_t{1} << 31,
    (int64_t{1} << 32) + 1,
    int64_t{1} << 40,
    3037000500,  // about sqrt(2^63): a product of two overflows
    int64_t{1} << 62,
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::min(),
    std::numeric_limits<int32_t>::min(),
    (int64_t{1} << 24) + 1,
    int64_t{1} << 20,
};

inline const std::vector<float>& SpecialFloats() {
  using L = std::numeric_limits<float>;
  static const std::vector<float> v = {0.0f,
                                       -0.0f,
                                       L::infinity(),
                                       -L::infinity(),
                                       L::quiet_NaN(),
                                       -L::quiet_NaN(),
                                       L::denorm_min(),
                                       -L::denorm_min(),
                                       L::min(),
                                       L::max(),
                                       L::lowest(),
                                       L::epsilon(),
                                       1e-30f,
                                       1e30f,
                                       0.5f,
                                       1.0f,
                                       -1.0f,
                                       2.0f,
                                       1.0000001f,
                                       0.99999994f,
                                       65504.0f,
                                       65520.0f,
                                       1e-8f,
                                       100.0f,
                                       -100.0f,
                                       88.8f,
                                       4.1351666f};
  return v;
}

inline const std::vector<std::string>& BadStrings() {
  static const std::vector<std::string> v = {"",
                                             " SAME",
                                             "same",
                                             "NHWC ",
                                             std::string("NHWC\0x", 6),
                                             "NCHW\n",
                                             std::string(300, 'X'),
                                             "\xff\xfe",
                                             "VALID,SAME",
                                             "xyxy\0"};
  return v;
}

template <typename T>
struct Bits {
  using type = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
};

template <typename T>
T FromBits(typename Bits<T>::type b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

template <typename T>
constexpr bool kIsFloat = !std::is_integral_v<T>;

// Values where kernels go wrong, per type.
template <typename T>
const std::vector<T>& SpecialValues() {
  static const std::vector<T> v = [] {
    using L = std::numeric_limits<T>;
    std::vector<T> s;
    if constexpr (kIsFloat<T>) {
      for (float f : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -2.5f, 1e-3f, 60000.0f, 1e20f, -1e20f})
        s.push_back(static_cast<T>(f));
      for (T t : {L::infinity(), -L::infinity(), L::quiet_NaN(), static_cast<T>(-L::quiet_NaN()),
                  L::signaling_NaN(), L::denorm_min(), static_cast<T>(-L::denorm_min()), L::min(),
                  static_cast<T>(-L::min()), L::max(), L::lowest(), L::epsilon()})
        s.push_back(t);
    } else {
      for (T t : {T(0), T(1), T(-1), T(2), L::min(), L::max(), static_cast<T>(L::min() + 1),
                  static_cast<T>(L::max() - 1), T(7), T(-128), T(127)})
        s.push_back(t);
    }
    return s;
  }();
  return v;
}

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
    rng_ = h | 1;
    Context().clear();
  }

  bool exhausted() const { return pos_ >= size_; }

  // Shapes TensorFlow cannot build (a negative dim, an overflowing running count) come only from
  // direct callers of the core, and a tensor of more than kMaxRealElements elements from no
  // machine. By default a harness repairs every input shape it made with Fix (a negative dim
  // becomes its absolute value, the dim where the running count overflows 0, and if the count
  // still passes kMaxRealElements, the dim where it does 0), so that every
  // finding is one a TensorFlow program can reach; shapes such as [0, 2^62, 2^62] or
  // [1, 2^31, 2^31, 0] stay. With OPFORGE_FUZZ_RAW_SHAPES=1 the shapes go to validation as drawn
  // (then see InputsPossible).
  static bool RawShapes() {
    static const bool raw = std::getenv("OPFORGE_FUZZ_RAW_SHAPES") != nullptr;
    return raw;
  }
  static void Fix(std::vector<int64_t>* shape) {
    if (RawShapes()) return;
    if (shape->size() > static_cast<size_t>(kMaxTfRank)) shape->resize(kMaxTfRank);
    int64_t n = 1;
    for (int64_t& d : *shape) {
      if (d < 0) d = d == std::numeric_limits<int64_t>::min() ? 0 : -d;
      if (n != 0 && d != 0 && n > std::numeric_limits<int64_t>::max() / d) d = 0;
      n *= d;
    }
    if (n <= kMaxRealElements) return;
    n = 1;
    for (int64_t& d : *shape) {
      if (d != 0 && n > kMaxRealElements / d) {
        d = 0;
        return;
      }
      n *= d;
    }
  }
  static void Fix(std::initializer_list<std::vector<int64_t>*> shapes) {
    for (std::vector<int64_t>* s : shapes) Fix(s);
  }

  // Structure: zeros once the bytes run out.
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return Byte() & 1; }
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (Byte() << 8));
  }
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(Byte()) << (8 * i);
    return v;
  }

  int64_t Int() {
    const uint8_t b = Byte();
    if (b < 0x80) return b;
    if (b < 0xF0) return U16();
    if (b < 0xFF) return kSpecialInts[b - 0xF0];
    return static_cast<int64_t>(U64());
  }
  int64_t Dim() { return Int(); }
  int64_t IntOr(int64_t v) { return Byte() < 0xC0 ? v : Int(); }
  int64_t DimOr(int64_t v) { return IntOr(v); }

  std::vector<int64_t> Dims(int rank) {
    std::vector<int64_t> s(static_cast<size_t>(rank));
    for (auto& d : s) d = Dim();
    return s;
  }
  std::vector<int64_t> Shape(int rank) {
    const uint8_t b = Byte();
    return Dims(b < 0xC0 ? rank : (b & 0x0F));
  }
  // A shape of any rank (0..6 mostly): b < 0xF0: rank b % 7; else 7 + (b & 0x0F); then the Dims.
  std::vector<int64_t> AnyShape() {
    const uint8_t b = Byte();
    return Dims(b < 0xF0 ? b % 7 : 7 + (b & 0x0F));
  }
  std::vector<int64_t> ShapeOr(const std::vector<int64_t>& v) {
    return Byte() < 0xC0 ? v : AnyShape();
  }
  // A list attr of `len` values (or another length), each from `value(i)`.
  std::vector<int64_t> List(size_t len, const std::function<int64_t(size_t)>& value) {
    const uint8_t b = Byte();
    const size_t n = b < 0xC0 ? len : (b & 0x0F);
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = value(i);
    return v;
  }

  float Float() {
    const uint8_t b = Byte();
    if (b < 0x80) return (static_cast<int>(b) - 64) / 16.0f;
    if (b < 0xF0) return SpecialFloats()[(b - 0x80) % SpecialFloats().size()];
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= static_cast<uint32_t>(Byte()) << (8 * i);
    return FromBits<float>(bits);
  }
  float FloatOr(std::initializer_list<float> typical) {
    const uint8_t b = Byte();
    if (b < 0x60) return typical.begin()[b % typical.size()];
    return Float();
  }

  std::string Enum(std::initializer_list<const char*> valid) {
    const uint8_t b = Byte();
    if (b < 0xE0) return valid.begin()[b % valid.size()];
    if (b < 0xF0) return BadStrings()[(b - 0xE0) % BadStrings().size()];
    std::string s(Byte() % 16, '\0');
    for (auto& c : s) c = static_cast<char>(Byte());
    return s;
  }

  // Values: from the bytes, then from the pseudo-random stream.
  uint8_t ValueByte() {
    if (pos_ < size_) return data_[pos_++];
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return static_cast<uint8_t>(rng_ >> 32);
  }
  template <typename T>
  T Value() {
    const uint8_t b = ValueByte();
    if (b < 0xA0) {
      const int small = static_cast<int>(b) - 80;
      if constexpr (kIsFloat<T>) {
        return static_cast<T>(static_cast<float>(small) / 8.0f);
      } else {
        return static_cast<T>(small);
      }
    }
    if (b < 0xE0) return SpecialValues<T>()[(b - 0xA0) % SpecialValues<T>().size()];
    typename Bits<T>::type bits = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      bits = static_cast<typename Bits<T>::type>(bits |
                                                 (static_cast<uint64_t>(ValueByte()) << (8 * i)));
    }
    return FromBits<T>(bits);
  }
  template <typename T>
  void Fill(T* data, int64_t n) {
    for (int64_t i = 0; i < n; ++i) data[i] = Value<T>();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t rng_;
};

// The third header byte.
struct FuzzFlags {
  explicit FuzzFlags(uint8_t b)
      : in_place((b & 1) != 0), chunks((b >> 1) & 7), reverse((b & 0x10) != 0), extra(b >> 5) {}
  bool in_place;  // also run writing into an input's buffer, where the binding may forward it
  int chunks;     // 0: no re-run; else re-run with the range split into chunks + 1 pieces
  bool reverse;   // the pieces in reverse order
  int extra;      // 3 bits for the harness
};

// --- parallel-for backends --------------------------------------------------------------------

// Splits the range into `pieces` uneven pieces, run on the calling thread (last first when
// `reverse`): kernels must give the same bits for any partition.
class ChunkedParallel final : public Parallel {
 public:
  ChunkedParallel(int pieces, bool reverse) : pieces_(std::max(1, pieces)), reverse_(reverse) {}
  void For(int64_t total, double, const Fn& fn) const override {
    if (total <= 0) return;
    const int64_t k = std::min<int64_t>(pieces_, total);
    std::vector<int64_t> bounds(static_cast<size_t>(k + 1));
    for (int64_t i = 0; i <= k; ++i) {
      // Uneven: piece i ends at total * i^2 / k^2 (rounded), the first pieces short.
      bounds[static_cast<size_t>(i)] = static_cast<int64_t>(static_cast<long double>(total) * i *
                                                            i / (static_cast<long double>(k) * k));
    }
    bounds[static_cast<size_t>(k)] = total;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = reverse_ ? k - 1 - j : j;
      const int64_t b = bounds[static_cast<size_t>(i)], e = bounds[static_cast<size_t>(i + 1)];
      if (b < e) fn(b, e);
    }
  }

 private:
  int pieces_;
  bool reverse_;
};

// --- tensors ----------------------------------------------------------------------------------

// A tensor at its exact size (so ASan sees any access past it); data() is null when empty, as
// TfKernel passes it.
template <typename T>
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const std::vector<int64_t>& shape) : shape_(shape), n_(NumElements(shape)) {
    if (n_ > 0) data_.reset(new T[static_cast<size_t>(n_)]);
  }
  T* data() { return n_ > 0 ? data_.get() : nullptr; }
  const T* data() const { return n_ > 0 ? data_.get() : nullptr; }
  int64_t size() const { return n_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  const T& operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  void Fill(Input& in) { in.Fill(data(), n_); }

 private:
  std::vector<int64_t> shape_;
  int64_t n_ = 0;
  std::unique_ptr<T[]> data_;
};

// Whether a call with these tensor shapes is small enough to run its kernel.
inline bool SmallEnough(std::initializer_list<std::vector<int64_t>> shapes) {
  int64_t total = 0;
  for (const auto& s : shapes) {
    int64_t n = 0;
    if (!TfShapeOk(s, &n) || n > kMaxTensorElements) return false;
    total += n;
  }
  return total <= kMaxTotalElements;
}

// Bytes of a value are equal, or (floating types) both are NaN.
template <typename T>
bool SameOrBothNan(const T& a, const T& b) {
  if (std::memcmp(&a, &b, sizeof(T)) == 0) return true;
  if constexpr (kIsFloat<T>) {
    return Eigen::numext::isnan(a) && Eigen::numext::isnan(b);
  } else {
    return false;
  }
}

// The outputs of one call, with their canaries. The harness adds them as the binding declares
// them, then runs the kernel through Run.
class Outputs {
 public:
  // Declares an output (checking that TensorFlow could build its shape) and allocates it when
  // the call is small enough to run (Small()); null when empty or not allocated.
  template <typename T>
  T* Add(const char* name, const std::vector<int64_t>& shape, bool fully_written = true) {
    CheckOutputShape(name, shape);
    Entry e;
    e.name = name;
    e.shape = shape;
    e.count = NumElements(shape);
    e.elem = sizeof(T);
    e.fully_written = fully_written;
    total_ += std::min(e.count, kMaxTotalElements + 1);
    if (e.count > kMaxTensorElements || total_ > kMaxTotalElements) small_ = false;
    if (small_ && e.count > 0) {
      auto t = std::make_shared<Tensor<T>>(shape);
      e.data = reinterpret_cast<uint8_t*>(t->data());
      e.holder = t;
    }
    e.equal = [](const uint8_t* a, const uint8_t* b) {
      T x, y;
      std::memcpy(&x, a, sizeof(T));
      std::memcpy(&y, b, sizeof(T));
      return SameOrBothNan(x, y);
    };
    entries_.push_back(std::move(e));
    return reinterpret_cast<T*>(entries_.back().data);
  }
  template <typename T>
  T* Get(size_t i) {
    return reinterpret_cast<T*>(entries_[i].data);
  }
  int64_t Count(size_t i) const { return entries_[i].count; }

  // Every output was allocated: the call is small enough to run.
  bool Small() const { return small_; }
  bool AnyNonEmpty() const {
    for (const Entry& e : entries_)
      if (e.count > 0) return true;
    return false;
  }

  // Canary 0: bytes 0xA5 under a top byte 0x7F (NaN in float32, half and bfloat16); canary 1:
  // bytes 0x5A under 0xFF. Any pattern will do: an element holding canary 0 after the kernel
  // counts as unwritten only if it holds canary 1 after a second run.
  static std::vector<uint8_t> Canary(int which, size_t elem) {
    std::vector<uint8_t> c(elem, which == 0 ? 0xA5 : 0x5A);
    if (elem > 1) c[elem - 1] = which == 0 ? 0x7F : 0xFF;
    return c;
  }
  void FillCanary(int which) {
    for (Entry& e : entries_) {
      const std::vector<uint8_t> c = Canary(which, e.elem);
      for (int64_t i = 0; i < e.count && e.data != nullptr; ++i)
        std::memcpy(e.data + i * static_cast<int64_t>(e.elem), c.data(), e.elem);
    }
  }
  // Indices per output still holding canary `which`.
  std::vector<std::vector<int64_t>> Unwritten(int which) const {
    std::vector<std::vector<int64_t>> u(entries_.size());
    for (size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      if (!e.fully_written) continue;
      const std::vector<uint8_t> canary = Canary(which, e.elem);
      for (int64_t i = 0; i < e.count; ++i) {
        if (std::memcmp(e.data + i * static_cast<int64_t>(e.elem), canary.data(), e.elem) == 0)
          u[k].push_back(i);
      }
    }
    return u;
  }
  std::vector<std::vector<uint8_t>> Snapshot() const {
    std::vector<std::vector<uint8_t>> s;
    for (const Entry& e : entries_) s.emplace_back(e.data, e.data + e.count * e.elem);
    return s;
  }
  // Compares with a snapshot; names the first difference.
  void Compare(const std::vector<std::vector<uint8_t>>& want, const char* what) const {
    for (size_t k = 0; k < entries_.size(); ++k) {
      const Entry& e = entries_[k];
      for (int64_t i = 0; i < e.count; ++i) {
        const int64_t off = i * static_cast<int64_t>(e.elem);
        if (!e.equal(e.data + off, want[k].data() + off)) {
          Fail("%s: output %s %s differs at element %lld", what, e.name.c_str(),
               Str(e.shape).c_str(), static_cast<long long>(i));
        }
      }
    }
  }

  // Runs the kernel (run(parallel)) as the checks above say: once serially with canary 0 (again
  // with canary 1 where elements still hold canary 0), then, where flags ask for it, on a
  // ChunkedParallel, comparing.
  template <typename RunFn>
  void Run(const FuzzFlags& flags, RunFn run) {
    const SerialParallel serial;
    ++GetStats().ran;
    if (Verbose()) std::fprintf(stderr, "[fuzz] kernel:%s\n", Context().c_str());
    FillCanary(0);
    run(static_cast<const Parallel&>(serial));
    const auto unwritten = Unwritten(0);
    bool any = false;
    for (const auto& u : unwritten) any = any || !u.empty();
    const auto first = Snapshot();
    if (any) {
      FillCanary(1);
      run(static_cast<const Parallel&>(serial));
      const auto again = Unwritten(1);
      for (size_t k = 0; k < entries_.size(); ++k) {
        for (int64_t i : unwritten[k]) {
          if (std::binary_search(again[k].begin(), again[k].end(), i)) {
            Fail("output %s %s: element %lld (of %lld) not written by the kernel",
                 entries_[k].name.c_str(), Str(entries_[k].shape).c_str(),
                 static_cast<long long>(i), static_cast<long long>(entries_[k].count));
          }
        }
      }
      Compare(first, "second serial run (other canary)");
    }
    if (flags.chunks > 0) {
      const ChunkedParallel chunked(flags.chunks + 1, flags.reverse);
      FillCanary(1);
      run(static_cast<const Parallel&>(chunked));
      Compare(first, "run with the range split into other pieces");
    }
  }

 private:
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    int64_t count = 0;
    size_t elem = 0;
    uint8_t* data = nullptr;
    bool fully_written = true;
    std::shared_ptr<void> holder;
    bool (*equal)(const uint8_t*, const uint8_t*) = nullptr;
  };
  std::vector<Entry> entries_;
  int64_t total_ = 0;
  bool small_ = true;
};

// Dtype names for the context.
template <typename T>
const char* TypeName() {
  if constexpr (std::is_same_v<T, Eigen::half>) return "half";
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bfloat16";
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, double>) return "float64";
  if constexpr (std::is_same_v<T, int8_t>) return "int8";
  if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
  if constexpr (std::is_same_v<T, int16_t>) return "int16";
  if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
  if constexpr (std::is_same_v<T, int32_t>) return "int32";
  if constexpr (std::is_same_v<T, int64_t>) return "int64";
  return "?";
}

// Calls f(T{}) for the dtype index (modulo the count) in the float types half, bfloat16, float,
// double.
template <typename F>
void WithFloatType(uint8_t index, F f) {
  switch (index % 4) {
    case 0:
      return f(Eigen::half());
    case 1:
      return f(Eigen::bfloat16());
    case 2:
      return f(float());
    default:
      return f(double());
  }
}

// The same over half, bfloat16 and float (the NMS ops, whose IoU is float32).
template <typename F>
void WithNmsFloatType(uint8_t index, F f) {
  switch (index % 3) {
    case 0:
      return f(Eigen::half());
    case 1:
      return f(Eigen::bfloat16());
    default:
      return f(float());
  }
}

// Element-wise kernels whose output may be written over an input (the binding forwards the
// buffer). RunElementwise: `run(x, y, parallel)` on one input of `shape`; RunElementwiseGrad:
// `run(g, x, dx, parallel)` on two inputs of `shape`, dx over g. Each runs out of place through
// Outputs (canaries, thread counts) and, with flags.in_place, once more in place on a copy;
// both must give the same values.
template <typename T>
void CheckSameValues(const Tensor<T>& in_place, const T* out_of_place) {
  for (int64_t i = 0; i < in_place.size(); ++i) {
    if (!SameOrBothNan(in_place[i], out_of_place[i]))
      Fail("in place: element %lld differs", (long long)i);
  }
}

template <typename T, typename Run>
void RunElementwise(Input& in, const FuzzFlags& flags, const char* output,
                    const std::vector<int64_t>& shape, Run run) {
  Outputs outs;
  outs.Add<T>(output, shape);
  if (!outs.Small() || !outs.AnyNonEmpty()) return;
  Tensor<T> x(shape);
  x.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) { run(x.data(), outs.Get<T>(0), parallel); });
  if (flags.in_place) {
    Tensor<T> y(shape);
    std::copy(x.data(), x.data() + x.size(), y.data());
    run(y.data(), y.data(), SerialParallel());
    CheckSameValues(y, outs.Get<T>(0));
  }
}

template <typename T, typename Run>
void RunElementwiseGrad(Input& in, const FuzzFlags& flags, const std::vector<int64_t>& shape,
                        Run run) {
  Outputs outs;
  outs.Add<T>("backprops", shape);
  if (!outs.Small() || !outs.AnyNonEmpty()) return;
  Tensor<T> g(shape), x(shape);
  g.Fill(in);
  x.Fill(in);
  outs.Run(flags,
           [&](const Parallel& parallel) { run(g.data(), x.data(), outs.Get<T>(0), parallel); });
  if (flags.in_place) {
    Tensor<T> dx(shape);
    std::copy(g.data(), g.data() + g.size(), dx.data());
    run(dx.data(), x.data(), dx.data(), SerialParallel());
    CheckSameValues(dx, outs.Get<T>(0));
  }
}

}  // namespace fuzz
}  // namespace opforge

// The entry point every harness shares. The first three bytes choose the entry point (one of
// `modes`), the dtype (through DISPATCH: WithFloatType or WithNmsFloatType) and the flags; then
// the harness's Fuzz<T>(in, mode, flags) runs.
#define OPFORGE_FUZZ_ENTRY(modes, DISPATCH)                                 \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    using namespace opforge::fuzz;                                          \
    Input in(data, size);                                                   \
    const int mode = in.Byte() % (modes);                                   \
    const uint8_t dtype = in.Byte();                                        \
    const FuzzFlags flags(in.Byte());                                       \
    if ((modes) > 1) Note("mode", mode);                                    \
    DISPATCH(dtype, [&](auto t) {                                           \
      using T = decltype(t);                                                \
      Note("T", TypeName<T>());                                             \
      Fuzz<T>(in, mode, flags);                                             \
    });                                                                     \
    return 0;                                                               \
  }

#endif  // OPFORGE_FUZZ_FUZZ_UTIL_H_
