// The MelToStft CUDA kernel against the CPU core (SerialParallel), on a non-blocking stream, in
// float and double: librosa's banks (Slaney and HTK, normalised or not, fmin/fmax), a bank given
// by the caller (TensorFlow's, and librosa's handed in), powers 1, 2 and 1.5, reachable and
// unreachable Mel frames, batches, more frames than resident blocks (grid stride), one band; the
// errors (non-finite Mel values, a bad given bank: the CPU's messages), the empty batch, a short
// scratch. Without a CUDA device every test says "skipped: no CUDA device", except the host check
// of the solver's tridiagonal LDL^T (mel_to_stft_tridiag.h, which the kernel and the host share)
// against Eigen's SimplicialLDLT, bit for bit.
//
// What is compared, and why. NNLS with n_freq > n_mels unknowns has many minimisers, so two
// correct solvers may return different spectra; the contract is the objective
// 0.5 |M s - b|^2, s = stft^power. Per frame the GPU's objective must be at most the CPU's times
// (1 + 1e-3), plus what rounding the output to T and back can add: with e = |M| (c s), c =
// (power + 1) eps_T + 8 u per element (the output's rounding, stft^power and the host's pow),
// |M s' - b| <= |M s - b| + |e|, so obj' <= obj + |e| (sqrt(2 obj) + |e| / 2); the test allows
// twice that. The kernel replays the CPU's solver operation for operation (mel_to_stft.cu), so
// for power 1 and 2 (no pow) it should also give the CPU's bits: at least 90% of the frames must
// be bit-identical there (all of them are expected; the margin is for a threshold decision that
// falls the other way on a CPU build whose Eigen sums in another order).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/mel_to_stft/mel_to_stft.h"
#include "ops/mel_to_stft/mel_to_stft_tridiag.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::TestStream;
using test::UploadOn;

constexpr double kU = 1.1102230246251565e-16;  // 2^-53

struct Case {
  const char* name;
  int64_t batch, n_mels, n_frames;
  MelFilterParams filters;
  double power;
  bool reachable;      // b = M s0 for a non-negative s0; otherwise random positive b
  bool tf_bank;        // a given bank: TensorFlow's (HTK triangles in the Mel domain)
  bool librosa_given;  // a given bank: librosa's, as built from the attrs
};

MelFilterParams Filters(double sr, int64_t n_fft, double fmin, double fmax, bool htk,
                        MelNorm norm) {
  MelFilterParams f;
  f.sr = sr;
  f.n_fft = n_fft;
  f.fmin = fmin;
  f.fmax = fmax;
  f.htk = htk;
  f.norm = norm;
  return f;
}

std::vector<Case> Cases() {
  const MelFilterParams defaults = Filters(22050, 2048, 0, -1, false, MelNorm::kSlaney);
  return {
      {"librosa defaults", 2, 128, 5, defaults, 2.0, true, false, false},
      {"unreachable frames", 2, 128, 3, defaults, 2.0, false, false, false},
      {"htk, no norm, fmin/fmax, power 1", 1, 40, 4,
       Filters(16000, 512, 80, 7000, true, MelNorm::kNone), 1.0, true, false, false},
      {"power 1.5", 1, 64, 3, Filters(22050, 1024, 0, -1, false, MelNorm::kSlaney), 1.5, true,
       false, false},
      {"frames > blocks (grid stride)", 3, 10, 300,
       Filters(8000, 64, 0, -1, false, MelNorm::kSlaney), 2.0, true, false, false},
      {"one band", 2, 1, 3, Filters(8000, 32, 0, -1, false, MelNorm::kSlaney), 2.0, true, false,
       false},
      {"TensorFlow's bank given", 2, 40, 4, Filters(8000, 512, 0, -1, false, MelNorm::kSlaney), 1.0,
       true, true, false},
      {"librosa's bank given", 1, 128, 3, defaults, 2.0, true, false, true},
  };
}

// tf.signal.linear_to_mel_weight_matrix, transposed to [n_mels, n_freq] (20 Hz to 3800 Hz).
std::vector<double> TfMelBank(int64_t n_mels, int64_t n_fft, double sr) {
  const double lo = 20, hi = 3800;
  const int64_t n_freq = n_fft / 2 + 1;
  auto mel = [](double hz) { return 1127.0 * std::log1p(hz / 700.0); };
  std::vector<double> edges(static_cast<size_t>(n_mels + 2));
  for (int64_t i = 0; i < n_mels + 2; ++i) {
    edges[i] = mel(lo) + (mel(hi) - mel(lo)) * double(i) / double(n_mels + 1);
  }
  std::vector<double> m(static_cast<size_t>(n_mels * n_freq), 0.0);
  for (int64_t k = 1; k < n_freq; ++k) {
    const double f = mel(sr / 2 * double(k) / double(n_freq - 1));
    for (int64_t i = 0; i < n_mels; ++i) {
      const double l = edges[i], c = edges[i + 1], u = edges[i + 2];
      m[i * n_freq + k] = std::max(0.0, std::min((f - l) / (c - l), (u - f) / (u - c)));
    }
  }
  return m;
}

