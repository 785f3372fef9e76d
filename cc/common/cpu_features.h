// What the CPU this process runs on supports, for the kernels built twice (default and
// AVX2+FMA; see the *_fma_cpu.cc files) to choose a build at run time.
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

}  // namespace opforge

#endif  // OPFORGE_COMMON_CPU_FEATURES_H_
