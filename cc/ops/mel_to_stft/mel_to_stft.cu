// CUDA version of MelToStft: the CPU core's solver (mel_to_stft_cpu.cc), step for step, one
// thread block per frame.
//
// Each frame is the CPU's FrameSolver::Solve: librosa's start (the least-squares solution
// clipped at 0, through the LDL^T of M M^T + mu I), then up to four proximal rounds of
// semismooth Newton steps on the dual, each step a tridiagonal LDL^T of J = M D M^T + mu I and an
// Armijo line search, keeping the best objective. What is sequential in a frame (the
// factorisation and the triangular solves over n_mels, the sums whose order the CPU fixes) runs
// on the block's thread 0; the loops over frequencies and bands (M^T x, M s, J's entries, the
// line search's terms) on all threads. The block's control flow (break, line-search steps) is
// decided by thread 0 and broadcast through shared memory, so every __syncthreads is reached by
// all threads.
//
// Same arithmetic as the CPU, in the same order:
//  - M s, M^T x and J's entries sum each element's terms in ascending column / row order, as the
//    CPU's loops do (the column lists are the CPU's: the non-zeros of M, at most two per column,
//    in adjacent rows, so J is tridiagonal);
//  - the LDL^T and the solves are Eigen's SimplicialLDLT on that pattern (natural ordering,
//    up-looking factorisation, unit-triangular solves, D^-1 applied as a multiplication by 1/D);
//  - the line search's sum and the objective are sequential, as on the CPU;
//  - Eigen's dot products and squared norms of the n_mels vectors are replayed in Eigen's order
//    for the x86-64 AVX build (4-double packets: four accumulators for dot, two for sums; the
//    packets reduced as (a0 + a2) + (a1 + a3), the tail added last), which the CPU core is
//    compiled for (CMakeLists.txt: -mavx); on another CPU build the order differs in the last
//    bits only.
// Compiled without FMA contraction, the GPU's float64 add, multiply, divide and sqrt round as the
// CPU's do; only pow (power other than 1 or 2) differs by an ulp or two. So the two normally take
// the same steps and give the same bits; a threshold decision that falls the other way (a
// different last bit of a norm on another CPU build) gives another point of the same NNLS
// problem, never a worse one than librosa's start. The tests compare objectives
// (mel_to_stft_cuda_test.cc).
//
// Before solving, as the CPU does: non-finite Mel values are an error naming the first one (a
// kernel finds the smallest flat index, the host reads it back), and a given bank is read back
// and checked with ValidateMelFilterValues (the CPU's message). The problem's tables (the columns
// of M, its rows, the LDL^T of M M^T + mu I, built on the host as the CPU builds them) are copied
// into the caller's scratch, followed by a workspace for each of up to kMaxBlocks blocks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_util.cuh"
#include "ops/mel_to_stft/mel_to_stft.h"
#include "ops/mel_to_stft/mel_to_stft_tridiag.h"

