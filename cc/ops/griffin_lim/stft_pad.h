// Where a centred STFT frame reads its samples: numpy.pad's modes as an index map, shared by the
// CPU core (griffin_lim_cpu.cc) and the CUDA kernels (griffin_lim.cu), so that both frame the
// signal identically.
#ifndef OPFORGE_OPS_GRIFFIN_LIM_STFT_PAD_H_
#define OPFORGE_OPS_GRIFFIN_LIM_STFT_PAD_H_

#include <cstdint>

#include "common/host_device.h"
#include "ops/griffin_lim/griffin_lim.h"

namespace opforge {

// The sample of a signal of `length` samples at position p (which may lie outside it, by any
// distance) under numpy.pad's mode; -1 for a zero. Reflect and symmetric repeat with periods
// 2 (length - 1) and 2 length, as numpy.pad does for pads wider than the signal.
OPFORGE_HOST_DEVICE inline int64_t PadSource(int64_t p, int64_t length, StftPadMode mode) {
  if (p >= 0 && p < length) return p;
  if (length == 0) return -1;
  switch (mode) {
    case StftPadMode::kConstant:
      return -1;
    case StftPadMode::kEdge:
      return p < 0 ? 0 : length - 1;
    case StftPadMode::kReflect: {
      if (length == 1) return 0;
      const int64_t period = 2 * (length - 1);
      int64_t q = p % period;
      if (q < 0) q += period;
      return q < length ? q : period - q;
    }
    case StftPadMode::kSymmetric: {
      const int64_t period = 2 * length;
      int64_t q = p % period;
      if (q < 0) q += period;
      return q < length ? q : period - 1 - q;
    }
  }
  return -1;
}

}  // namespace opforge

#endif  // OPFORGE_OPS_GRIFFIN_LIM_STFT_PAD_H_
