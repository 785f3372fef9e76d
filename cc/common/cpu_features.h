// What the CPU this process runs on supports, for the kernels built more than once (default,
// AVX2+FMA in the *_fma_cpu.cc files, AVX-512 in the *_avx512_cpu.cc files) to choose a build
// at run time.
//
// No Eigen include: the *_fma_cpu.cc files include this before they rename Eigen's namespace.
// `static`, not plain `inline`: each file gets its own copy, compiled with that file's flags, so
// the linker cannot keep an AVX2 copy of it for a caller built without AVX2.
#ifndef OPFORGE_COMMON_CPU_FEATURES_H_
#define OPFORGE_COMMON_CPU_FEATURES_H_

namespace opforge {

// True where the CPU has both AVX2 and FMA (x86-64 only; false elsewhere). Asked once.
static inline bool CpuHasAvx2Fma() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

// True where the CPU has AVX-512 F, DQ, VL and BW (what Eigen's AVX-512 code uses) and FMA,
// and the OS saves the 512-bit registers (x86-64 only). Asked once. The *_avx512_cpu.cc
// builds are chosen with it.
static inline bool CpuHasAvx512() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace opforge

#endif  // OPFORGE_COMMON_CPU_FEATURES_H_
