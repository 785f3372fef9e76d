#include <Eigen/SparseCholesky>
#include <Eigen/SparseCore>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ops/mel_to_stft/mel_to_stft.h"

namespace opforge {
namespace {

constexpr const char* kOp = "MelToStft";

bool ProductFits(const std::vector<int64_t>& dims, int64_t* product) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return false;
  }
  *product = n;
  return true;
}

double FmaxOf(const MelFilterParams& p) { return p.fmax < 0 ? p.sr / 2.0 : p.fmax; }

// Slaney's scale: linear below 1 kHz, logarithmic above (librosa's constants, in its order of
// operations, so that the band edges round as librosa's do).
constexpr double kFSp = 200.0 / 3;
constexpr double kMinLogHz = 1000.0;

double MinLogMel() { return (kMinLogHz - 0.0) / kFSp; }
double LogStep() { return std::log(6.4) / 27.0; }

}  // namespace

Status ParseMelNorm(const char* op, const std::string& norm, MelNorm* out) {
  if (norm == "slaney") {
    *out = MelNorm::kSlaney;
  } else if (norm == "none" || norm == "None" || norm.empty()) {
    *out = MelNorm::kNone;
  } else {
    return InvalidArgument(op, "norm", "\"slaney\" or \"none\"", "\"" + norm + "\"");
  }
  return Status::Ok();
}

Status ValidateMelFilter(const char* op, const MelFilterParams& p) {
  if (!(std::isfinite(p.sr) && p.sr > 0)) {
    return InvalidArgument(op, "sr", "a finite sampling rate > 0", p.sr);
  }
  if (p.n_fft < 1 || p.n_fft > (int64_t{1} << 40)) {
    return InvalidArgument(op, "n_fft", "a positive integer below 2^40", p.n_fft);
  }
  if (p.n_mels < 1) return InvalidArgument(op, "n_mels", "a positive integer", p.n_mels);
  if (!(std::isfinite(p.fmin) && p.fmin >= 0)) {
    return InvalidArgument(op, "fmin", "a finite frequency >= 0", p.fmin);
  }
  const double fmax = FmaxOf(p);
  if (!(std::isfinite(fmax) && fmax > p.fmin)) {
    std::ostringstream s;
    s << "a finite frequency above fmin = " << p.fmin << " (negative: sr / 2)";
    return InvalidArgument(op, "fmax", s.str(), p.fmax);
  }
  if (p.norm != MelNorm::kNone && p.norm != MelNorm::kSlaney) {
    return InvalidArgument(op, "norm", "\"slaney\" or \"none\"", static_cast<int>(p.norm));
  }
  return Status::Ok();
}

double HzToMel(double hz, bool htk) {
  if (htk) return 2595.0 * std::log10(1.0 + hz / 700.0);
  double mel = (hz - 0.0) / kFSp;
  if (hz >= kMinLogHz) mel = MinLogMel() + std::log(hz / kMinLogHz) / LogStep();
  return mel;
}

double MelToHz(double mel, bool htk) {
  if (htk) return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
  double hz = 0.0 + kFSp * mel;
  if (mel >= MinLogMel()) hz = kMinLogHz * std::exp(LogStep() * (mel - MinLogMel()));
  return hz;
}

