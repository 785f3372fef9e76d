// CUDA version of GriffinLim: the CPU core's algorithm (griffin_lim_cpu.cc) with cuFFT's batched
// real transforms in place of Eigen's FFT, every other operation the CPU's, in the same
// precision and order.
//
// Per iteration, five steps on the stream over all batch items and frames at once:
//   overlap-add    one thread per output sample sums, in ascending frame order and in float64,
//                  the frames that cover it (each the inverse FFT times the synthesis window,
//                  rounded to T as the CPU stores it), then divides by the window sum of squares
//                  (the CPU's divisor table, uploaded);
//   framing        one thread per frame sample: the padded signal (numpy.pad's modes) times the
//                  analysis window;
//   forward FFT    one batched R2C (D2Z) plan over all frames;
//   phase update   one thread per bin: momentum, normalisation, magnitude (the CPU's formula);
//   inverse FFT    one batched C2R (Z2D) plan, unscaled (1 / n_fft is in the synthesis window).
// The imaginary parts of the DC and (even n_fft) Nyquist bins are set to zero before each
// inverse FFT: the CPU's real inverse ignores them, and cuFFT's C2R is defined for Hermitian
// input only.
//
// Results differ from the CPU's only by the FFTs' rounding (cuFFT's algorithms are not
// DUCC's): the tests hold the GPU to the bounds the CPU core meets against librosa's pocketfft
// (griffin_lim_cuda_test.cc). The initial phases are the CPU's exactly: init="random" is drawn on
// the host with the CPU's code (common/random_phases.h: numpy's RandomState stream, the same cos
// and sin) and copied to the device; given phases go through the device's sincos (within an ulp of
// glibc's before rounding to T).
//
// cuFFT plans: cached per (device, n_fft, frames, precision) in a small LRU cache (plan creation
// costs milliseconds; a stream's successive calls reuse them). A plan's stream and work area are
// plan state, so a call holds its plans' lock from setting them to its last FFT (host-side
// enqueue only: the GPU may run two calls' FFTs concurrently, each with its own work area). The
// stream is not in the key: calls on other streams reuse the plans (as PyTorch's cuFFT plan
// cache does), which also lets GriffinLimGpuScratchBytes, which has no stream, create the plans
// whose work size it reports. Work areas come from the caller's scratch (auto-allocation off),
// never from cudaMalloc; cuFFT itself still allocates a plan's small constant tables when the
// plan is created.
//
// cuFFT is linked statically (CUDA::cufft_static, hidden in the module like the CUDA runtime)
// where the toolkit has it (OPFORGE_CUFFT_STATIC). A toolkit without libcufft_static.a (CUDA's
// PyPI wheels) gets no link-time dependency either: the library of the toolkit's cuFFT major
// version (libcufft.so.12 for CUDA 13, whose symbols are versioned, so TensorFlow's cuFFT of
// another CUDA cannot stand in) is opened on first use, by name, then from the toolkit that
// compiled the kernels, then from a pip install beside the module (site-packages/nvidia/...); if
// none is found, the call returns an error that says so and the module's other kernels work.
#include <cuda_runtime.h>
#include <cufft.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(OPFORGE_CUFFT_STATIC)
#include <dlfcn.h>
#endif

#include "common/cuda_util.cuh"
#include "common/random_phases.h"
#include "ops/griffin_lim/griffin_lim.h"
#include "ops/griffin_lim/stft_pad.h"

