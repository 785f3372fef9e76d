// Helpers for the GoogleTest suites: message checks, element types and their bit patterns,
// element-wise comparisons that name the differing elements, random inputs with special values,
// and a naive NumPy broadcast over full shapes to check kernels against.
//
// Host-only: no CUDA header, so the core tests (built under sanitizers, without CUDA) and the
// CUDA tests (with common/cuda_test_util.h on top) share it. Test code only; header-only.
#ifndef OPFORGE_COMMON_TEST_UTIL_H_
#define OPFORGE_COMMON_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

// Asserts that a ::opforge::Status is OK, printing its message otherwise.
#define OPFORGE_ASSERT_OK(expr)                         \
  do {                                                  \
    const ::opforge::Status opforge_s = (expr);         \
    ASSERT_TRUE(opforge_s.ok()) << opforge_s.message(); \
  } while (0)

namespace opforge {
namespace test {

// --- messages ---------------------------------------------------------------------------------

inline ::testing::AssertionResult Contains(const std::string& text, const std::string& needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text << "\" does not contain \"" << needle << "\"";
}

// True if `word` appears in `text` as a whole word (so "a" is not found in "ElementMul").
inline ::testing::AssertionResult NamesWord(const std::string& text, const std::string& word) {
  auto is_word_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) {
    const size_t end = pos + word.size();
    if ((pos == 0 || !is_word_char(text[pos - 1])) &&
        (end == text.size() || !is_word_char(text[end]))) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "\"" << text << "\" does not name \"" << word << "\"";
}

// --- element types ----------------------------------------------------------------------------

using FloatTypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16>;
using IntTypes = ::testing::Types<int32_t, int64_t>;
using AllTypes = ::testing::Types<float, double, Eigen::half, Eigen::bfloat16, int32_t, int64_t>;

// Typed-test names: ElementMulKernelTest/half.Forward rather than ElementMulKernelTest/2.Forward.
class TypeNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, float>) return "float";
    if constexpr (std::is_same_v<T, double>) return "double";
    if constexpr (std::is_same_v<T, Eigen::half>) return "half";
    if constexpr (std::is_same_v<T, Eigen::bfloat16>) return "bfloat16";
    if constexpr (std::is_same_v<T, int32_t>) return "int32";
    if constexpr (std::is_same_v<T, int64_t>) return "int64";
    if constexpr (std::is_same_v<T, int8_t>) return "int8";
    if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
    if constexpr (std::is_same_v<T, int16_t>) return "int16";
    if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
    if constexpr (std::is_same_v<T, uint32_t>) return "uint32";
    if constexpr (std::is_same_v<T, uint64_t>) return "uint64";
    if constexpr (std::is_same_v<T, std::complex<float>>) return "complex64";
    if constexpr (std::is_same_v<T, std::complex<double>>) return "complex128";
    return "unknown";
  }
};

template <typename T>
inline constexpr bool kIsInt = std::is_integral_v<T>;

template <typename T>
using BitsOf = std::conditional_t<sizeof(T) == 2, uint16_t,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;

template <typename T>
BitsOf<T> Bits(T v) {
  return Eigen::numext::bit_cast<BitsOf<T>>(v);
}

template <typename T>
T FromBits(BitsOf<T> b) {
  return Eigen::numext::bit_cast<T>(b);
}

// Exact widening of a floating value to double.
template <typename T>
double Wide(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return static_cast<double>(static_cast<float>(v));
  }
}

// One rounding of a double to T. A product of two T is exact in double for half, bfloat16 (it
// is exact in float, so going through float rounds once) and float (48 bits), so Narrow of it is
// the correctly rounded product.
template <typename T>
T Narrow(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(v);
  } else {
    return static_cast<T>(static_cast<float>(v));
  }
}

template <typename T>
bool IsNan(T v) {
  if constexpr (kIsInt<T>) {
    return false;
  } else {
    return std::isnan(Wide(v));
  }
}

// An integer as itself, a floating value as its value and its bits: "-0 (0x8000)".
template <typename T>
std::string Describe(T v) {
  std::ostringstream s;
  if constexpr (kIsInt<T>) {
    s << static_cast<int64_t>(v);
  } else {
    s << Wide(v) << " (0x" << std::hex << static_cast<uint64_t>(Bits(v)) << ")";
  }
  return s.str();
}

// --- element-wise comparisons -----------------------------------------------------------------