template <typename T>
struct Problem {
  MelToStftParams p;
  std::vector<T> bank;  // M, [n_mels, n_freq]
  std::vector<T> mel;   // [batch, n_mels, T]
  bool given = false;
};

template <typename T>
Problem<T> Make(const Case& c, std::mt19937_64& rng) {
  Problem<T> pr;
  pr.p.filters = c.filters;
  pr.p.power = c.power;
  pr.given = c.tf_bank || c.librosa_given;
  const int64_t n_freq = c.filters.n_fft / 2 + 1;
  const std::vector<int64_t> filter_shape =
      pr.given ? std::vector<int64_t>{c.n_mels, n_freq} : std::vector<int64_t>{0, 0};
  const Status s = ValidateMelToStft({c.batch, c.n_mels, c.n_frames}, filter_shape, &pr.p);
  EXPECT_TRUE(s.ok()) << s.message();
  if (c.tf_bank) {
    const std::vector<double> m = TfMelBank(c.n_mels, c.filters.n_fft, c.filters.sr);
    pr.bank.assign(m.begin(), m.end());
  } else {
    pr.bank = MelFilterBank<T>(pr.p.filters);
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  pr.mel.assign(static_cast<size_t>(c.batch * c.n_mels * c.n_frames), T(0));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.n_frames; ++t) {
      // A power spectrum: a few harmonics over a decaying floor, a third of the bins zero.
      std::vector<double> s0(static_cast<size_t>(n_freq));
      const double f0 = 3 + 5 * unit(rng);
      for (int64_t k = 0; k < n_freq; ++k) {
        const double x = double(k) / double(n_freq);
        s0[k] = unit(rng) < 0.33 ? 0.0
                                 : (1e-3 + std::pow(std::sin(3.14159 * x * f0), 2)) *
                                       std::exp(-4 * x) * (0.5 + unit(rng));
      }
      for (int64_t i = 0; i < c.n_mels; ++i) {
        double v = 0;
        if (c.reachable) {
          for (int64_t k = 0; k < n_freq; ++k) v += double(pr.bank[i * n_freq + k]) * s0[k];
        } else {
          v = 0.01 + unit(rng);
        }
        pr.mel[(b * c.n_mels + i) * c.n_frames + t] = static_cast<T>(v);
      }
    }
  }
  return pr;
}