namespace opforge {
namespace {

constexpr const char* kOp = "MelToStft";
constexpr int kThreads = 128;
// Blocks resident at once, each with its own workspace in the scratch (frames beyond are
// grid-strided); ~50 KB each for n_fft = 2048 and 128 bands.
constexpr int64_t kMaxBlocks = 256;
constexpr int kProximalRounds = 4;  // FrameSolver::kRounds
constexpr size_t kAlign = 256;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The problem's tables, as offsets into the scratch (then pointers on the device).
struct Layout {
  size_t col_row, col_count, col_v0, col_v1;  // per column k: first row, non-zeros (0-2), values
  size_t row_start, row_col, row_val;         // M by rows (CSR), columns ascending
  size_t has_off;                             // J(i, i-1) in the pattern (uint8, per row)
  size_t full_d, full_l;                      // LDL^T of M M^T + mu I
  size_t tables_end;                          // the tables are copied up to here
  size_t first_bad;                           // the smallest flat index of a non-finite Mel value
  size_t workspace;                           // per-block workspaces
  size_t per_block;
  int64_t blocks;
  size_t total;
};

// Bytes of one block's workspace and offsets inside it.
struct Workspace {
  size_t z, w, c, s, best, active, prev_active;  // n_freq
  size_t b, nu, f, d, trial, jd, jo, dd, ll;     // n_mels
  size_t bytes;
};

Workspace WorkspaceOf(int64_t n_mels, int64_t n_freq) {
  Workspace w;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += AlignUp(bytes);
    return here;
  };
  const size_t fd = sizeof(double) * static_cast<size_t>(n_freq);
  const size_t md = sizeof(double) * static_cast<size_t>(n_mels);
  w.z = take(fd);
  w.w = take(fd);
  w.c = take(fd);
  w.s = take(fd);
  w.best = take(fd);
  w.active = take(static_cast<size_t>(n_freq));
  w.prev_active = take(static_cast<size_t>(n_freq));
  w.b = take(md);
  w.nu = take(md);
  w.f = take(md);
  w.d = take(md);
  w.trial = take(md);
  w.jd = take(md);
  w.jo = take(md);
  w.dd = take(md);
  w.ll = take(md);
  w.bytes = at;
  return w;
}

Layout LayoutOf(const MelToStftParams& p) {
  const int64_t n_mels = p.filters.n_mels, n_freq = p.n_freq;
  const size_t nf = static_cast<size_t>(n_freq), nm = static_cast<size_t>(n_mels);
  Layout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += AlignUp(bytes);
    return here;
  };
  l.col_row = take(sizeof(int32_t) * nf);
  l.col_count = take(sizeof(int32_t) * nf);
  l.col_v0 = take(sizeof(double) * nf);
  l.col_v1 = take(sizeof(double) * nf);
  l.row_start = take(sizeof(int64_t) * (nm + 1));
  l.row_col = take(sizeof(int64_t) * 2 * nf);  // at most two non-zeros per column
  l.row_val = take(sizeof(double) * 2 * nf);
  l.has_off = take(nm);
  l.full_d = take(sizeof(double) * nm);
  l.full_l = take(sizeof(double) * nm);
  l.tables_end = at;
  l.first_bad = take(sizeof(unsigned long long));
  l.blocks = std::min<int64_t>(std::max<int64_t>(p.batch * p.n_frames, 1), kMaxBlocks);
  l.per_block = WorkspaceOf(n_mels, n_freq).bytes;
  l.workspace = at;
  l.total = at + l.per_block * static_cast<size_t>(l.blocks);
  return l;
}

// The tables on the host, laid out as in the scratch (one copy).
struct HostProblem {
  std::vector<unsigned char> bytes;
  double mu = 0;
};

template <typename V>
V* At(std::vector<unsigned char>* bytes, size_t offset) {
  return reinterpret_cast<V*>(bytes->data() + offset);
}