namespace opforge {
namespace {

constexpr const char* kOp = "GriffinLim";
constexpr int kThreads = 256;
// Grid caps; past them the kernels stride (the frame and bin kernels over blockIdx.y, tested).
constexpr int64_t kMaxBlocksX = cuda::kMaxGridBlocks2DX;  // 4096 on a GPU
constexpr int64_t kMaxBlocksY = cuda::kMaxGridBlocksY;    // 65535 on a GPU
constexpr size_t kAlign = 256;
constexpr size_t kPlanCacheSize = 8;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// --- cuFFT, static or opened at run time ---------------------------------------------------------

struct CufftApi {
  decltype(&cufftCreate) create = nullptr;
  decltype(&cufftDestroy) destroy = nullptr;
  decltype(&cufftSetAutoAllocation) set_auto_allocation = nullptr;
  decltype(&cufftMakePlanMany64) make_plan_many64 = nullptr;
  decltype(&cufftSetWorkArea) set_work_area = nullptr;
  decltype(&cufftSetStream) set_stream = nullptr;
  decltype(&cufftExecR2C) exec_r2c = nullptr;
  decltype(&cufftExecC2R) exec_c2r = nullptr;
  decltype(&cufftExecD2Z) exec_d2z = nullptr;
  decltype(&cufftExecZ2D) exec_z2d = nullptr;
  std::string error;  // why cuFFT is not available; empty when it is
};

#if defined(OPFORGE_CUFFT_STATIC)
CufftApi LoadCufft() {
  CufftApi api;
  api.create = &cufftCreate;
  api.destroy = &cufftDestroy;
  api.set_auto_allocation = &cufftSetAutoAllocation;
  api.make_plan_many64 = &cufftMakePlanMany64;
  api.set_work_area = &cufftSetWorkArea;
  api.set_stream = &cufftSetStream;
  api.exec_r2c = &cufftExecR2C;
  api.exec_c2r = &cufftExecC2R;
  api.exec_d2z = &cufftExecD2Z;
  api.exec_z2d = &cufftExecZ2D;
  return api;
}
#else
// The directory of the file this code was loaded from (the module, or a test executable).
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

CufftApi LoadCufft() {
  CufftApi api;
  const std::string name = "libcufft.so." + std::to_string(CUFFT_VER_MAJOR);
  std::vector<std::string> candidates = {name};
#if defined(OPFORGE_CUFFT_DIR)
  candidates.push_back(std::string(OPFORGE_CUFFT_DIR) + "/" + name);
#endif
  const std::string own = OwnDirectory();
  if (!own.empty()) {
    // pip's layouts: site-packages/nvidia/cu13/lib (CUDA 13 wheels), nvidia/cufft/lib (CUDA 12).
    candidates.push_back(own + "/../nvidia/cu" + std::to_string(CUDART_VERSION / 1000) + "/lib/" +
                         name);
    candidates.push_back(own + "/../nvidia/cufft/lib/" + name);
  }
  void* handle = nullptr;
  std::string first_error;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* e = dlerror();
    if (first_error.empty() && e != nullptr) first_error = e;
  }
  if (handle == nullptr) {
    std::ostringstream s;
    s << kOp << ": the GPU kernel needs cuFFT (" << name << ", the cuFFT of CUDA "
      << CUDART_VERSION / 1000 << ", which compiled it) and none was found (" << first_error
      << "; also tried";
    for (size_t i = 1; i < candidates.size(); ++i) s << " " << candidates[i];
    s << "). Install the CUDA toolkit's cuFFT or `pip install nvidia-cufft`, or run GriffinLim "
         "on the CPU";
    api.error = s.str();
    return api;
  }
  // The handle stays open for the process's life: plans may live until exit.
  auto sym = [&](auto* fn, const char* symbol) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(handle, symbol));
    if (*fn == nullptr && api.error.empty()) {
      api.error = std::string(kOp) + ": " + name + " has no " + symbol;
    }
  };
  sym(&api.create, "cufftCreate");
  sym(&api.destroy, "cufftDestroy");
  sym(&api.set_auto_allocation, "cufftSetAutoAllocation");
  sym(&api.make_plan_many64, "cufftMakePlanMany64");
  sym(&api.set_work_area, "cufftSetWorkArea");
  sym(&api.set_stream, "cufftSetStream");
  sym(&api.exec_r2c, "cufftExecR2C");
  sym(&api.exec_c2r, "cufftExecC2R");
  sym(&api.exec_d2z, "cufftExecD2Z");
  sym(&api.exec_z2d, "cufftExecZ2D");
  return api;
}
#endif

const CufftApi& Cufft() {
  static const CufftApi api = LoadCufft();  // thread-safe, once
  return api;
}

const char* CufftResultName(cufftResult r) {
  switch (r) {
    case CUFFT_SUCCESS:
      return "success";
    case CUFFT_INVALID_PLAN:
      return "invalid plan";
    case CUFFT_ALLOC_FAILED:
      return "out of device memory";
    case CUFFT_INVALID_VALUE:
      return "invalid value";
    case CUFFT_INTERNAL_ERROR:
      return "internal error";
    case CUFFT_EXEC_FAILED:
      return "execution failed";
    case CUFFT_SETUP_FAILED:
      return "setup failed";
    case CUFFT_INVALID_SIZE:
      return "invalid size";
    case CUFFT_INVALID_DEVICE:
      return "invalid device";
    case CUFFT_NOT_SUPPORTED:
      return "not supported";
    default:
      return "error";
  }
}