template <typename T>
std::vector<T> MelFilterBank(const MelFilterParams& p) {
  const int64_t n_mels = p.n_mels;
  const int64_t n_freq = p.n_fft / 2 + 1;
  // np.fft.rfftfreq(n_fft, 1 / sr): k * (1 / (n_fft * (1 / sr))).
  const double freq_step = 1.0 / (static_cast<double>(p.n_fft) * (1.0 / p.sr));
  // mel_frequencies(n_mels + 2, fmin, fmax): np.linspace in Mel, then to Hz.
  const int64_t n_edges = n_mels + 2;
  const double min_mel = HzToMel(p.fmin, p.htk);
  const double max_mel = HzToMel(FmaxOf(p), p.htk);
  const double mel_step = (max_mel - min_mel) / static_cast<double>(n_edges - 1);
  std::vector<double> mel_f(static_cast<size_t>(n_edges));
  for (int64_t i = 0; i < n_edges; ++i) {
    const double m = i == n_edges - 1 ? max_mel : static_cast<double>(i) * mel_step + min_mel;
    mel_f[static_cast<size_t>(i)] = MelToHz(m, p.htk);
  }
  std::vector<T> weights(static_cast<size_t>(n_mels * n_freq));
  for (int64_t i = 0; i < n_mels; ++i) {
    const double f0 = mel_f[static_cast<size_t>(i)];
    const double f1 = mel_f[static_cast<size_t>(i + 1)];
    const double f2 = mel_f[static_cast<size_t>(i + 2)];
    const double fdiff0 = f1 - f0, fdiff1 = f2 - f1;
    const double enorm = 2.0 / (f2 - f0);
    T* row = weights.data() + i * n_freq;
    for (int64_t k = 0; k < n_freq; ++k) {
      const double fft_freq = static_cast<double>(k) * freq_step;
      const double lower = -(f0 - fft_freq) / fdiff0;
      const double upper = (f2 - fft_freq) / fdiff1;
      // Rounded to T first (librosa's weights array has dtype T), then normalised in float64.
      T w = static_cast<T>(std::max(0.0, std::min(lower, upper)));
      if (p.norm == MelNorm::kSlaney) w = static_cast<T>(static_cast<double>(w) * enorm);
      row[k] = w;
    }
  }
  return weights;
}

template std::vector<float> MelFilterBank<float>(const MelFilterParams&);
template std::vector<double> MelFilterBank<double>(const MelFilterParams&);

Status ValidateMelToStft(const std::vector<int64_t>& mel, MelToStftParams* params) {
  if (mel.size() < 2) {
    return InvalidArgument(kOp, "mel", "a tensor of rank >= 2 [..., n_mels, time]",
                           "shape " + ShapeString(mel));
  }
  for (int64_t d : mel) {
    if (d < 0) return InvalidArgument(kOp, "mel", "non-negative dimensions", ShapeString(mel));
  }
  const int64_t n_mels = mel[mel.size() - 2];
  const int64_t n_frames = mel.back();
  if (n_mels < 1) {
    return InvalidArgument(kOp, "mel", "at least one Mel band (axis -2)",
                           "shape " + ShapeString(mel));
  }
  if (n_frames < 1) {
    return InvalidArgument(kOp, "mel", "a non-empty time axis (axis -1)",
                           "shape " + ShapeString(mel));
  }
  MelFilterParams filters = params->filters;
  filters.n_mels = n_mels;
  OPFORGE_RETURN_IF_ERROR(ValidateMelFilter(kOp, filters));
  if (!(std::isfinite(params->power) && params->power > 0)) {
    return InvalidArgument(kOp, "power", "a finite number > 0", params->power);
  }
  if (params->max_iter < 1) {
    return InvalidArgument(kOp, "max_iter", "a positive integer", params->max_iter);
  }
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < mel.size(); ++i) {
    if (__builtin_mul_overflow(batch, mel[i], &batch)) {
      return InvalidArgument(kOp, "mel", "fewer than 2^63 elements", "shape " + ShapeString(mel));
    }
  }
  const int64_t n_freq = filters.n_fft / 2 + 1;
  int64_t total = 0;
  if (!ProductFits({batch, n_mels, n_frames}, &total) ||
      !ProductFits({batch, n_freq, n_frames}, &total)) {
    return InvalidArgument(kOp, "n_fft", "small enough for the output to fit in memory",
                           filters.n_fft);
  }
  params->filters = filters;
  params->batch = batch;
  params->n_frames = n_frames;
  params->n_freq = n_freq;
  return Status::Ok();
}

Status ValidateMelToStft(const std::vector<int64_t>& mel, const std::vector<int64_t>& filters,
                         MelToStftParams* params) {
  MelToStftParams p = *params;
  p.given_filters = false;
  OPFORGE_RETURN_IF_ERROR(ValidateMelToStft(mel, &p));
  const std::vector<int64_t> none = {0, 0};
  const std::vector<int64_t> bank = {p.filters.n_mels, p.n_freq};
  if (filters == bank) {
    p.given_filters = true;
  } else if (filters != none) {
    std::ostringstream s;
    s << "[0, 0] (librosa's bank from the attrs) or [n_mels, n_fft / 2 + 1] = " << ShapeString(bank)
      << " (n_mels from mel, n_fft = " << p.filters.n_fft << ")";
    return InvalidArgument(kOp, "filters", s.str(), "shape " + ShapeString(filters));
  }
  *params = p;
  return Status::Ok();
}