// Builds the tables from M ([n_mels, n_freq], host) as MakeProblem does, and factorises
// M M^T + mu I as Eigen's SimplicialLDLT does. Errors: a column that is not two adjacent rows
// (Internal: the bank was validated, or is librosa's, which never has one) and a zero pivot (the
// CPU's message).
template <typename T>
Status BuildProblem(const MelToStftParams& p, const Layout& l, const T* bank, HostProblem* out) {
  const int64_t n_mels = p.filters.n_mels, n_freq = p.n_freq;
  out->bytes.assign(l.tables_end, 0);
  std::vector<unsigned char>* bytes = &out->bytes;
  int32_t* col_row = At<int32_t>(bytes, l.col_row);
  int32_t* col_count = At<int32_t>(bytes, l.col_count);
  double* col_v0 = At<double>(bytes, l.col_v0);
  double* col_v1 = At<double>(bytes, l.col_v1);
  std::vector<std::vector<std::pair<int64_t, double>>> rows(static_cast<size_t>(n_mels));
  std::vector<double> diag(static_cast<size_t>(n_mels), 0.0);
  unsigned char* has_off = bytes->data() + l.has_off;
  for (int64_t k = 0; k < n_freq; ++k) {
    int32_t count = 0, first = -1;
    double v[2] = {0.0, 0.0};
    for (int64_t i = 0; i < n_mels; ++i) {
      const double x = static_cast<double>(bank[i * n_freq + k]);
      if (x == 0.0) continue;
      if (count == 2 || (count == 1 && i != first + 1)) {
        std::ostringstream s;
        s << kOp << ": the filter bank's column " << k
          << " has non-zeros in rows that are not adjacent (the CUDA solver needs a tridiagonal "
             "M M^T)";
        return Status::Internal(s.str());
      }
      if (count == 0) first = static_cast<int32_t>(i);
      v[count++] = x;
      rows[static_cast<size_t>(i)].push_back({k, x});
      diag[static_cast<size_t>(i)] += x * x;
    }
    col_row[k] = first;
    col_count[k] = count;
    col_v0[k] = v[0];
    col_v1[k] = v[1];
    if (count == 2) has_off[first + 1] = 1;
  }
  double max_diag = 0;
  for (double d : diag) max_diag = std::max(max_diag, d);
  out->mu = 1e-10 * (max_diag > 0 ? max_diag : 1.0);
  int64_t* row_start = At<int64_t>(bytes, l.row_start);
  int64_t* row_col = At<int64_t>(bytes, l.row_col);
  double* row_val = At<double>(bytes, l.row_val);
  int64_t e = 0;
  for (int64_t i = 0; i < n_mels; ++i) {
    row_start[i] = e;
    for (const auto& [k, x] : rows[static_cast<size_t>(i)]) {
      row_col[e] = k;
      row_val[e] = x;
      ++e;
    }
  }
  row_start[n_mels] = e;
  // M M^T + mu I: diagonal mu, then every column's products in ascending column order (the CPU
  // core's contributions), and its LDL^T as Eigen's SimplicialLDLT computes it.
  std::vector<double> jd(static_cast<size_t>(n_mels)), jo(static_cast<size_t>(n_mels), 0.0);
  for (int64_t i = 0; i < n_mels; ++i) {
    jd[i] = out->mu;
    for (const auto& [k, x] : rows[static_cast<size_t>(i)]) {
      jd[i] += x * x;
      if (col_count[k] == 2 && col_row[k] == i - 1) jo[i] += x * col_v0[k];
    }
  }
  if (!mel_to_stft::TridiagLdltFactorize(n_mels, has_off, jd.data(), jo.data(),
                                         At<double>(bytes, l.full_d),
                                         At<double>(bytes, l.full_l))) {
    return Status::Internal("MelToStft: the factorisation of M M^T failed");
  }
  return Status::Ok();
}

// --- the solver, one block per frame -----------------------------------------------------------

struct Problem {
  int64_t n_mels, n_freq;
  const int32_t* col_row;
  const int32_t* col_count;
  const double* col_v0;
  const double* col_v1;
  const int64_t* row_start;
  const int64_t* row_col;
  const double* row_val;
  const unsigned char* has_off;
  const double* full_d;
  const double* full_l;
  double mu;
};

struct Frame {
  double *z, *w, *c, *s, *best;
  unsigned char *active, *prev_active;
  double *b, *nu, *f, *d, *trial, *jd, *jo, *dd, *ll;
};

__device__ Frame FrameAt(unsigned char* base, const Workspace& w) {
  Frame f;
  f.z = reinterpret_cast<double*>(base + w.z);
  f.w = reinterpret_cast<double*>(base + w.w);
  f.c = reinterpret_cast<double*>(base + w.c);
  f.s = reinterpret_cast<double*>(base + w.s);
  f.best = reinterpret_cast<double*>(base + w.best);
  f.active = base + w.active;
  f.prev_active = base + w.prev_active;
  f.b = reinterpret_cast<double*>(base + w.b);
  f.nu = reinterpret_cast<double*>(base + w.nu);
  f.f = reinterpret_cast<double*>(base + w.f);
  f.d = reinterpret_cast<double*>(base + w.d);
  f.trial = reinterpret_cast<double*>(base + w.trial);
  f.jd = reinterpret_cast<double*>(base + w.jd);
  f.jo = reinterpret_cast<double*>(base + w.jo);
  f.dd = reinterpret_cast<double*>(base + w.dd);
  f.ll = reinterpret_cast<double*>(base + w.ll);
  return f;
}

// Thread 0's value to every thread of the block. Every thread must call it.
__device__ double Broadcast(double v, double* slot) {
  if (threadIdx.x == 0) *slot = v;
  __syncthreads();
  const double r = *slot;
  __syncthreads();  // nobody overwrites the slot before every thread has read it
  return r;
}

