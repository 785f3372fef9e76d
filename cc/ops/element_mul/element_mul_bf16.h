// ElementMul's bfloat16 inner loop, out[k] = bf16(float(x[k * sx]) * float(y[k * sy])) on 16-bit
// patterns (common/bf16_bits.h: the same bits as Eigen::bfloat16's operator*), in two builds: the
// default one (element_mul_cpu.cc) and an AVX2 one (element_mul_bf16_fma_cpu.cc), whose 256-bit
// integer operations make the conversions' loops about twice as fast.
#ifndef OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_BF16_H_
#define OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_BF16_H_

#include <cstdint>

namespace opforge {

// Whether the AVX2 build was compiled (x86-64); the caller also asks CpuHasAvx2Fma().
bool HaveElementMulBf16Avx2();
void ElementMulBf16RunAvx2(const uint16_t* x, const uint16_t* y, uint16_t* out, int64_t n,
                           int64_t sx, int64_t sy);

}  // namespace opforge

#endif  // OPFORGE_OPS_ELEMENT_MUL_ELEMENT_MUL_BF16_H_
