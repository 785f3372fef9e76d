#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "ops/mfcc_to_mel/mfcc_to_mel.h"

namespace opforge {
namespace {

constexpr const char* kOp = "MfccToMel";
constexpr const char* kGradOp = "MfccToMelGrad";
// Frames per task: a block of every row of one batch item, short enough to stay in L1/L2.
constexpr int64_t kFrameBlock = 64;
// Forward calls with at most this many output values run on one thread (MfccToMelForward).
constexpr int64_t kSerialValues = int64_t{1} << 16;

bool ProductFits(const std::vector<int64_t>& dims, int64_t* product) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  *product = n;
  return true;
}

// Splits [..., rows, T] into the product of the leading axes, rows and T.
Status SplitShape(const char* op, const char* argument, const char* row_name,
                  const std::vector<int64_t>& dims, int64_t* batch, int64_t* rows,
                  int64_t* frames) {
  if (dims.size() < 2) {
    return InvalidArgument(op, argument,
                           std::string("a tensor of rank >= 2 [..., ") + row_name + ", time]",
                           "shape " + ShapeString(dims));
  }
  for (int64_t d : dims) {
    if (d < 0) return InvalidArgument(op, argument, "non-negative dimensions", ShapeString(dims));
  }
  int64_t total = 0;
  if (!ProductFits(dims, &total)) {
    return InvalidArgument(op, argument, "fewer than 2^63 elements", "shape " + ShapeString(dims));
  }
  *rows = dims[dims.size() - 2];
  *frames = dims.back();
  *batch = 1;
  for (size_t i = 0; i + 2 < dims.size(); ++i) *batch *= dims[i];
  return Status::Ok();
}

Status ValidateAttrs(const char* op, const MfccToMelParams& p) {
  if (p.n_mels < 1) return InvalidArgument(op, "n_mels", "a positive integer", p.n_mels);
  if (p.dct_type != 2 && p.dct_type != 3) {
    return InvalidArgument(op, "dct_type", "2 or 3", p.dct_type);
  }
  if (p.norm != DctNorm::kNone && p.norm != DctNorm::kOrtho) {
    return InvalidArgument(op, "norm", "\"ortho\" or \"none\"", static_cast<int>(p.norm));
  }
  if (!(std::isfinite(p.ref) && p.ref > 0)) {
    return InvalidArgument(op, "ref", "a finite number > 0", p.ref);
  }
  if (!(std::isfinite(p.lifter) && p.lifter >= 0)) {
    return InvalidArgument(op, "lifter", "a finite number >= 0", p.lifter);
  }
  return Status::Ok();
}

Status CheckCoefficients(const char* op, const char* argument, const std::vector<int64_t>& dims,
                         int64_t n_mfcc, int64_t n_mels, int64_t n_frames) {
  if (n_mfcc < 1) {
    return InvalidArgument(op, argument, "at least one coefficient (axis -2)",
                           "shape " + ShapeString(dims));
  }
  if (n_mfcc > n_mels) {
    std::ostringstream s;
    s << "at most n_mels = " << n_mels << " coefficients (axis -2)";
    return InvalidArgument(op, argument, s.str(), "shape " + ShapeString(dims));
  }
  if (n_frames < 1) {
    return InvalidArgument(op, argument, "a non-empty time axis (axis -1)",
                           "shape " + ShapeString(dims));
  }
  int64_t out = 0;
  if (__builtin_mul_overflow(n_mels, n_frames, &out)) {
    return InvalidArgument(op, "n_mels", "small enough for the output to fit in memory", n_mels);
  }
  return Status::Ok();
}

}  // namespace

Status ParseDctNorm(const std::string& norm, DctNorm* out) {
  if (norm == "ortho") {
    *out = DctNorm::kOrtho;
  } else if (norm == "none" || norm == "None" || norm.empty()) {
    *out = DctNorm::kNone;
  } else {
    return InvalidArgument(kOp, "norm", "\"ortho\" or \"none\"", "\"" + norm + "\"");
  }
  return Status::Ok();
}