// Eigen's SimplicialLDLT::solve of J = L D L^T (thread 0 only).
__device__ void LdltSolve(const Problem& p, const double* dd, const double* ll, double* x) {
  mel_to_stft::TridiagLdltSolve(p.n_mels, p.has_off, dd, ll, x);
}

// M^T x at column k (+0 first, then the column's rows in ascending order, as Transpose).
__device__ inline double ColumnDot(const Problem& p, int64_t k, const double* x) {
  double acc = 0.0;
  const int32_t count = p.col_count[k];
  if (count >= 1) acc += p.col_v0[k] * x[p.col_row[k]];
  if (count == 2) acc += p.col_v1[k] * x[p.col_row[k] + 1];
  return acc;
}

class BlockSolver {
 public:
  __device__ BlockSolver(const Problem& p, const Frame& f, double* shared_terms, double* slot)
      : p_(p), f_(f), terms_(shared_terms), slot_(slot) {}

  // FrameSolver::Solve for the Mel frame in f_.b (filled by the caller, synchronised).
  __device__ void Solve(int64_t max_iter) {
    const int tid = threadIdx.x;
    for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.c[k] = 0.0;
    if (tid == 0) {
      for (int64_t i = 0; i < p_.n_mels; ++i) f_.nu[i] = f_.b[i];
      LdltSolve(p_, p_.full_d, p_.full_l, f_.nu);
    }
    __syncthreads();
    Primal();
    for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.best[k] = f_.s[k];
    double best_obj = Objective();
    double prev_obj = INFINITY;
    const double b_norm =
        Broadcast(tid == 0 ? sqrt(mel_to_stft::EigenSquaredNorm(f_.b, p_.n_mels)) : 0.0, slot_);
    for (int round = 0; round < kProximalRounds; ++round) {
      Newton(b_norm, max_iter);
      const double obj = Objective();
      if (obj < best_obj) {  // the same value in every thread
        best_obj = obj;
        for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.best[k] = f_.s[k];
      }
      if (!(obj < prev_obj * (1 - 1e-3)) || obj == 0) break;
      prev_obj = obj;
      for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.c[k] = f_.s[k];
      for (int64_t i = tid; i < p_.n_mels; i += kThreads) f_.nu[i] = 0.0;
      __syncthreads();
      Primal();
    }
    __syncthreads();  // best is complete
  }

 private:
  // z = M^T nu + c, s = max(0, z).
  __device__ void Primal() {
    for (int64_t k = threadIdx.x; k < p_.n_freq; k += kThreads) {
      const double z = ColumnDot(p_, k, f_.nu) + f_.c[k];
      f_.z[k] = z;
      f_.s[k] = z > 0 ? z : 0.0;
    }
    __syncthreads();
  }

  // out = M s: each band sums its columns in ascending order, skipping zeros (as Forward).
  __device__ void Forward(const double* s, double* out) {
    for (int64_t i = threadIdx.x; i < p_.n_mels; i += kThreads) {
      double acc = 0.0;
      for (int64_t e = p_.row_start[i]; e < p_.row_start[i + 1]; ++e) {
        const double sk = s[p_.row_col[e]];
        if (sk == 0) continue;
        acc += p_.row_val[e] * sk;
      }
      out[i] = acc;
    }
    __syncthreads();
  }

  // 0.5 |M s - b|^2, the sum in ascending band order.
  __device__ double Objective() {
    Forward(f_.s, f_.trial);
    double acc = 0;
    if (threadIdx.x == 0) {
      for (int64_t i = 0; i < p_.n_mels; ++i) {
        const double r = f_.trial[i] - f_.b[i];
        acc += r * r;
      }
    }
    return Broadcast(0.5 * acc, slot_);
  }