// The GPU's stft; `status` its call's result.
template <typename T>
void RunGpu(const Problem<T>& pr, cudaStream_t stream, std::vector<T>* out, Status* status,
            int64_t scratch_bytes = -1) {
  DeviceBuffer dmel, dbank, dout, dscratch;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream, pr.mel, &dmel));
  if (pr.given) {
    ASSERT_NO_FATAL_FAILURE(UploadOn(stream, pr.bank, &dbank));
  }
  OPFORGE_ASSERT_CUDA(dout.Allocate(out->size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(cudaMemsetAsync(dout.get(), 0xff, out->size() * sizeof(T), stream));
  const int64_t bytes = scratch_bytes >= 0 ? scratch_bytes : MelToStftGpuScratchBytes(pr.p);
  OPFORGE_ASSERT_CUDA(dscratch.Allocate(static_cast<size_t>(bytes)));
  *status =
      MelToStftForwardGpu(DTypeOf<T>::value, pr.p, dmel.get(), pr.given ? dbank.get() : nullptr,
                          dout.get(), dscratch.get(), bytes, stream);
  ASSERT_NO_FATAL_FAILURE(DownloadOn(stream, dout, out));
}

// 0.5 |M s - b|^2 of frame (b, t) for stft values `out` (s = out^power).
template <typename T>
double Objective(const Problem<T>& pr, const std::vector<T>& out, int64_t item, int64_t t,
                 double* rounding) {
  const int64_t n_mels = pr.p.filters.n_mels, n_freq = pr.p.n_freq, n_frames = pr.p.n_frames;
  const double c = (pr.p.power + 1) * double(std::numeric_limits<T>::epsilon()) + 8 * kU;
  double obj = 0, e2 = 0;
  for (int64_t i = 0; i < n_mels; ++i) {
    double acc = 0, err = 0;
    for (int64_t k = 0; k < n_freq; ++k) {
      const double m = double(pr.bank[i * n_freq + k]);
      if (m == 0) continue;
      const double s = std::pow(double(out[(item * n_freq + k) * n_frames + t]), pr.p.power);
      acc += m * s;
      err += std::abs(m) * c * s;
    }
    const double r = acc - double(pr.mel[(item * n_mels + i) * n_frames + t]);
    obj += 0.5 * r * r;
    e2 += err * err;
  }
  *rounding = std::sqrt(e2);
  return obj;
}

// Host code, no device: the LDL^T the kernel uses (and the host uses for M M^T + mu I) gives
// Eigen's SimplicialLDLT's pivots and solutions bit for bit, on tridiagonal patterns with and
// without each sub-diagonal entry (absent, or present with the value 0 as an inactive column
// leaves it), for right-hand sides with zeros (Eigen's forward substitution skips them).
TEST(MelToStftTridiagonal, LdltEqualsEigensSimplicialLdlt) {
  using SparseMatrix = Eigen::SparseMatrix<double, Eigen::ColMajor, int>;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t n : {1, 2, 3, 5, 8, 40, 128, 129}) {
    for (int round = 0; round < 20; ++round) {
      SCOPED_TRACE("n " + std::to_string(n) + ", round " + std::to_string(round));
      std::vector<unsigned char> has_off(static_cast<size_t>(n), 0);
      std::vector<double> jd(static_cast<size_t>(n)), jo(static_cast<size_t>(n), 0.0);
      std::vector<Eigen::Triplet<double, int>> entries;
      for (int64_t i = 0; i < n; ++i) {
        jd[i] = 1e-10 + 2.0 * unit(rng);
        entries.emplace_back(int(i), int(i), jd[i]);
        const double r = unit(rng);
        if (i > 0 && r < 0.8) {
          has_off[i] = 1;
          jo[i] = r < 0.1 ? 0.0 : (unit(rng) - 0.5) * std::min(jd[i], jd[i - 1]);
          entries.emplace_back(int(i), int(i - 1), jo[i]);
        }
      }
      SparseMatrix j(static_cast<int>(n), static_cast<int>(n));
      j.setFromTriplets(entries.begin(), entries.end());
      j.makeCompressed();
      Eigen::SimplicialLDLT<SparseMatrix, Eigen::Lower, Eigen::NaturalOrdering<int>> ldlt;
      ldlt.compute(j);
      ASSERT_EQ(ldlt.info(), Eigen::Success);
      std::vector<double> d(static_cast<size_t>(n)), l(static_cast<size_t>(n), 0.0);
      ASSERT_TRUE(mel_to_stft::TridiagLdltFactorize(n, has_off.data(), jd.data(), jo.data(),
                                                    d.data(), l.data()));
      const Eigen::VectorXd eigen_d = ldlt.vectorD();
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(test::Bits(d[i]), test::Bits(eigen_d[i])) << i;
      Eigen::VectorXd rhs(n);
      for (int64_t i = 0; i < n; ++i) rhs[i] = unit(rng) < 0.3 ? 0.0 : unit(rng) - 0.5;
      const Eigen::VectorXd expected = ldlt.solve(rhs);
      std::vector<double> x(rhs.data(), rhs.data() + n);
      mel_to_stft::TridiagLdltSolve(n, has_off.data(), d.data(), l.data(), x.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(test::Bits(x[i]), test::Bits(expected[i]))
            << i << ": " << x[i] << " vs " << expected[i];
      }
    }
  }
}

template <typename T>
class MelToStftCuda : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MelToStftCuda, Types, test::TypeNames);