Status ValidateMfccToMel(const std::vector<int64_t>& mfcc, MfccToMelParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateAttrs(kOp, *params));
  int64_t batch = 0, rows = 0, frames = 0;
  OPFORGE_RETURN_IF_ERROR(SplitShape(kOp, "mfcc", "n_mfcc", mfcc, &batch, &rows, &frames));
  OPFORGE_RETURN_IF_ERROR(CheckCoefficients(kOp, "mfcc", mfcc, rows, params->n_mels, frames));
  int64_t out = 0;
  if (!ProductFits({batch, params->n_mels, frames}, &out)) {
    return InvalidArgument(kOp, "n_mels", "small enough for the output to fit in memory",
                           params->n_mels);
  }
  params->batch = batch;
  params->n_mfcc = rows;
  params->n_frames = frames;
  return Status::Ok();
}

Status ValidateMfccToMelGrad(const std::vector<int64_t>& grad, const std::vector<int64_t>& mel,
                             const std::vector<int64_t>& mfcc, MfccToMelParams* params) {
  OPFORGE_RETURN_IF_ERROR(ValidateAttrs(kGradOp, *params));
  int64_t batch = 0, rows = 0, frames = 0;
  OPFORGE_RETURN_IF_ERROR(SplitShape(kGradOp, "mfcc", "n_mfcc", mfcc, &batch, &rows, &frames));
  OPFORGE_RETURN_IF_ERROR(CheckCoefficients(kGradOp, "mfcc", mfcc, rows, params->n_mels, frames));
  std::vector<int64_t> expected = mfcc;
  expected[expected.size() - 2] = params->n_mels;
  if (grad != expected) {
    return InvalidArgument(kGradOp, "grad",
                           "of shape " + ShapeString(expected) + " (mfcc's with n_mels rows)",
                           "shape " + ShapeString(grad));
  }
  if (mel != expected) {
    return InvalidArgument(kGradOp, "mel", "of shape " + ShapeString(expected) + " (grad's)",
                           "shape " + ShapeString(mel));
  }
  params->batch = batch;
  params->n_mfcc = rows;
  params->n_frames = frames;
  return Status::Ok();
}

std::vector<double> MfccToMelBasis(const MfccToMelParams& p) {
  const int64_t n_mels = p.n_mels, n_mfcc = p.n_mfcc;
  const double N = static_cast<double>(n_mels);
  const double pi = 3.14159265358979323846;
  std::vector<double> basis(static_cast<size_t>(n_mels * n_mfcc));
  // Inverse lifter: librosa divides the coefficients by (1 + lifter/2 sin(pi (n+1)/lifter)) plus
  // the element type's tiny; the basis folds the division into each column. librosa adds
  // tiny(mfcc) of the input's dtype; float32's is used here for both types: the difference
  // (1e-38 against 1e-308) only shows where the divisor is itself ~1e-38.
  std::vector<double> inv_lifter(static_cast<size_t>(n_mfcc), 1.0);
  if (p.lifter > 0) {
    for (int64_t n = 0; n < n_mfcc; ++n) {
      const double sine =
          1.0 + p.lifter * 0.5 * std::sin(pi * static_cast<double>(n + 1) / p.lifter);
      inv_lifter[static_cast<size_t>(n)] =
          1.0 / (sine + static_cast<double>(std::numeric_limits<float>::min()));
    }
  }
  const bool ortho = p.norm == DctNorm::kOrtho;
  for (int64_t k = 0; k < n_mels; ++k) {
    for (int64_t n = 0; n < n_mfcc; ++n) {
      double v;
      if (p.dct_type == 2) {  // DCT-III, scaled
        const double c =
            std::cos(pi * static_cast<double>(n) * static_cast<double>(2 * k + 1) / (2.0 * N));
        if (ortho) {
          v = n == 0 ? 1.0 / std::sqrt(N) : std::sqrt(2.0 / N) * c;
        } else {
          v = n == 0 ? 1.0 / (2.0 * N) : c / N;
        }
      } else {  // type 3: DCT-II, scaled
        const double c =
            std::cos(pi * static_cast<double>(k) * static_cast<double>(2 * n + 1) / (2.0 * N));
        if (ortho) {
          v = (k == 0 ? 1.0 / std::sqrt(N) : std::sqrt(2.0 / N)) * c;
        } else {
          v = c / N;
        }
      }
      basis[static_cast<size_t>(k * n_mfcc + n)] = v * inv_lifter[static_cast<size_t>(n)];
    }
  }
  return basis;
}

