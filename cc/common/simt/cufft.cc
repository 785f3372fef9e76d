// cuFFT's plan and exec calls that GriffinLim's CUDA kernels make, for the SIMT runtime: 1-D
// batched real transforms (R2C, C2R, D2Z, Z2D) in cuFFT's basic layout, over DUCC's real FFT
// (common/real_fft.h, the one the CPU kernels use). Like cuFFT, the inverse is unnormalised,
// and a C2R transform ignores the imaginary parts of the first bin and, for an even length, of
// the last.
//
// The rounding is DUCC's, not cuFFT's: a SIMT run checks what the kernels do around the
// transforms, not cuFFT's own accuracy (docs/guides/gpu.md).
#include <cufft.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "common/real_fft.h"

namespace {

struct Plan {
  bool made = false;
  cufftType type = CUFFT_R2C;
  int64_t n = 0;
  int64_t batch = 0;
  std::unique_ptr<opforge::RealFft<float>> f32;
  std::unique_ptr<opforge::RealFft<double>> f64;
};

struct Plans {
  std::mutex mu;
  std::map<cufftHandle, std::shared_ptr<Plan>> plans;
  cufftHandle next = 1;
};
Plans& GetPlans() {
  static Plans* p = new Plans();
  return *p;
}

std::shared_ptr<Plan> Find(cufftHandle h) {
  Plans& p = GetPlans();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.plans.find(h);
  return it == p.plans.end() ? nullptr : it->second;
}

template <typename T>
opforge::RealFft<T>& Fft(Plan& plan) {
  if constexpr (std::is_same_v<T, float>) {
    return *plan.f32;
  } else {
    return *plan.f64;
  }
}

// The plan `h` if it is made for `want` and both buffers are given.
cufftResult Check(cufftHandle h, cufftType want, const void* in, const void* out,
                  std::shared_ptr<Plan>* plan) {
  *plan = Find(h);
  if (*plan == nullptr || !(*plan)->made) return CUFFT_INVALID_PLAN;
  if ((*plan)->type != want) return CUFFT_INVALID_TYPE;
  if (in == nullptr || out == nullptr) return CUFFT_INVALID_VALUE;
  return CUFFT_SUCCESS;
}

// n reals per batch -> n / 2 + 1 complex values per batch.
template <typename T, typename C>
cufftResult Forward(cufftHandle h, cufftType want, const T* in, C* out) {
  std::shared_ptr<Plan> plan;
  if (const cufftResult r = Check(h, want, in, out, &plan); r != CUFFT_SUCCESS) return r;
  const int64_t n = plan->n, bins = n / 2 + 1;
  std::vector<T> data(static_cast<size_t>(n)), buf(Fft<T>(*plan).bufsize());
  for (int64_t b = 0; b < plan->batch; ++b) {
    const T* x = in + b * n;
    for (int64_t j = 0; j < n; ++j) data[static_cast<size_t>(j)] = x[j];
    const T* r = Fft<T>(*plan).Exec(data.data(), buf.data(), T(1), true);
    C* y = out + b * bins;
    // Half-complex order: r0, r1, i1, r2, i2, ..., and r(n/2) last for an even n.
    y[0].x = r[0];
    y[0].y = 0;
    for (int64_t k = 1; k < bins; ++k) {
      y[k].x = r[2 * k - 1];
      y[k].y = 2 * k < n ? r[2 * k] : T(0);
    }
  }
  return CUFFT_SUCCESS;
}

template <typename T, typename C>
cufftResult Inverse(cufftHandle h, cufftType want, const C* in, T* out) {
  std::shared_ptr<Plan> plan;
  if (const cufftResult r = Check(h, want, in, out, &plan); r != CUFFT_SUCCESS) return r;
  const int64_t n = plan->n, bins = n / 2 + 1;
  std::vector<T> data(static_cast<size_t>(n)), buf(Fft<T>(*plan).bufsize());
  for (int64_t b = 0; b < plan->batch; ++b) {
    const C* y = in + b * bins;
    data[0] = y[0].x;
    for (int64_t k = 1; k < bins; ++k) {
      data[static_cast<size_t>(2 * k - 1)] = y[k].x;
      if (2 * k < n) data[static_cast<size_t>(2 * k)] = y[k].y;
    }
    const T* r = Fft<T>(*plan).Exec(data.data(), buf.data(), T(1), false);
    T* x = out + b * n;
    for (int64_t j = 0; j < n; ++j) x[j] = r[j];
  }
  return CUFFT_SUCCESS;
}

}  // namespace

extern "C" {

cufftResult cufftCreate(cufftHandle* handle) {
  if (handle == nullptr) return CUFFT_INVALID_VALUE;
  Plans& p = GetPlans();
  std::lock_guard<std::mutex> lock(p.mu);
  *handle = p.next++;
  p.plans[*handle] = std::make_shared<Plan>();
  return CUFFT_SUCCESS;
}

cufftResult cufftDestroy(cufftHandle handle) {
  Plans& p = GetPlans();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.plans.erase(handle) == 1 ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

cufftResult cufftSetAutoAllocation(cufftHandle handle, int) {
  return Find(handle) != nullptr ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
cufftResult cufftSetWorkArea(cufftHandle handle, void*) {
  return Find(handle) != nullptr ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}
cufftResult cufftSetStream(cufftHandle handle, cudaStream_t) {
  return Find(handle) != nullptr ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

// Rank 1, basic layout (null embeds) only: what GriffinLim asks for.
cufftResult cufftMakePlanMany64(cufftHandle handle, int rank, long long* n, long long* inembed,
                                long long, long long, long long* onembed, long long, long long,
                                cufftType type, long long batch, size_t* work_size) {
  std::shared_ptr<Plan> plan = Find(handle);
  if (plan == nullptr) return CUFFT_INVALID_PLAN;
  if (rank != 1 || n == nullptr || inembed != nullptr || onembed != nullptr) {
    return CUFFT_NOT_SUPPORTED;
  }
  if (n[0] < 1 || batch < 1) return CUFFT_INVALID_SIZE;
  if (type != CUFFT_R2C && type != CUFFT_C2R && type != CUFFT_D2Z && type != CUFFT_Z2D) {
    return CUFFT_NOT_SUPPORTED;
  }
  plan->type = type;
  plan->n = n[0];
  plan->batch = batch;
  if (type == CUFFT_R2C || type == CUFFT_C2R) {
    plan->f32 = std::make_unique<opforge::RealFft<float>>(static_cast<size_t>(n[0]));
  } else {
    plan->f64 = std::make_unique<opforge::RealFft<double>>(static_cast<size_t>(n[0]));
  }
  plan->made = true;
  if (work_size != nullptr) *work_size = 0;
  return CUFFT_SUCCESS;
}

cufftResult cufftExecR2C(cufftHandle plan, cufftReal* in, cufftComplex* out) {
  return Forward<float>(plan, CUFFT_R2C, in, out);
}
cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal* in, cufftDoubleComplex* out) {
  return Forward<double>(plan, CUFFT_D2Z, in, out);
}
cufftResult cufftExecC2R(cufftHandle plan, cufftComplex* in, cufftReal* out) {
  return Inverse<float>(plan, CUFFT_C2R, in, out);
}
cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex* in, cufftDoubleReal* out) {
  return Inverse<double>(plan, CUFFT_Z2D, in, out);
}

}  // extern "C"