Status CufftFailure(const char* what, cufftResult r) {
  std::ostringstream s;
  s << kOp << ": cuFFT " << what << " failed: " << CufftResultName(r) << " (" << int(r) << ")";
  return Status::Internal(s.str());
}

#define OPFORGE_CUFFT_(what, expr)                                        \
  do {                                                                    \
    const cufftResult opforge_r = (expr);                                 \
    if (opforge_r != CUFFT_SUCCESS) return CufftFailure(what, opforge_r); \
  } while (0)

Status CudaFailure(const char* what, cudaError_t err) {
  return Status::Internal(std::string(kOp) + ": " + what + " failed: " + cudaGetErrorString(err));
}

#define OPFORGE_GL_CUDA_(expr)                                              \
  do {                                                                      \
    const cudaError_t opforge_err = (expr);                                 \
    if (opforge_err != cudaSuccess) return CudaFailure(#expr, opforge_err); \
  } while (0)

// --- the plan cache
// -------------------------------------------------------------------------------

struct PlanKey {
  int device;
  int64_t n_fft, batch;
  bool is_double;
  bool operator==(const PlanKey& o) const {
    return device == o.device && n_fft == o.n_fft && batch == o.batch && is_double == o.is_double;
  }
};

// A forward and an inverse plan for one key, destroyed (on their device) with the last
// reference: an entry evicted while a call uses it lives until that call is done.
struct Plans {
  Plans() = default;
  Plans(const Plans&) = delete;
  Plans& operator=(const Plans&) = delete;
  ~Plans() {
    const CufftApi& api = Cufft();
    if (!has_forward && !has_inverse) return;
    int previous = -1;
    const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device &&
                          cudaSetDevice(device) == cudaSuccess;
    if (has_forward) api.destroy(forward);
    if (has_inverse) api.destroy(inverse);
    if (switched) cudaSetDevice(previous);
    cudaGetLastError();  // no error of ours is left for the next launch check
  }

  int device = 0;
  cufftHandle forward = 0, inverse = 0;
  bool has_forward = false, has_inverse = false;
  size_t work_bytes = 0;  // the larger of the two plans' work areas
  // Held by a call from setting the stream and work area to its last FFT.
  std::mutex use;
};

Status MakePlan(const CufftApi& api, const PlanKey& key, bool forward, cufftHandle* handle,
                bool* made, size_t* work) {
  OPFORGE_CUFFT_("cufftCreate", api.create(handle));
  *made = true;
  OPFORGE_CUFFT_("cufftSetAutoAllocation", api.set_auto_allocation(*handle, 0));
  long long n = key.n_fft;
  const cufftType type =
      key.is_double ? (forward ? CUFFT_D2Z : CUFFT_Z2D) : (forward ? CUFFT_R2C : CUFFT_C2R);
  // Null embeds: the basic layout, n_fft reals and n_fft / 2 + 1 complex values per frame.
  OPFORGE_CUFFT_("plan creation", api.make_plan_many64(*handle, 1, &n, nullptr, 1, 0, nullptr, 1, 0,
                                                       type, key.batch, work));
  return Status::Ok();
}

class PlanCache {
 public:
  // The plans for `key` (created on `key.device`, which must be current), most recently used
  // first; the least recently used beyond kPlanCacheSize are dropped.
  Status Get(const PlanKey& key, std::shared_ptr<Plans>* out) {
    const CufftApi& api = Cufft();
    if (!api.error.empty()) return Status::Internal(api.error);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first == key) {
        lru_.splice(lru_.begin(), lru_, it);
        *out = lru_.front().second;
        return Status::Ok();
      }
    }
    auto plans = std::make_shared<Plans>();
    plans->device = key.device;
    size_t forward_work = 0, inverse_work = 0;
    Status s = MakePlan(api, key, true, &plans->forward, &plans->has_forward, &forward_work);
    if (s.ok()) {
      s = MakePlan(api, key, false, &plans->inverse, &plans->has_inverse, &inverse_work);
    }
    if (!s.ok()) {
      cudaGetLastError();  // a failed allocation inside cuFFT is not a launch error
      return s;            // `plans` destroys what was made
    }
    plans->work_bytes = std::max(forward_work, inverse_work);
    lru_.emplace_front(key, plans);
    if (lru_.size() > kPlanCacheSize) lru_.pop_back();
    *out = std::move(plans);
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::list<std::pair<PlanKey, std::shared_ptr<Plans>>> lru_;
};