namespace {

// The basis of the last few attribute sets: its n_mels * n_mfcc cosines are a large part of a
// small call (a clip of a few seconds, `opforge bench mfcc_to_mel`). Small, shared by all kernels
// of the process, never evicted from under a caller (shared_ptr).
std::shared_ptr<const std::vector<double>> CachedBasis(const MfccToMelParams& p) {
  struct Entry {
    int64_t n_mels, n_mfcc, dct_type;
    DctNorm norm;
    double lifter;
    std::shared_ptr<const std::vector<double>> basis;
  };
  static std::mutex mu;
  static std::deque<Entry> entries;
  constexpr size_t kMaxEntries = 16;
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : entries) {
    if (e.n_mels == p.n_mels && e.n_mfcc == p.n_mfcc && e.dct_type == p.dct_type &&
        e.norm == p.norm && e.lifter == p.lifter) {
      return e.basis;
    }
  }
  auto basis = std::make_shared<const std::vector<double>>(MfccToMelBasis(p));
  if (entries.size() == kMaxEntries) entries.pop_front();
  entries.push_back({p.n_mels, p.n_mfcc, p.dct_type, p.norm, p.lifter, basis});
  return basis;
}

}  // namespace

namespace {

// Splits the work into tasks of one batch item and up to kFrameBlock frames.
struct Blocks {
  int64_t per_item, count;
};

Blocks FrameBlocks(const MfccToMelParams& p) {
  const int64_t per_item = (p.n_frames + kFrameBlock - 1) / kFrameBlock;
  return {per_item, p.batch * per_item};
}

}  // namespace

template <typename T>
void MfccToMelForward(const MfccToMelParams& p, const T* mfcc, T* mel, const Parallel& parallel) {
  const Blocks blocks = FrameBlocks(p);
  if (blocks.count == 0) return;
  const std::shared_ptr<const std::vector<double>> cached = CachedBasis(p);
  const std::vector<double>& basis = *cached;
  const int64_t n_mels = p.n_mels, n_mfcc = p.n_mfcc, n_frames = p.n_frames;
  const double ref = p.ref;
  const double cost = 2.0 * static_cast<double>(n_mels * n_mfcc * kFrameBlock) +
                      40.0 * static_cast<double>(n_mels * kFrameBlock);
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<double> x(static_cast<size_t>(n_mfcc * kFrameBlock));
    Eigen::ArrayXd acc(kFrameBlock);  // 64-byte aligned, whatever the heap gives (below)
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks.per_item;
      const int64_t t0 = (task - b * blocks.per_item) * kFrameBlock;
      const int64_t len = std::min(kFrameBlock, n_frames - t0);
      const T* in = mfcc + b * n_mfcc * n_frames + t0;
      for (int64_t n = 0; n < n_mfcc; ++n) {
        for (int64_t t = 0; t < len; ++t) {
          x[static_cast<size_t>(n * kFrameBlock + t)] = static_cast<double>(in[n * n_frames + t]);
        }
      }
      T* out = mel + b * n_mels * n_frames + t0;
      for (int64_t k = 0; k < n_mels; ++k) {
        const double* row = basis.data() + k * n_mfcc;
        // One product of the basis with the block, summed over n in ascending order for every
        // frame (the same order whatever the partition).
        double* a = acc.data();
        std::fill(a, a + len, 0.0);
        for (int64_t n = 0; n < n_mfcc; ++n) {
          const double w = row[n];
          const double* xn = x.data() + n * kFrameBlock;
          for (int64_t t = 0; t < len; ++t) a[t] += w * xn[t];
        }
        // Eigen's vectorised exp over the block (pow per element would be most of the op's time).
        // Its packet exp and the scalar std::exp differ in the last bit for about one value in
        // seven. Over a heap vector, float64 results changed from one process to the next
        // (TensorFlow 2.20's XLA against the same kernel outside it: 2 runs in 5; 0 in 10 over
        // Eigen's aligned array): which elements took the scalar path evidently followed the
        // buffer's address. Eigen's own storage keeps the address, and the split, fixed.
        auto block = acc.head(len);
        block = (block * kDbToNeper).exp() * ref;
        T* o = out + k * n_frames;
        for (int64_t t = 0; t < len; ++t) o[t] = static_cast<T>(a[t]);
      }
    }
  };
  // A clip or two (up to kSerialValues mel values) runs on the calling thread: for so little work
  // waking a second thread of TensorFlow's pool costs more than it saves (BM_MfccToMel/1 against
  // /2 in griffin_lim_bench.cc, `make core-bench`: 5 s of audio).
  if (p.batch * n_frames * n_mels <= kSerialValues) {
    run(0, blocks.count);
    return;
  }
  parallel.For(blocks.count, cost, run);
}