namespace internal {

// Compares bit patterns element by element and names the first few differing elements, with
// the element of `input` at the same index where there is one. With `any_nan`, any NaN matches
// any NaN.
template <typename T>
::testing::AssertionResult CompareBits(const std::vector<T>& got, const std::vector<T>& want,
                                       const std::vector<T>& input, bool any_nan) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  auto failure = ::testing::AssertionFailure();
  int64_t count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) == Bits(want[i])) continue;
    if (any_nan && IsNan(got[i]) && IsNan(want[i])) continue;
    if (count++ < 8) {
      failure << "\n  [" << i << "]";
      if (i < input.size()) failure << " input " << Describe(input[i]) << ":";
      failure << " got " << Describe(got[i]) << ", want " << Describe(want[i]);
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return failure << "\n  " << count << " of " << got.size() << " elements differ";
}

}  // namespace internal

// The same bits in every element: NaN matches only NaN of the same bits, -0 differs from +0.
// A failure names the differing elements, and with them the elements of `input` (the kernel's
// input, say) at the same indices where `input` is given.
template <typename T>
::testing::AssertionResult SameBits(const std::vector<T>& got, const std::vector<T>& want,
                                    const std::vector<T>& input = {}) {
  return internal::CompareBits(got, want, input, /*any_nan=*/false);
}

// The same bits, except that any NaN matches any NaN: x86 keeps the payload of a NaN operand
// (which one, when both are NaN, is the compiler's choice) and CUDA returns the canonical NaN.
// Signed zeros and infinities must still match bit for bit.
template <typename T>
::testing::AssertionResult SameBitsOrBothNan(const std::vector<T>& got, const std::vector<T>& want,
                                             const std::vector<T>& input = {}) {
  return internal::CompareBits(got, want, input, /*any_nan=*/true);
}

// --- random inputs ----------------------------------------------------------------------------

// Values where kernels tend to go wrong: signed zeros, +-1, infinities, NaNs (quiet, signalling,
// negative, with a payload), subnormals, the smallest normal, the largest and lowest values and
// epsilon. Floating types only.
template <typename T>
std::vector<T> SpecialValues() {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {static_cast<T>(0.0f),
                      static_cast<T>(-0.0f),
                      static_cast<T>(1.0f),
                      static_cast<T>(-1.0f),
                      static_cast<T>(0.5f),
                      static_cast<T>(-2.5f),
                      L::infinity(),
                      -L::infinity(),
                      L::quiet_NaN(),
                      -L::quiet_NaN(),
                      L::signaling_NaN(),
                      L::denorm_min(),
                      -L::denorm_min(),
                      L::min(),
                      -L::min(),
                      L::max(),
                      L::lowest(),
                      L::epsilon()};
  // A NaN with a payload.
  v.push_back(FromBits<T>(static_cast<BitsOf<T>>(Bits(L::quiet_NaN()) | 5)));
  return v;
}

// For 2-byte types every bit pattern, in order. For wider types `specials`, then
// `random_patterns` random bit patterns (every exponent, NaNs, subnormals), then `ordinary`
// values uniform in [-8, 8).
template <typename T>
std::vector<T> BitPatternInputs(uint64_t seed, const std::vector<T>& specials, int random_patterns,
                                int ordinary) {
  std::vector<T> v;
  if constexpr (sizeof(T) == 2) {
    for (uint32_t b = 0; b <= 0xFFFF; ++b) v.push_back(FromBits<T>(static_cast<uint16_t>(b)));
  } else {
    std::mt19937_64 rng(seed);
    v = specials;
    for (int i = 0; i < random_patterns; ++i) {
      v.push_back(FromBits<T>(static_cast<BitsOf<T>>(rng())));
    }
    std::uniform_real_distribution<double> value(-8.0, 8.0);
    for (int i = 0; i < ordinary; ++i) v.push_back(static_cast<T>(value(rng)));
  }
  return v;
}

// n random values. Integers: 30% any value (so products wrap), the rest in [-100, 100].
// Floating types: uniform in [-2, 2), and, where `specials` is not empty, 4% of the elements
// drawn from it instead.
template <typename T>
std::vector<T> RandomVector(std::mt19937_64& rng, int64_t n, const std::vector<T>& specials = {}) {
  std::vector<T> v(static_cast<size_t>(n));
  std::uniform_int_distribution<int> percent(0, 99);
  for (auto& x : v) {
    if constexpr (kIsInt<T>) {
      x = percent(rng) < 30 ? static_cast<T>(rng())
                            : static_cast<T>(std::uniform_int_distribution<int>(-100, 100)(rng));
    } else if (!specials.empty() && percent(rng) < 4) {
      const int last = static_cast<int>(specials.size()) - 1;
      x = specials[std::uniform_int_distribution<int>(0, last)(rng)];
    } else {
      x = static_cast<T>(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng));
    }
  }
  return v;
}

