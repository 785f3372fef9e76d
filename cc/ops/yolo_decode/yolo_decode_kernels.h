// The YoloDecode CPU kernels of a second build (AVX2+FMA, yolo_decode_fma_cpu.cc), chosen at run
// time by the CPU's features: function pointers, so that the default build never calls code
// compiled for an ISA the CPU may lack.
#ifndef OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_KERNELS_H_
#define OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_KERNELS_H_

#include <cstdint>

#include "common/parallel.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {

template <typename T>
struct YoloDecodeKernels {
  void (*forward)(const YoloDecodeParams&, const T*, const T*, T*, T*, int32_t*, T*,
                  const Parallel&);
  void (*backward)(const YoloDecodeParams&, const T*, const T*, const T*, const T*, const T*, T*,
                   const Parallel&);
  void (*selected)(const YoloDecodeParams&, const T*, const T*, int64_t, const int64_t*, int64_t,
                   T*, T*);
};

// The AVX2+FMA kernels (float, double) if this CPU has AVX2 and FMA and the library was built
// with them (x86-64), else null. Decided once per process.
template <typename T>
const YoloDecodeKernels<T>* FmaYoloDecodeKernels();

}  // namespace opforge

#endif  // OPFORGE_OPS_YOLO_DECODE_YOLO_DECODE_KERNELS_H_
