// bfloat16 <-> float on 16-bit patterns, as integer operations the compiler vectorises:
// Eigen::bfloat16's own rounding branches on NaN, which keeps loops over it scalar. A bfloat16
// in float is its bits shifted up; a float rounds to the nearest even bfloat16, NaN to the quiet
// NaN of its sign, exactly as Eigen::bfloat16(float) does (so as TensorFlow's bfloat16 kernels'
// scalar code does). `static`: each file gets its own copy, compiled with its own flags (the
// *_fma_cpu.cc builds use them too), as common/cpu_features.h explains.
#ifndef OPFORGE_COMMON_BF16_BITS_H_
#define OPFORGE_COMMON_BF16_BITS_H_

#include <cstdint>
#include <cstring>

namespace opforge {

static inline float Bf16BitsToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_BF16_BITS_H_