// n values uniform in [lo, hi), rounded to T.
template <typename T>
std::vector<T> UniformVector(std::mt19937_64& rng, int64_t n, double lo, double hi) {
  std::vector<T> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> d(lo, hi);
  for (auto& x : v) x = static_cast<T>(d(rng));
  return v;
}

// n values: integers anywhere in their type's range (the widest ones then lose precision in
// float), floating values uniform in [-4, 4).
template <typename T>
std::vector<T> FullRangeVector(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) {
    if constexpr (std::is_integral_v<T>) {
      x = static_cast<T>(rng());
    } else {
      x = static_cast<T>(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
    }
  }
  return v;
}

// --- shapes and the naive broadcast -----------------------------------------------------------

using Shape = std::vector<int64_t>;

inline int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// NumPy's broadcast rule, written out independently of MakeBroadcastPlan.
inline std::optional<Shape> RefBroadcastShape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {  // i counts from the right
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da == db || db == 1) {
      out[rank - 1 - i] = da;
    } else if (da == 1) {
      out[rank - 1 - i] = db;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// Row-major offset in an operand of shape `shape` (right-aligned against `out`) of the element
// that the output multi-index `idx` reads.
inline int64_t RefOffset(const Shape& shape, const Shape& out, const Shape& idx) {
  const size_t lead = out.size() - shape.size();
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    off = off * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  }
  return off;
}

// Calls visit(o, a_offset, b_offset) for every element o of the output `out` in row-major
// order, with no use of a plan's collapsed strides.
template <typename Visit>
void ForEachOutput(const Shape& a, const Shape& b, const Shape& out, Visit visit) {
  const int64_t n = NumElements(out);
  Shape idx(out.size(), 0);
  for (int64_t o = 0; o < n; ++o) {
    visit(o, RefOffset(a, out, idx), RefOffset(b, out, idx));
    for (size_t d = out.size(); d-- > 0;) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

// The same over the broadcast shape of a and b, which must be compatible.
template <typename Visit>
void ForEachOutput(const Shape& a, const Shape& b, Visit visit) {
  ForEachOutput(a, b, *RefBroadcastShape(a, b), visit);
}

struct ShapePair {
  Shape a, b;
};

// A random broadcast-compatible pair: an output shape of rank <= max_rank with dimensions drawn
// from `sizes` and at most max_elements elements (zero dimensions not counted), each operand a
// suffix of it with some dimensions replaced by 1. With zero_percent > 0, each output dimension
// is 0 with that chance, so some operands are broadcast along a zero-size dimension and still
// have elements.
inline ShapePair RandomShapePair(std::mt19937_64& rng, int max_rank, int64_t max_elements,
                                 int zero_percent,
                                 const std::vector<int64_t>& sizes = {1, 2, 3, 4, 5, 7, 8, 16,
                                                                      33}) {
  std::uniform_int_distribution<int> rank_dist(0, max_rank);
  std::uniform_int_distribution<int> size_dist(0, static_cast<int>(sizes.size()) - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  for (;;) {
    const int rank = rank_dist(rng);
    Shape out(rank);
    for (auto& d : out) {
      d = (zero_percent > 0 && percent(rng) < zero_percent) ? 0 : sizes[size_dist(rng)];
    }
    int64_t nonzero_product = 1;
    for (int64_t d : out) nonzero_product *= d == 0 ? 1 : d;
    if (nonzero_product > max_elements) continue;
    auto make_operand = [&](int operand_rank) {
      Shape s(out.end() - operand_rank, out.end());
      for (auto& d : s) {
        if (percent(rng) < 35) d = 1;
      }
      return s;
    };
    ShapePair p;
    std::uniform_int_distribution<int> operand_rank(0, rank);
    p.a = make_operand(operand_rank(rng));
    p.b = make_operand(operand_rank(rng));
    return p;
  }
}

}  // namespace test
}  // namespace opforge

#endif  // OPFORGE_COMMON_TEST_UTIL_H_