template <typename T>
void MfccToMelBackward(const MfccToMelParams& p, const T* grad_mel, const T* mel, T* grad_mfcc,
                       const Parallel& parallel) {
  const Blocks blocks = FrameBlocks(p);
  if (blocks.count == 0) return;
  const std::shared_ptr<const std::vector<double>> cached = CachedBasis(p);
  const std::vector<double>& basis = *cached;
  const int64_t n_mels = p.n_mels, n_mfcc = p.n_mfcc, n_frames = p.n_frames;
  // d/dx ref * 10^(0.1 x) = (0.1 ln 10) * ref * 10^(0.1 x) = (0.1 ln 10) * mel.
  const double scale = kDbToNeper;
  const double cost = 2.0 * static_cast<double>(n_mels * n_mfcc * kFrameBlock);
  parallel.For(blocks.count, cost, [&](int64_t begin, int64_t end) {
    std::vector<double> w(static_cast<size_t>(n_mels * kFrameBlock));
    std::vector<double> acc(static_cast<size_t>(kFrameBlock));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / blocks.per_item;
      const int64_t t0 = (task - b * blocks.per_item) * kFrameBlock;
      const int64_t len = std::min(kFrameBlock, n_frames - t0);
      const int64_t offset = b * n_mels * n_frames + t0;
      for (int64_t k = 0; k < n_mels; ++k) {
        const T* g = grad_mel + offset + k * n_frames;
        const T* m = mel + offset + k * n_frames;
        double* wk = w.data() + k * kFrameBlock;
        for (int64_t t = 0; t < len; ++t) {
          wk[t] = scale * static_cast<double>(m[t]) * static_cast<double>(g[t]);
        }
      }
      T* out = grad_mfcc + b * n_mfcc * n_frames + t0;
      for (int64_t n = 0; n < n_mfcc; ++n) {
        std::fill(acc.begin(), acc.begin() + len, 0.0);
        for (int64_t k = 0; k < n_mels; ++k) {
          const double c = basis[static_cast<size_t>(k * n_mfcc + n)];
          const double* wk = w.data() + k * kFrameBlock;
          for (int64_t t = 0; t < len; ++t) acc[static_cast<size_t>(t)] += c * wk[t];
        }
        T* o = out + n * n_frames;
        for (int64_t t = 0; t < len; ++t) o[t] = static_cast<T>(acc[static_cast<size_t>(t)]);
      }
    }
  });
}

#define OPFORGE_MFCC_TO_MEL_INSTANTIATE(T)                                                  \
  template void MfccToMelForward<T>(const MfccToMelParams&, const T*, T*, const Parallel&); \
  template void MfccToMelBackward<T>(const MfccToMelParams&, const T*, const T*, T*,        \
                                     const Parallel&);
OPFORGE_MFCC_TO_MEL_INSTANTIATE(float)
OPFORGE_MFCC_TO_MEL_INSTANTIATE(double)
#undef OPFORGE_MFCC_TO_MEL_INSTANTIATE

}  // namespace opforge