  // phi(nu + t d) - phi(nu) (DualGain): the terms in parallel, summed in ascending column order
  // by thread 0, one chunk of kThreads at a time.
  __device__ double DualGain(double t, double bd, double nud, double dd) {
    double quad = 0;
    for (int64_t k0 = 0; k0 < p_.n_freq; k0 += kThreads) {
      const int64_t k = k0 + threadIdx.x;
      double term = 0.0;  // adding +0 where the CPU adds nothing is exact (quad is never -0)
      if (k < p_.n_freq) {
        const double a = f_.z[k], v = a + t * f_.w[k];
        if (a > 0) {
          term = v > 0 ? t * f_.w[k] * (a + v) : -a * a;
        } else if (v > 0) {
          term = v * v;
        }
      }
      terms_[threadIdx.x] = term;
      __syncthreads();
      if (threadIdx.x == 0) {
        const int len = static_cast<int>(std::min<int64_t>(kThreads, p_.n_freq - k0));
        for (int j = 0; j < len; ++j) quad += terms_[j];
      }
      __syncthreads();
    }
    return Broadcast(t * bd - 0.5 * quad - p_.mu * (t * nud + 0.5 * t * t * dd), slot_);
  }

  // J = M diag(active) M^T + mu I (tridiagonal: jd the diagonal, jo[i] = J(i, i-1)), each entry
  // summed over the active columns in ascending order (BuildJ).
  __device__ void BuildJ() {
    for (int64_t i = threadIdx.x; i < p_.n_mels; i += kThreads) {
      double jd = p_.mu, jo = 0.0;
      for (int64_t e = p_.row_start[i]; e < p_.row_start[i + 1]; ++e) {
        const int64_t k = p_.row_col[e];
        if (!f_.active[k]) continue;
        const double x = p_.row_val[e];
        jd += x * x;
        if (p_.col_count[k] == 2 && p_.col_row[k] == i - 1) jo += x * p_.col_v0[k];
      }
      f_.jd[i] = jd;
      f_.jo[i] = jo;
    }
    __syncthreads();
  }

  // Eigen's factorize on J (thread 0): false on a zero pivot (ldlt_.info() != Success).
  __device__ bool Factorize() {
    return mel_to_stft::TridiagLdltFactorize(p_.n_mels, p_.has_off, f_.jd, f_.jo, f_.dd, f_.ll);
  }

  __device__ void Newton(double b_norm, int64_t max_iter) {
    const int tid = threadIdx.x;
    const int64_t m = p_.n_mels;
    bool prev_full = false;
    for (int64_t it = 0; it < max_iter; ++it) {
      Forward(f_.s, f_.f);
      for (int64_t i = tid; i < m; i += kThreads) f_.f[i] += p_.mu * f_.nu[i] - f_.b[i];
      __syncthreads();
      const double f_norm =
          Broadcast(tid == 0 ? sqrt(mel_to_stft::EigenSquaredNorm(f_.f, m)) : 0.0, slot_);
      if (!(f_norm > 1e-13 * b_norm)) break;
      bool same = true;
      for (int64_t k = tid; k < p_.n_freq; k += kThreads) {
        const unsigned char a = f_.z[k] > 0;
        f_.active[k] = a;
        same = same && a == f_.prev_active[k];
      }
      same = __syncthreads_and(same) != 0;
      // A full Newton step on an unchanged piece of F lands on its zero: converged.
      if (it > 0 && prev_full && same) break;
      BuildJ();
      double ok = 0, slope = 0;
      if (tid == 0) {
        ok = Factorize() ? 1.0 : 0.0;
        if (ok != 0) {
          for (int64_t i = 0; i < m; ++i) f_.d[i] = -f_.f[i];
          LdltSolve(p_, f_.dd, f_.ll, f_.d);
          slope = -mel_to_stft::EigenDot(f_.f, f_.d, m);  // the dual's directional derivative
        }
      }
      ok = Broadcast(ok, slot_);
      if (ok == 0) break;
      slope = Broadcast(slope, slot_);
      if (!(slope > 0)) break;
      for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.w[k] = ColumnDot(p_, k, f_.d);
      double bd = 0, nud = 0, dd = 0;
      if (tid == 0) {
        bd = mel_to_stft::EigenDot(f_.b, f_.d, m);
        nud = mel_to_stft::EigenDot(f_.nu, f_.d, m);
        dd = mel_to_stft::EigenSquaredNorm(f_.d, m);
      }
      bd = Broadcast(bd, slot_);  // also orders the writes of w before DualGain reads them
      nud = Broadcast(nud, slot_);
      dd = Broadcast(dd, slot_);
      double t = 1.0;
      while (t > 1e-12 && DualGain(t, bd, nud, dd) < 1e-4 * t * slope) t *= 0.5;
      if (t <= 1e-12) break;
      for (int64_t i = tid; i < m; i += kThreads) f_.nu[i] += t * f_.d[i];
      for (int64_t k = tid; k < p_.n_freq; k += kThreads) f_.prev_active[k] = f_.active[k];
      prev_full = t == 1.0;
      __syncthreads();
      Primal();
    }
  }

