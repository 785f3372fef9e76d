// The AVX2 build of ElementMul's bfloat16 inner loops (element_mul_bf16.h). CMakeLists.txt
// compiles this file with -mavx2 -mfma on x86-64; the loops are called only after the CPU
// reported AVX2 and FMA (and OPFORGE_MAX_ISA allows them). Nothing here instantiates a template
// or includes Eigen, so no inline definition of another file's can end up compiled for AVX2.
#include <cstdint>

#include "common/bf16_bits.h"
#include "ops/element_mul/element_mul_bf16.h"

namespace opforge {

#if defined(__x86_64__) && defined(__AVX2__)
#include "ops/element_mul/element_mul_bf16.inc"
bool HaveElementMulBf16Avx2() { return true; }
void ElementMulBf16RunAvx2(const uint16_t* x, const uint16_t* y, uint16_t* out, int64_t n,
                           int64_t sx, int64_t sy) {
  MulBf16Run(x, y, out, n, sx, sy);
}
#else
bool HaveElementMulBf16Avx2() { return false; }
void ElementMulBf16RunAvx2(const uint16_t*, const uint16_t*, uint16_t*, int64_t, int64_t, int64_t) {
}
#endif

}  // namespace opforge