// Never destroyed: destroying plans from a static destructor at exit could run after the CUDA
// driver has shut down.
PlanCache& Cache() {
  static PlanCache* cache = new PlanCache();  // NOLINT: deliberately leaked
  return *cache;
}

// Makes `device` current for the scope (our CUDA runtime's per-thread state: TensorFlow's own
// runtime never sets it), restoring the previous device after.
class DeviceScope {
 public:
  DeviceScope() = default;
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  Status Enter(int device) {
    int current = 0;
    OPFORGE_GL_CUDA_(cudaGetDevice(&current));
    if (current != device) {
      OPFORGE_GL_CUDA_(cudaSetDevice(device));
      previous_ = current;
    }
    return Status::Ok();
  }

 private:
  int previous_ = -1;
};

// --- geometry, as the CPU core computes it
// --------------------------------------------------------

// Frames librosa.istft overlap-adds (IstftFrames in the CPU core).
int64_t IstftFrames(const GriffinLimParams& p) {
  if (p.length <= 0) return p.n_frames;
  const int64_t padded = p.center ? p.length + 2 * (p.n_fft / 2) : p.length;
  return std::min(p.n_frames, (padded + p.hop_length - 1) / p.hop_length);
}

struct Geometry {
  int64_t batch, n_frames, n_freq, n_fft, hop, length;
  int64_t offset;         // n_fft / 2 when centred: the signal's start in the OLA buffer
  int64_t ola_frames;     // frames the overlap-add uses
  int64_t buffer_length;  // n_fft + hop (ola_frames - 1)
  StftPadMode pad_mode;
};

Geometry GeometryOf(const GriffinLimParams& p) {
  Geometry g;
  g.batch = p.batch;
  g.n_frames = p.n_frames;
  g.n_freq = p.n_freq;
  g.n_fft = p.n_fft;
  g.hop = p.hop_length;
  g.length = p.out_length;
  g.offset = p.center ? p.n_fft / 2 : 0;
  g.ola_frames = IstftFrames(p);
  g.buffer_length = p.n_fft + p.hop_length * (g.ola_frames - 1);
  g.pad_mode = p.pad_mode;
  return g;
}

// The scratch, in bytes from its start; T-sized buffers for element size `elem`.
struct Layout {
  size_t first_bad;  // two unsigned long long: magnitude's and phases' first non-finite index
  size_t mag;        // T [frames][n_freq]: the magnitude, frame-major
  size_t spec;       // complex T [frames][n_freq]: FFT input / output
  size_t tprev;      // complex T [frames][n_freq]: the previous rebuilt spectrum
  size_t frames;     // T [frames][n_fft]: inverse FFT output / forward FFT input
  size_t signal;     // T [batch][length]: each iteration's ISTFT
  size_t analysis, synthesis, divisor;  // T [n_fft], [n_fft], [length], copied from the host
  size_t tables_end;
  size_t work;  // cuFFT's work area
};

Layout LayoutOf(const GriffinLimParams& p, size_t elem) {
  const size_t frames = static_cast<size_t>(p.batch * p.n_frames);
  const size_t bins = frames * static_cast<size_t>(p.n_freq);
  const size_t n_fft = static_cast<size_t>(p.n_fft), length = static_cast<size_t>(p.out_length);
  Layout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += AlignUp(bytes);
    return here;
  };
  l.first_bad = take(2 * sizeof(unsigned long long));
  l.mag = take(elem * bins);
  l.spec = take(2 * elem * bins);
  l.tprev = take(2 * elem * bins);
  l.frames = take(elem * frames * n_fft);
  l.signal = take(p.n_iter > 0 ? elem * static_cast<size_t>(p.batch) * length : 0);
  // The three host tables back to back (one copy): no alignment padding between them beyond
  // the element size, which keeps each aligned to T.
  l.analysis = at;
  l.synthesis = l.analysis + elem * n_fft;
  l.divisor = l.synthesis + elem * n_fft;
  at = AlignUp(l.divisor + elem * length);
  l.tables_end = at;
  l.work = at;
  return l;
}

// --- kernels ----------------------------------------------------------------------------------