template <typename T>
Status ValidateMelFilterValues(const MelToStftParams& params, const T* filters) {
  const int64_t n_mels = params.filters.n_mels, n_freq = params.n_freq;
  for (int64_t i = 0; i < n_mels * n_freq; ++i) {
    const double v = static_cast<double>(filters[i]);
    if (!(std::isfinite(v) && v >= 0)) {
      std::ostringstream s;
      s << v << " at [" << i / n_freq << ", " << i % n_freq << "]";
      return InvalidArgument(kOp, "filters", "finite and >= 0 everywhere", s.str());
    }
  }
  // The solver's J = M D M^T is tridiagonal only if no column couples rows further apart.
  for (int64_t k = 0; k < n_freq; ++k) {
    int64_t first = -1, count = 0, last = -1;
    for (int64_t r = 0; r < n_mels; ++r) {
      if (filters[r * n_freq + k] == T(0)) continue;
      if (first < 0) first = r;
      last = r;
      ++count;
    }
    if (count > 2 || (count == 2 && last != first + 1)) {
      std::ostringstream s;
      s << count << " non-zeros in column " << k << " (rows " << first << " to " << last << ")";
      return InvalidArgument(kOp, "filters",
                             "a triangular filter bank: at most two non-zeros per frequency "
                             "column, in adjacent rows",
                             s.str());
    }
  }
  return Status::Ok();
}

template Status ValidateMelFilterValues<float>(const MelToStftParams&, const float*);
template Status ValidateMelFilterValues<double>(const MelToStftParams&, const double*);