  const Problem& p_;
  const Frame& f_;
  double* terms_;
  double* slot_;
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    SolveKernel(Problem p, Workspace w, unsigned char* workspaces, size_t per_block, int64_t frames,
                int64_t n_frames, int64_t max_iter, double inv_power, const T* mel, T* stft) {
  __shared__ double terms[kThreads];
  __shared__ double slot;
  const Frame f = FrameAt(workspaces + per_block * blockIdx.x, w);
  BlockSolver solver(p, f, terms, &slot);
  for (int64_t frame = blockIdx.x; frame < frames; frame += gridDim.x) {
    const int64_t item = frame / n_frames, t = frame - item * n_frames;
    const T* in = mel + item * p.n_mels * n_frames + t;
    for (int64_t i = threadIdx.x; i < p.n_mels; i += kThreads) {
      f.b[i] = static_cast<double>(in[i * n_frames]);
    }
    __syncthreads();
    solver.Solve(max_iter);
    T* out = stft + item * p.n_freq * n_frames + t;
    for (int64_t k = threadIdx.x; k < p.n_freq; k += kThreads) {
      const double v = f.best[k];
      const double r = inv_power == 1.0 ? v : inv_power == 0.5 ? sqrt(v) : pow(v, inv_power);
      out[k * n_frames] = static_cast<T>(r);
    }
    __syncthreads();  // the next frame overwrites the workspace
  }
}

// atomicMin of the flat index of every non-finite value into *first (initialised to all ones).
template <typename T>
__global__ void FirstNonFiniteKernel(int64_t n, const T* x, unsigned long long* first) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(static_cast<double>(x[i]))) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

Status CudaError(const char* what, cudaError_t err) {
  return Status::Internal(std::string(kOp) + ": " + what + " failed: " + cudaGetErrorString(err));
}