template <typename T>
using Complex = std::conditional_t<std::is_same_v<T, float>, float2, double2>;

// Bins whose imaginary part the real inverse FFT ignores: DC, and Nyquist for an even n_fft.
__device__ inline bool RealBin(int64_t f, int64_t n_fft) {
  return f == 0 || (n_fft % 2 == 0 && f == n_fft / 2);
}

template <typename T>
__global__ void FirstNonFiniteKernel(int64_t n, const T* x, unsigned long long* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(static_cast<double>(x[i]))) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

// Frame-major magnitude, and the first spectrum S * angles (the angles: kRandom, already in
// `spec` from the host; kOnes, 1; kPhases, exp(i phases)). x: bin, y: frame u = b * T + t.
template <typename T>
__global__ void InitKernel(Geometry g, GriffinLimInit init, const T* magnitude, const T* phases,
                           T* mag, Complex<T>* spec) {
  const int64_t frames = g.batch * g.n_frames;
  for (int64_t u = blockIdx.y; u < frames; u += gridDim.y) {
    const int64_t b = u / g.n_frames, t = u - b * g.n_frames;
    for (int64_t f = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; f < g.n_freq;
         f += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t src = (b * g.n_freq + f) * g.n_frames + t;
      const int64_t at = u * g.n_freq + f;
      const T s = magnitude[src];
      mag[at] = s;
      T re, im;
      if (init == GriffinLimInit::kRandom) {
        re = spec[at].x;
        im = spec[at].y;
      } else if (init == GriffinLimInit::kOnes) {
        re = T(1);
        im = T(0);
      } else {
        double sine, cosine;
        sincos(static_cast<double>(phases[src]), &sine, &cosine);
        re = static_cast<T>(cosine);
        im = static_cast<T>(sine);
      }
      Complex<T> v;
      v.x = re * s;
      v.y = RealBin(f, g.n_fft) ? T(0) : im * s;
      spec[at] = v;
    }
  }
}

// The overlap-add of the frames (inverse FFTs, times the synthesis window and rounded to T as
// the CPU stores them) into out[b, j], divided by the window sum of squares where the CPU
// divides. x: sample j, y: batch item.
template <typename T>
__global__ void OverlapAddKernel(Geometry g, const T* frames, const T* synthesis, const T* divisor,
                                 T* out) {
  for (int64_t b = blockIdx.y; b < g.batch; b += gridDim.y) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; j < g.length;
         j += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t q = j + g.offset;
      double acc = 0.0;
      if (q < g.buffer_length) {
        const int64_t t_first = q >= g.n_fft ? (q - g.n_fft) / g.hop + 1 : 0;
        const int64_t t_last = std::min(g.ola_frames - 1, q / g.hop);
        for (int64_t t = t_first; t <= t_last; ++t) {
          const int64_t k = q - t * g.hop;
          const T x = frames[(b * g.n_frames + t) * g.n_fft + k] * synthesis[k];
          acc += static_cast<double>(x);
        }
      }
      const T v = static_cast<T>(acc);
      const T d = divisor[j];
      out[b * g.length + j] = d != T(0) ? v / d : v;
    }
  }
}

// frames[u][k] = padded signal at t hop - offset + k, times the analysis window. x: k, y: u.
template <typename T>
__global__ void FrameKernel(Geometry g, const T* signal, const T* analysis, T* frames) {
  const int64_t n = g.batch * g.n_frames;
  for (int64_t u = blockIdx.y; u < n; u += gridDim.y) {
    const int64_t b = u / g.n_frames, t = u - b * g.n_frames;
    const T* y = signal + b * g.length;
    const int64_t start = t * g.hop - g.offset;
    for (int64_t k = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; k < g.n_fft;
         k += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t src = PadSource(start + k, g.length, g.pad_mode);
      frames[u * g.n_fft + k] = src < 0 ? T(0) : y[src] * analysis[k];
    }
  }
}