namespace {

using SparseMatrix = Eigen::SparseMatrix<double, Eigen::ColMajor, int>;
using Ldlt = Eigen::SimplicialLDLT<SparseMatrix, Eigen::Lower, Eigen::NaturalOrdering<int>>;

// What every frame shares: the filter bank by columns (frequency bins) and the pattern of
// J = M D M^T + mu I, with, for every column, where its outer product lands in J's values.
struct Problem {
  int64_t n_mels = 0, n_freq = 0;
  std::vector<int64_t> col_start;  // column f's non-zeros: [col_start[f], col_start[f + 1])
  std::vector<int> row;
  std::vector<double> value;
  SparseMatrix pattern;                // lower triangle of J, every value 0
  std::vector<int64_t> contrib_start;  // column f's products: [contrib_start[f], ...[f + 1])
  std::vector<int> contrib_index;      // index into pattern.valuePtr()
  std::vector<double> contrib_value;   // M[i, f] * M[j, f]
  std::vector<int> diag_index;         // index of (i, i) in pattern.valuePtr()
  double mu = 0;
};

// basis: M, [n_mels, n_freq] row-major.
template <typename T>
Problem MakeProblem(int64_t n_mels, int64_t n_freq, const T* basis) {
  Problem p;
  p.n_mels = n_mels;
  p.n_freq = n_freq;
  p.col_start.assign(static_cast<size_t>(p.n_freq + 1), 0);
  for (int64_t f = 0; f < p.n_freq; ++f) {
    for (int64_t i = 0; i < p.n_mels; ++i) {
      const double v = static_cast<double>(basis[static_cast<size_t>(i * p.n_freq + f)]);
      if (v != 0.0) {
        p.row.push_back(static_cast<int>(i));
        p.value.push_back(v);
      }
    }
    p.col_start[static_cast<size_t>(f + 1)] = static_cast<int64_t>(p.row.size());
  }
  // J's pattern: the diagonal and every pair of rows that share a column (for a Mel bank, the
  // tridiagonal band; the code takes any pattern).
  std::vector<Eigen::Triplet<double, int>> entries;
  for (int64_t i = 0; i < p.n_mels; ++i) entries.emplace_back(int(i), int(i), 0.0);
  for (int64_t f = 0; f < p.n_freq; ++f) {
    for (int64_t a = p.col_start[f]; a < p.col_start[f + 1]; ++a) {
      for (int64_t b = p.col_start[f]; b < p.col_start[f + 1]; ++b) {
        if (p.row[a] > p.row[b]) entries.emplace_back(p.row[a], p.row[b], 0.0);
      }
    }
  }
  p.pattern.resize(static_cast<int>(p.n_mels), static_cast<int>(p.n_mels));
  p.pattern.setFromTriplets(entries.begin(), entries.end());
  p.pattern.makeCompressed();
  std::fill(p.pattern.valuePtr(), p.pattern.valuePtr() + p.pattern.nonZeros(), 0.0);
  auto index_of = [&](int i, int j) {  // i >= j
    const int* begin = p.pattern.innerIndexPtr() + p.pattern.outerIndexPtr()[j];
    const int* end = p.pattern.innerIndexPtr() + p.pattern.outerIndexPtr()[j + 1];
    return static_cast<int>(std::lower_bound(begin, end, i) - p.pattern.innerIndexPtr());
  };
  double max_diag = 0;
  std::vector<double> diag(static_cast<size_t>(p.n_mels), 0.0);
  p.contrib_start.assign(static_cast<size_t>(p.n_freq + 1), 0);
  for (int64_t f = 0; f < p.n_freq; ++f) {
    for (int64_t a = p.col_start[f]; a < p.col_start[f + 1]; ++a) {
      for (int64_t b = p.col_start[f]; b < p.col_start[f + 1]; ++b) {
        if (p.row[a] < p.row[b]) continue;
        p.contrib_index.push_back(index_of(p.row[a], p.row[b]));
        p.contrib_value.push_back(p.value[a] * p.value[b]);
        if (a == b) diag[static_cast<size_t>(p.row[a])] += p.value[a] * p.value[a];
      }
    }
    p.contrib_start[static_cast<size_t>(f + 1)] = static_cast<int64_t>(p.contrib_index.size());
  }
  for (double d : diag) max_diag = std::max(max_diag, d);
  for (int64_t i = 0; i < p.n_mels; ++i) p.diag_index.push_back(index_of(int(i), int(i)));
  // A regularisation far below any Mel bank's spectrum (M M^T's largest eigenvalue is within a
  // factor 3 of its largest diagonal entry) and far above rounding: J stays positive definite
  // when a band is empty, and b out of M's cone gives a finite dual point.
  p.mu = 1e-10 * (max_diag > 0 ? max_diag : 1.0);
  return p;
}

// One frame's solver, with its own J and factorisation (one per task range).
class FrameSolver {
 public:
  FrameSolver(const Problem& p, const Ldlt& full) : p_(p), full_(full), j_(p.pattern) {
    ldlt_.analyzePattern(j_);
    const size_t m = static_cast<size_t>(p.n_mels), n = static_cast<size_t>(p.n_freq);
    nu_.resize(m);
    f_.resize(m);
    d_.resize(m);
    trial_.resize(m);
    z_.resize(n);
    w_.resize(n);
    c_.resize(n);
    s_.resize(n);
    best_.resize(n);
    active_.resize(n);
    prev_active_.resize(n);
  }

  // s (n_freq values, >= 0) for the Mel frame b (n_mels values).
  void Solve(const double* b, int64_t max_iter, double* s_out) {
    Eigen::Map<const Eigen::VectorXd> bv(b, p_.n_mels);
    // Librosa's starting point: the least-squares solution clipped at 0.
    std::fill(c_.begin(), c_.end(), 0.0);
    nu_ = full_.solve(bv);
    Primal();
    best_ = s_;
    double best_obj = Objective(b, s_.data());
    // Proximal rounds: round r solves min 0.5 |M s - b|^2 + mu/2 |s - c|^2 with c the previous
    // round's s (c = 0 first), s = max(0, M^T nu + c). Each round cuts the regularisation's bias
    // by about mu / (mu + sigma^2) and costs one or two Newton steps once the pieces are found.
    double prev_obj = std::numeric_limits<double>::infinity();
    for (int round = 0; round < kRounds; ++round) {
      Newton(b, bv.norm(), max_iter);
      const double obj = Objective(b, s_.data());
      if (obj < best_obj) {
        best_obj = obj;
        best_ = s_;
      }
      if (!(obj < prev_obj * (1 - 1e-3)) || obj == 0) break;
      prev_obj = obj;
      std::copy(s_.data(), s_.data() + p_.n_freq, c_.begin());
      nu_.setZero();
      Primal();
    }
    std::copy(best_.data(), best_.data() + p_.n_freq, s_out);
  }