#define OPFORGE_MEL_CUDA_(expr)                                           \
  do {                                                                    \
    const cudaError_t opforge_err = (expr);                               \
    if (opforge_err != cudaSuccess) return CudaError(#expr, opforge_err); \
  } while (0)

template <typename T>
Status Forward(const MelToStftParams& p, const T* mel, const T* filters, T* stft,
               unsigned char* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  const int64_t n_mels = p.filters.n_mels, n_freq = p.n_freq, n_frames = p.n_frames;
  const int64_t frames = p.batch * n_frames;
  if (frames == 0) return Status::Ok();
  const Layout l = LayoutOf(p);
  if (scratch == nullptr || scratch_bytes < static_cast<int64_t>(l.total)) {
    std::ostringstream s;
    s << kOp << ": the scratch has " << scratch_bytes << " bytes, the kernels need " << l.total
      << " (MelToStftGpuScratchBytes)";
    return Status::Internal(s.str());
  }
  // 1. Non-finite Mel values (the smallest flat index), and a given bank read back: one wait.
  const int64_t n_in = p.batch * n_mels * n_frames;
  auto* first_bad = reinterpret_cast<unsigned long long*>(scratch + l.first_bad);
  OPFORGE_MEL_CUDA_(cudaMemsetAsync(first_bad, 0xff, sizeof(*first_bad), stream));
  OPFORGE_LAUNCH(cuda::Blocks(n_in), cuda::kThreads, 0, stream, FirstNonFiniteKernel<T>)
  (n_in, mel, first_bad);
  OPFORGE_RETURN_IF_ERROR(cuda::LaunchStatus(kOp));
  unsigned long long bad = 0;
  OPFORGE_MEL_CUDA_(cudaMemcpyAsync(&bad, first_bad, sizeof(bad), cudaMemcpyDeviceToHost, stream));
  std::vector<T> bank;
  if (p.given_filters) {
    if (filters == nullptr) {
      return InvalidArgument(kOp, "filters", "given (given_filters is set)", "null");
    }
    bank.resize(static_cast<size_t>(n_mels * n_freq));
    OPFORGE_MEL_CUDA_(cudaMemcpyAsync(bank.data(), filters, bank.size() * sizeof(T),
                                      cudaMemcpyDeviceToHost, stream));
  }
  OPFORGE_MEL_CUDA_(cudaStreamSynchronize(stream));
  if (bad != ~0ull) {
    T value;
    OPFORGE_MEL_CUDA_(
        cudaMemcpyAsync(&value, mel + bad, sizeof(T), cudaMemcpyDeviceToHost, stream));
    OPFORGE_MEL_CUDA_(cudaStreamSynchronize(stream));
    std::ostringstream s;
    s << value << " at flat index " << bad;
    return InvalidArgument(kOp, "mel", "finite everywhere", s.str());
  }
  if (p.given_filters) {
    OPFORGE_RETURN_IF_ERROR(ValidateMelFilterValues<T>(p, bank.data()));
  } else {
    bank = MelFilterBank<T>(p.filters);
  }
  // 2. The problem's tables, built on the host and copied into the scratch (from pageable
  // memory: the call returns once they are staged, so `problem` may go out of scope).
  HostProblem problem;
  OPFORGE_RETURN_IF_ERROR(BuildProblem<T>(p, l, bank.data(), &problem));
  OPFORGE_MEL_CUDA_(cudaMemcpyAsync(scratch, problem.bytes.data(), problem.bytes.size(),
                                    cudaMemcpyHostToDevice, stream));
  Problem dp;
  dp.n_mels = n_mels;
  dp.n_freq = n_freq;
  dp.col_row = reinterpret_cast<const int32_t*>(scratch + l.col_row);
  dp.col_count = reinterpret_cast<const int32_t*>(scratch + l.col_count);
  dp.col_v0 = reinterpret_cast<const double*>(scratch + l.col_v0);
  dp.col_v1 = reinterpret_cast<const double*>(scratch + l.col_v1);
  dp.row_start = reinterpret_cast<const int64_t*>(scratch + l.row_start);
  dp.row_col = reinterpret_cast<const int64_t*>(scratch + l.row_col);
  dp.row_val = reinterpret_cast<const double*>(scratch + l.row_val);
  dp.has_off = scratch + l.has_off;
  dp.full_d = reinterpret_cast<const double*>(scratch + l.full_d);
  dp.full_l = reinterpret_cast<const double*>(scratch + l.full_l);
  dp.mu = problem.mu;
  // 3. The frames. prev_active starts at 0 in every workspace, as the CPU's vector does; it is
  // only compared after a step that has set it, so its initial value never matters.
  OPFORGE_MEL_CUDA_(cudaMemsetAsync(scratch + l.workspace, 0, l.total - l.workspace, stream));
  OPFORGE_LAUNCH(static_cast<unsigned>(l.blocks), kThreads, 0, stream, SolveKernel<T>)
  (dp, WorkspaceOf(n_mels, n_freq), scratch + l.workspace, l.per_block, frames, n_frames,
   p.max_iter, 1.0 / p.power, mel, stft);
  return cuda::LaunchStatus(kOp);
}

}  // namespace

int64_t MelToStftGpuScratchBytes(const MelToStftParams& params) {
  return static_cast<int64_t>(LayoutOf(params).total);
}

Status MelToStftForwardGpu(DType dtype, const MelToStftParams& params, const void* mel,
                           const void* filters_or_null, void* stft, void* scratch,
                           int64_t scratch_bytes, void* stream) {
  return cuda::DispatchFloatDouble(dtype, kOp, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Forward<T>(params, static_cast<const T*>(mel), static_cast<const T*>(filters_or_null),
                      static_cast<T*>(stft), static_cast<unsigned char*>(scratch), scratch_bytes,
                      static_cast<cudaStream_t>(stream));
  });
}

}  // namespace opforge