// The CPU's phase update, bin by bin: angles = rebuilt - momentum tprev (not on the first
// iteration), normalised with tiny(T), times S; tprev = rebuilt. In place on `spec`.
template <typename T>
__global__ void UpdateKernel(Geometry g, bool first, T momentum, T eps, const T* mag,
                             Complex<T>* spec, Complex<T>* tprev) {
  const int64_t n = g.batch * g.n_frames;
  for (int64_t u = blockIdx.y; u < n; u += gridDim.y) {
    for (int64_t f = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; f < g.n_freq;
         f += static_cast<int64_t>(gridDim.x) * kThreads) {
      const int64_t at = u * g.n_freq + f;
      const Complex<T> r = spec[at];
      T re = r.x, im = r.y;
      if (!first) {
        const Complex<T> prev = tprev[at];
        re -= momentum * prev.x;
        im -= momentum * prev.y;
      }
      const double dre = re, dim = im;
      const T norm = static_cast<T>(sqrt(dre * dre + dim * dim)) + eps;
      const T scale = T(1) / norm;
      const T s = mag[at];
      Complex<T> out;
      out.x = re * scale * s;
      out.y = RealBin(f, g.n_fft) ? T(0) : im * scale * s;
      spec[at] = out;
      tprev[at] = r;
    }
  }
}

dim3 Grid2D(int64_t inner, int64_t outer) {
  const int64_t x =
      std::min<int64_t>(std::max<int64_t>((inner + kThreads - 1) / kThreads, 1), kMaxBlocksX);
  const int64_t y = std::min<int64_t>(std::max<int64_t>(outer, 1), kMaxBlocksY);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), 1);
}

template <typename T>
cufftResult ExecForward(const CufftApi& api, cufftHandle plan, T* in, Complex<T>* out) {
  if constexpr (std::is_same_v<T, float>) {
    return api.exec_r2c(plan, in, out);
  } else {
    return api.exec_d2z(plan, in, out);
  }
}

template <typename T>
cufftResult ExecInverse(const CufftApi& api, cufftHandle plan, Complex<T>* in, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    return api.exec_c2r(plan, in, out);
  } else {
    return api.exec_z2d(plan, in, out);
  }
}

// The host tables (analysis and synthesis windows, the overlap-add's divisors), laid out as in
// the scratch from l.analysis, computed as the CPU core computes them.
template <typename T>
std::vector<T> HostTables(const GriffinLimParams& p, const Geometry& g) {
  const int64_t n_fft = p.n_fft, length = p.out_length;
  std::vector<T> tables(static_cast<size_t>(2 * n_fft + length));
  T* analysis = tables.data();
  T* synthesis = analysis + n_fft;
  T* divisor = synthesis + n_fft;
  const std::vector<double> window = StftWindowValues(p.window, p.win_length, n_fft);
  for (int64_t j = 0; j < n_fft; ++j) {
    analysis[j] = static_cast<T>(window[j]);
    synthesis[j] = static_cast<T>(window[j] / static_cast<double>(n_fft));
  }
  std::vector<double> wss(static_cast<size_t>(g.buffer_length), 0.0);
  for (int64_t t = 0; t < g.ola_frames; ++t) {
    for (int64_t j = 0; j < n_fft && t * g.hop + j < g.buffer_length; ++j) {
      wss[t * g.hop + j] += window[j] * window[j];
    }
  }
  const double tiny = static_cast<double>(std::numeric_limits<T>::min());
  for (int64_t j = 0; j < length; ++j) {
    const int64_t q = j + g.offset;
    const double v = q < g.buffer_length ? static_cast<double>(static_cast<T>(wss[q])) : 0.0;
    divisor[j] = v > tiny ? static_cast<T>(v) : T(0);
  }
  return tables;
}

// The CPU core's kRandom angles, frame-major ([b * T + t][f]): the same MT19937 draws
// (common/random_phases.h, S's row-major order) and the same cos and sin of them.
template <typename T>
std::vector<std::complex<T>> RandomAngles(const GriffinLimParams& p) {
  const int64_t batch = p.batch, n_freq = p.n_freq, n_frames = p.n_frames;
  std::vector<std::complex<T>> angles(static_cast<size_t>(batch * n_frames * n_freq));
  std::vector<double> uniform(angles.size()), draws(static_cast<size_t>(n_freq));
  std::vector<T> cosines(draws.size()), sines(draws.size());
  MtUniformDoubles(static_cast<uint32_t>(p.seed), static_cast<int64_t>(uniform.size()),
                   uniform.data());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < n_frames; ++t) {
      const double* u = uniform.data() + b * n_freq * n_frames + t;  // S[b, 0, t]
      for (int64_t f = 0; f < n_freq; ++f) draws[f] = u[f * n_frames];
      CosSin2Pi(draws.data(), n_freq, cosines.data(), sines.data());
      std::complex<T>* a = angles.data() + (b * n_frames + t) * n_freq;
      for (int64_t f = 0; f < n_freq; ++f) a[f] = std::complex<T>(cosines[f], sines[f]);
    }
  }
  return angles;
}