 private:
  static constexpr int kRounds = 4;

  // Semismooth Newton steps on F(nu) = M max(0, M^T nu + c) + mu nu - b from the current nu.
  void Newton(const double* b, double b_norm, int64_t max_iter) {
    const int64_t m = p_.n_mels;
    bool prev_full = false;
    for (int64_t it = 0; it < max_iter; ++it) {
      Forward(s_.data(), f_.data());
      for (int64_t i = 0; i < m; ++i) f_[i] += p_.mu * nu_[i] - b[i];
      if (!(f_.norm() > 1e-13 * b_norm)) break;
      for (int64_t k = 0; k < p_.n_freq; ++k) active_[static_cast<size_t>(k)] = z_[k] > 0;
      // A full Newton step on an unchanged piece of F lands on its zero: converged.
      if (it > 0 && prev_full && active_ == prev_active_) break;
      BuildJ();
      ldlt_.factorize(j_);
      if (ldlt_.info() != Eigen::Success) break;
      d_ = ldlt_.solve(-f_);
      const double slope = -f_.dot(d_);  // the dual's directional derivative
      if (!(slope > 0)) break;
      // Armijo line search on the concave dual
      // phi(nu) = b.nu - 0.5 |max(0, M^T nu + c)|^2 - mu/2 |nu|^2,
      // its gain computed as a difference term by term, so that gains far below phi's own size
      // (the last digits of a reachable frame) are still measured.
      Transpose(d_.data(), w_.data());
      const double bd = Eigen::Map<const Eigen::VectorXd>(b, m).dot(d_);
      const double nud = nu_.dot(d_), dd = d_.squaredNorm();
      double t = 1.0;
      while (t > 1e-12 && DualGain(t, bd, nud, dd) < 1e-4 * t * slope) t *= 0.5;
      if (t <= 1e-12) break;
      nu_ += t * d_;
      prev_full = t == 1.0;
      prev_active_ = active_;
      Primal();
    }
  }

  // z = M^T nu + c, s = max(0, z).
  void Primal() {
    Transpose(nu_.data(), z_.data());
    for (int64_t k = 0; k < p_.n_freq; ++k) {
      z_[k] += c_[k];
      s_[k] = z_[k] > 0 ? z_[k] : 0.0;
    }
  }
  void Transpose(const double* x, double* out) const {
    for (int64_t k = 0; k < p_.n_freq; ++k) {
      double acc = 0;
      for (int64_t a = p_.col_start[k]; a < p_.col_start[k + 1]; ++a) {
        acc += p_.value[a] * x[p_.row[a]];
      }
      out[k] = acc;
    }
  }
  // out = M s.
  void Forward(const double* s, double* out) const {
    std::fill(out, out + p_.n_mels, 0.0);
    for (int64_t k = 0; k < p_.n_freq; ++k) {
      const double sk = s[k];
      if (sk == 0) continue;
      for (int64_t a = p_.col_start[k]; a < p_.col_start[k + 1]; ++a) {
        out[p_.row[a]] += p_.value[a] * sk;
      }
    }
  }
  double Objective(const double* b, const double* s) {
    Forward(s, trial_.data());
    double acc = 0;
    for (int64_t i = 0; i < p_.n_mels; ++i) {
      const double r = trial_[i] - b[i];
      acc += r * r;
    }
    return 0.5 * acc;
  }
  // phi(nu + t d) - phi(nu), with z_ = M^T nu + c and w_ = M^T d.
  double DualGain(double t, double bd, double nud, double dd) const {
    double quad = 0;
    for (int64_t k = 0; k < p_.n_freq; ++k) {
      const double a = z_[k], v = a + t * w_[k];
      if (a > 0) {
        quad += v > 0 ? t * w_[k] * (a + v) : -a * a;
      } else if (v > 0) {
        quad += v * v;
      }
    }
    return t * bd - 0.5 * quad - p_.mu * (t * nud + 0.5 * t * t * dd);
  }
  void BuildJ() {
    double* values = j_.valuePtr();
    std::fill(values, values + j_.nonZeros(), 0.0);
    for (int idx : p_.diag_index) values[idx] = p_.mu;
    for (int64_t k = 0; k < p_.n_freq; ++k) {
      if (!active_[static_cast<size_t>(k)]) continue;
      for (int64_t c = p_.contrib_start[k]; c < p_.contrib_start[k + 1]; ++c) {
        values[p_.contrib_index[c]] += p_.contrib_value[c];
      }
    }
  }