TYPED_TEST(MelToStftCuda, ObjectiveNoWorseThanCpuAndSameBits) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  std::mt19937_64 rng(2024);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Problem<T> pr = Make<T>(c, rng);
    const int64_t n_out = c.batch * pr.p.n_freq * c.n_frames;
    std::vector<T> cpu(static_cast<size_t>(n_out)), gpu(cpu.size());
    OPFORGE_ASSERT_OK(MelToStftForward<T>(pr.p, pr.mel.data(), pr.given ? pr.bank.data() : nullptr,
                                          cpu.data(), SerialParallel()));
    Status s;
    ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &gpu, &s));
    ASSERT_TRUE(s.ok()) << s.message();
    int64_t identical = 0, frames = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      for (int64_t t = 0; t < c.n_frames; ++t) {
        double e_cpu = 0, e_gpu = 0;
        const double obj_cpu = Objective(pr, cpu, b, t, &e_cpu);
        const double obj_gpu = Objective(pr, gpu, b, t, &e_gpu);
        const double e = std::max(e_cpu, e_gpu);
        const double allowed = obj_cpu * (1 + 1e-3) + 2 * e * (std::sqrt(2 * obj_cpu) + e) + 1e-300;
        EXPECT_LE(obj_gpu, allowed) << "frame " << b << ", " << t << ": cpu " << obj_cpu;
        bool same = true;
        for (int64_t k = 0; k < pr.p.n_freq; ++k) {
          const size_t at = static_cast<size_t>((b * pr.p.n_freq + k) * c.n_frames + t);
          ASSERT_GE(gpu[at], T(0)) << "frame " << b << ", " << t << ", bin " << k;
          same = same && std::memcmp(&gpu[at], &cpu[at], sizeof(T)) == 0;
        }
        identical += same;
        ++frames;
      }
    }
    std::cout << "[ info     ] " << c.name << ": " << identical << " of " << frames
              << " frames bit-identical to the CPU\n";
    if (c.power == 1.0 || c.power == 2.0) {
      EXPECT_GE(identical * 10, frames * 9) << identical << " of " << frames;
    }
  }
}

TYPED_TEST(MelToStftCuda, RepeatedCallsGiveTheSameBits) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  std::mt19937_64 rng(7);
  const Problem<T> pr = Make<T>(Cases()[0], rng);
  std::vector<T> a(static_cast<size_t>(pr.p.batch * pr.p.n_freq * pr.p.n_frames)), b(a.size());
  Status s1, s2;
  ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &a, &s1));
  ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &b, &s2));
  ASSERT_TRUE(s1.ok() && s2.ok()) << s1.message() << s2.message();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(T)));
}

TEST(MelToStftCudaErrors, NonFiniteMelAndBadBankGiveTheCpuMessages) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  std::mt19937_64 rng(3);
  Case c = Cases()[6];  // a given bank
  Problem<double> pr = Make<double>(c, rng);
  std::vector<double> out(static_cast<size_t>(c.batch * pr.p.n_freq * c.n_frames));
  auto cpu_message = [&]() {
    return MelToStftForward<double>(pr.p, pr.mel.data(), pr.bank.data(), out.data(),
                                    SerialParallel())
        .message();
  };
  // Two non-finite values: the first flat index is reported.
  pr.mel[17] = std::numeric_limits<double>::infinity();
  pr.mel[5] = std::nan("");
  Status s;
  ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &out, &s));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), cpu_message());
  EXPECT_TRUE(test::Contains(s.message(), "at flat index 5")) << s.message();
  pr.mel[17] = pr.mel[5] = 1.0;
  // Three non-zeros in a column.
  const int64_t n_freq = pr.p.n_freq;
  for (int64_t i = 0; i < 3; ++i) pr.bank[i * n_freq + 100] = 0.5;
  ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &out, &s));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), cpu_message());
  EXPECT_TRUE(test::NamesWord(s.message(), "filters")) << s.message();
}

TEST(MelToStftCudaErrors, EmptyBatchShortScratchAndOtherDTypes) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  MelToStftParams p;
  ASSERT_TRUE(ValidateMelToStft({0, 128, 4}, &p).ok());
  EXPECT_TRUE(
      MelToStftForwardGpu(DType::kFloat, p, nullptr, nullptr, nullptr, nullptr, 0, stream.get())
          .ok());
  std::mt19937_64 rng(4);
  const Problem<float> pr = Make<float>(Cases()[0], rng);
  std::vector<float> out(static_cast<size_t>(pr.p.batch * pr.p.n_freq * pr.p.n_frames));
  Status s;
  ASSERT_NO_FATAL_FAILURE(RunGpu(pr, stream.get(), &out, &s, MelToStftGpuScratchBytes(pr.p) - 1));
  EXPECT_EQ(s.code(), Status::Code::kInternal);
  EXPECT_TRUE(test::Contains(s.message(), "scratch")) << s.message();
  const Status d =
      MelToStftForwardGpu(DType::kHalf, pr.p, nullptr, nullptr, nullptr, nullptr, 0, stream.get());
  EXPECT_FALSE(d.ok());
  EXPECT_TRUE(test::Contains(d.message(), "MelToStft")) << d.message();
}

}  // namespace
}  // namespace opforge