// The device the work runs on: the stream's.
Status StreamDevice(cudaStream_t stream, int* device) {
  OPFORGE_GL_CUDA_(cudaStreamGetDevice(stream, device));
  return Status::Ok();
}

template <typename T>
Status Forward(const GriffinLimParams& p, const T* magnitude, const T* phases, T* audio,
               unsigned char* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  const Geometry g = GeometryOf(p);
  const int64_t frames = p.batch * p.n_frames;
  if (frames == 0) return Status::Ok();
  int device = 0;
  OPFORGE_RETURN_IF_ERROR(StreamDevice(stream, &device));
  DeviceScope scope;
  OPFORGE_RETURN_IF_ERROR(scope.Enter(device));
  std::shared_ptr<Plans> plans;
  OPFORGE_RETURN_IF_ERROR(
      Cache().Get({device, p.n_fft, frames, std::is_same_v<T, double>}, &plans));
  const Layout l = LayoutOf(p, sizeof(T));
  const size_t needed = l.work + plans->work_bytes;
  if (scratch == nullptr || scratch_bytes < 0 || static_cast<size_t>(scratch_bytes) < needed) {
    std::ostringstream s;
    s << kOp << ": the scratch has " << scratch_bytes << " bytes, the kernels need " << needed
      << " (GriffinLimGpuScratchBytes)";
    return Status::Internal(s.str());
  }
  auto* first_bad = reinterpret_cast<unsigned long long*>(scratch + l.first_bad);
  T* mag = reinterpret_cast<T*>(scratch + l.mag);
  auto* spec = reinterpret_cast<Complex<T>*>(scratch + l.spec);
  auto* tprev = reinterpret_cast<Complex<T>*>(scratch + l.tprev);
  T* frame_buf = reinterpret_cast<T*>(scratch + l.frames);
  T* signal = reinterpret_cast<T*>(scratch + l.signal);
  const T* analysis = reinterpret_cast<const T*>(scratch + l.analysis);
  const T* synthesis = reinterpret_cast<const T*>(scratch + l.synthesis);
  const T* divisor = reinterpret_cast<const T*>(scratch + l.divisor);
  void* work = scratch + l.work;

  // 1. Non-finite inputs, as the CPU reports them: the magnitude's first, then the phases'.
  const int64_t bins = frames * p.n_freq;
  const bool given = p.init == GriffinLimInit::kPhases;
  if (given && phases == nullptr) {
    return InvalidArgument(kOp, "phases", "given when init is \"phases\"", "none");
  }
  OPFORGE_GL_CUDA_(cudaMemsetAsync(first_bad, 0xff, 2 * sizeof(unsigned long long), stream));
  OPFORGE_LAUNCH(cuda::Blocks(bins), cuda::kThreads, 0, stream, FirstNonFiniteKernel<T>)
  (bins, magnitude, first_bad);
  if (given) {
    OPFORGE_LAUNCH(cuda::Blocks(bins), cuda::kThreads, 0, stream, FirstNonFiniteKernel<T>)
    (bins, phases, first_bad + 1);
  }
  OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
  unsigned long long bad[2] = {0, 0};
  OPFORGE_GL_CUDA_(cudaMemcpyAsync(bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  OPFORGE_GL_CUDA_(cudaStreamSynchronize(stream));
  for (int which = 0; which < 2; ++which) {
    if (bad[which] == ~0ull) continue;
    const T* x = which == 0 ? magnitude : phases;
    T value;
    OPFORGE_GL_CUDA_(
        cudaMemcpyAsync(&value, x + bad[which], sizeof(T), cudaMemcpyDeviceToHost, stream));
    OPFORGE_GL_CUDA_(cudaStreamSynchronize(stream));
    std::ostringstream s;
    s << value << " at flat index " << bad[which];
    return InvalidArgument(kOp, which == 0 ? "magnitude" : "phases", "finite everywhere", s.str());
  }

  // 2. The windows and divisors; the random angles (from pageable memory: each copy returns
  // once its source is staged, so the vectors may go out of scope).
  const std::vector<T> tables = HostTables<T>(p, g);
  OPFORGE_GL_CUDA_(cudaMemcpyAsync(scratch + l.analysis, tables.data(), tables.size() * sizeof(T),
                                   cudaMemcpyHostToDevice, stream));
  if (p.init == GriffinLimInit::kRandom) {
    const std::vector<std::complex<T>> angles = RandomAngles<T>(p);
    OPFORGE_GL_CUDA_(cudaMemcpyAsync(spec, angles.data(), angles.size() * sizeof(angles[0]),
                                     cudaMemcpyHostToDevice, stream));
  }
  OPFORGE_LAUNCH(Grid2D(p.n_freq, frames), kThreads, 0, stream, InitKernel<T>)
  (g, p.init, magnitude, phases, mag, spec);
  OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));

  // 3. The iterations. The plans' stream and work area are set under their lock, which is held
  // until the last FFT is enqueued.
  const CufftApi& api = Cufft();
  std::lock_guard<std::mutex> lease(plans->use);
  OPFORGE_CUFFT_("cufftSetStream", api.set_stream(plans->forward, stream));
  OPFORGE_CUFFT_("cufftSetStream", api.set_stream(plans->inverse, stream));
  OPFORGE_CUFFT_("cufftSetWorkArea", api.set_work_area(plans->forward, work));
  OPFORGE_CUFFT_("cufftSetWorkArea", api.set_work_area(plans->inverse, work));
  const dim3 ola_grid = Grid2D(g.length, g.batch);
  const dim3 frame_grid = Grid2D(g.n_fft, frames);
  const dim3 bin_grid = Grid2D(g.n_freq, frames);
  const T momentum = static_cast<T>(p.momentum / (1.0 + p.momentum));
  const T eps = std::numeric_limits<T>::min();
  OPFORGE_CUFFT_("inverse FFT", ExecInverse<T>(api, plans->inverse, spec, frame_buf));
  for (int64_t iter = 0; iter < p.n_iter; ++iter) {
    if (g.length > 0) {
      OPFORGE_LAUNCH(ola_grid, kThreads, 0, stream, OverlapAddKernel<T>)
      (g, frame_buf, synthesis, divisor, signal);
    }
    OPFORGE_LAUNCH(frame_grid, kThreads, 0, stream, FrameKernel<T>)(g, signal, analysis, frame_buf);
    OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
    OPFORGE_CUFFT_("forward FFT", ExecForward<T>(api, plans->forward, frame_buf, spec));
    OPFORGE_LAUNCH(bin_grid, kThreads, 0, stream, UpdateKernel<T>)
    (g, iter == 0, momentum, eps, mag, spec, tprev);
    OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
    OPFORGE_CUFFT_("inverse FFT", ExecInverse<T>(api, plans->inverse, spec, frame_buf));
  }
  if (g.length > 0) {
    OPFORGE_LAUNCH(ola_grid, kThreads, 0, stream, OverlapAddKernel<T>)
    (g, frame_buf, synthesis, divisor, audio);
  }
  return cuda::LaunchStatus(kOp);
}

}  // namespace