  const Problem& p_;
  const Ldlt& full_;
  SparseMatrix j_;
  Ldlt ldlt_;
  Eigen::VectorXd nu_, f_, d_, trial_;
  std::vector<double> z_, w_, c_;
  Eigen::VectorXd s_, best_;
  std::vector<char> active_, prev_active_;
};

}  // namespace

template <typename T>
Status MelToStftForward(const MelToStftParams& params, const T* mel, const T* filters, T* stft,
                        const Parallel& parallel) {
  const int64_t n_mels = params.filters.n_mels, n_frames = params.n_frames;
  const int64_t n_freq = params.n_freq;
  const int64_t total = params.batch * n_frames;
  if (total == 0) return Status::Ok();
  const int64_t n_in = params.batch * n_mels * n_frames;
  for (int64_t i = 0; i < n_in; ++i) {
    if (!std::isfinite(static_cast<double>(mel[i]))) {
      std::ostringstream s;
      s << mel[i] << " at flat index " << i;
      return InvalidArgument(kOp, "mel", "finite everywhere", s.str());
    }
  }
  std::vector<T> built;
  if (params.given_filters) {
    if (filters == nullptr) {
      return InvalidArgument(kOp, "filters", "given (given_filters is set)", "null");
    }
    OPFORGE_RETURN_IF_ERROR(ValidateMelFilterValues<T>(params, filters));
  } else {
    built = MelFilterBank<T>(params.filters);
    filters = built.data();
  }
  const Problem problem = MakeProblem<T>(n_mels, n_freq, filters);
  // (M M^T + mu I), factorised once: every frame's starting point.
  SparseMatrix full = problem.pattern;
  for (int idx : problem.diag_index) full.valuePtr()[idx] = problem.mu;
  for (size_t c = 0; c < problem.contrib_index.size(); ++c) {
    full.valuePtr()[problem.contrib_index[c]] += problem.contrib_value[c];
  }
  Ldlt full_ldlt;
  full_ldlt.compute(full);
  if (full_ldlt.info() != Eigen::Success) {
    return Status::Internal("MelToStft: the factorisation of M M^T failed");
  }
  const double inv_power = 1.0 / params.power;
  const int64_t max_iter = params.max_iter;
  const double cost = 40.0 * static_cast<double>(n_freq + n_mels) * 4.0;
  parallel.For(total, cost, [&](int64_t begin, int64_t end) {
    FrameSolver solver(problem, full_ldlt);
    std::vector<double> b(static_cast<size_t>(n_mels)), s(static_cast<size_t>(n_freq));
    for (int64_t frame = begin; frame < end; ++frame) {
      const int64_t item = frame / n_frames;
      const int64_t t = frame - item * n_frames;
      const T* in = mel + item * n_mels * n_frames + t;
      for (int64_t i = 0; i < n_mels; ++i) b[static_cast<size_t>(i)] = double(in[i * n_frames]);
      solver.Solve(b.data(), max_iter, s.data());
      T* out = stft + item * n_freq * n_frames + t;
      for (int64_t k = 0; k < n_freq; ++k) {
        const double v = s[static_cast<size_t>(k)];
        const double r = inv_power == 1.0   ? v
                         : inv_power == 0.5 ? std::sqrt(v)
                                            : std::pow(v, inv_power);
        out[k * n_frames] = static_cast<T>(r);
      }
    }
  });
  return Status::Ok();
}

template Status MelToStftForward<float>(const MelToStftParams&, const float*, const float*, float*,
                                        const Parallel&);
template Status MelToStftForward<double>(const MelToStftParams&, const double*, const double*,
                                         double*, const Parallel&);

}  // namespace opforge
