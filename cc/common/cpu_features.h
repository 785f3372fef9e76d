// What the CPU this process runs on supports, for the kernels built more than once (default,
// AVX2+FMA in the *_fma_cpu.cc files, AVX-512 in the *_avx512_cpu.cc files) to choose a build
// at run time.
//
// No Eigen include: the *_fma_cpu.cc files include this before they rename Eigen's namespace.
// `static`, not plain `inline`: each file gets its own copy, compiled with that file's flags, so
// the linker cannot keep an AVX2 copy of it for a caller built without AVX2.
#ifndef OPFORGE_COMMON_CPU_FEATURES_H_
#define OPFORGE_COMMON_CPU_FEATURES_H_

#include <cstdlib>
#include <cstring>

namespace opforge {

// The widest build allowed by the environment: OPFORGE_MAX_ISA=avx2 (or avx) caps the choice
// below the CPU's, as oneDNN's ONEDNN_MAX_CPU_ISA caps TensorFlow's kernels; with both, an
// AVX-512 machine measures and tests what an AVX2 machine runs. 2 = AVX-512 (no cap), 1 = AVX2,
// 0 = AVX. Other values are ignored.
static inline int MaxIsaAllowed() {
  static const int cap = [] {
    const char* v = std::getenv("OPFORGE_MAX_ISA");
    if (v == nullptr) return 2;
    if (std::strcmp(v, "avx") == 0 || std::strcmp(v, "AVX") == 0) return 0;
    if (std::strcmp(v, "avx2") == 0 || std::strcmp(v, "AVX2") == 0) return 1;
    return 2;
  }();
  return cap;
}

// True where the CPU has both AVX2 and FMA (x86-64 only; false elsewhere) and OPFORGE_MAX_ISA
// allows them. Asked once.
static inline bool CpuHasAvx2Fma() {
#if defined(__x86_64__)
  static const bool has =
      MaxIsaAllowed() >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

// True where the CPU has AVX-512 F, DQ, VL and BW (what Eigen's AVX-512 code uses) and FMA,
// and the OS saves the 512-bit registers (x86-64 only), and OPFORGE_MAX_ISA allows them. Asked
// once. The *_avx512_cpu.cc builds are chosen with it.
static inline bool CpuHasAvx512() {
#if defined(__x86_64__)
  static const bool has = MaxIsaAllowed() >= 2 && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_CPU_FEATURES_H_