int64_t GriffinLimGpuScratchBytes(const GriffinLimParams& params) {
  const Layout l = LayoutOf(params, sizeof(double));  // the larger element type
  const int64_t frames = params.batch * params.n_frames;
  if (frames == 0) return static_cast<int64_t>(l.work);
  // The work areas of the plans of both precisions (the binding does not say which): creating
  // them now also warms the cache for the call that follows. If cuFFT or the plans are not
  // available, the call reports it; the size here is then only the buffers.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return static_cast<int64_t>(l.work);
  }
  size_t work = 0;
  for (bool is_double : {false, true}) {
    std::shared_ptr<Plans> plans;
    if (Cache().Get({device, params.n_fft, frames, is_double}, &plans).ok()) {
      work = std::max(work, plans->work_bytes);
    }
  }
  return static_cast<int64_t>(l.work + work);
}

Status GriffinLimForwardGpu(DType dtype, const GriffinLimParams& params, const void* magnitude,
                            const void* phases_or_null, void* audio, void* scratch,
                            int64_t scratch_bytes, void* stream) {
  return cuda::DispatchFloatDouble(dtype, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Forward<T>(params, static_cast<const T*>(magnitude),
                      static_cast<const T*>(phases_or_null), static_cast<T*>(audio),
                      static_cast<unsigned char*>(scratch), scratch_bytes,
                      static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge
