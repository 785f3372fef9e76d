// Tests of the FusedBatchNormLeakyRelu core and its gradient against references written here
// from the header (double precision throughout): statistics, outputs and gradients over shapes
// (one row, rows past a chunk, a large mean against a small spread), alphas and dtypes; the
// gradient also against central differences of the forward in double; the same bits for every
// thread count; empty shapes; validation messages.
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"

namespace opforge {
namespace {

using test::Contains;

struct Ref {
  std::vector<double> y, mean, var, dx, dgamma, dbeta;
};

Ref Reference(int64_t rows, int64_t ch, const std::vector<double>& x,
              const std::vector<double>& gamma, const std::vector<double>& beta,
              const std::vector<double>& dy, double eps, double alpha) {
  Ref r;
  r.mean.assign(ch, 0.0);
  r.var.assign(ch, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < ch; ++c) r.mean[c] += x[i * ch + c] / rows;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < ch; ++c) r.var[c] += std::pow(x[i * ch + c] - r.mean[c], 2) / rows;
  r.y.resize(x.size());
  std::vector<double> g(x.size()), xhat(x.size());
  r.dgamma.assign(ch, 0.0);
  r.dbeta.assign(ch, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < ch; ++c) {
      const size_t k = i * ch + c;
      xhat[k] = (x[k] - r.mean[c]) / std::sqrt(r.var[c] + eps);
      const double z = xhat[k] * gamma[c] + beta[c];
      r.y[k] = z > 0 ? z : z * alpha;
      if (!dy.empty()) {
        g[k] = z > 0 ? dy[k] : dy[k] * alpha;
        r.dgamma[c] += g[k] * xhat[k];
        r.dbeta[c] += g[k];
      }
    }
  if (!dy.empty()) {
    r.dx.resize(x.size());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < ch; ++c) {
        const size_t k = i * ch + c;
        r.dx[k] = gamma[c] / std::sqrt(r.var[c] + eps) *
                  (g[k] - r.dbeta[c] / rows - xhat[k] * r.dgamma[c] / rows);
      }
  }
  return r;
}

std::vector<double> Normal(size_t n, unsigned seed, double mean, double sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

template <typename T>
void Check(int64_t rows, int64_t ch, double mean, double sd, float alpha, double tol,
           unsigned seed) {
  using U = BnParamType<T>;
  auto x = Normal(rows * ch, seed, mean, sd);
  for (auto& v : x) v = static_cast<double>(static_cast<T>(v));
  auto gamma = Normal(ch, seed + 1, 1.0, 0.3);
  auto beta = Normal(ch, seed + 2, 0.0, 0.5);
  auto dy = Normal(rows * ch, seed + 3, 0.0, 1.0);
  for (auto& v : dy) v = static_cast<double>(static_cast<T>(v));
  for (auto* v : {&gamma, &beta})
    for (auto& e : *v) e = static_cast<double>(static_cast<U>(e));
  const double eps = static_cast<double>(1e-3f);  // the attr is a float
  const Ref ref = Reference(rows, ch, x, gamma, beta, dy, eps, alpha);
  BatchNormLeakyParams p;
  p.alpha = alpha;
  p.epsilon = static_cast<float>(eps);
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));
  std::vector<T> xt, dyt, y(x.size()), dx(x.size());
  for (double v : x) xt.push_back(static_cast<T>(v));
  for (double v : dy) dyt.push_back(static_cast<T>(v));
  std::vector<U> g(gamma.begin(), gamma.end()), b(beta.begin(), beta.end()), m(ch), var(ch), dg(ch),
      db(ch);
  const ThreadParallel two(2);
  BatchNormLeakyForward<T>(p, xt.data(), g.data(), b.data(), y.data(), m.data(), var.data(), two);
  BatchNormLeakyBackward<T>(p, dyt.data(), xt.data(), g.data(), b.data(), m.data(), var.data(),
                            dx.data(), dg.data(), db.data(), two);
  for (int64_t c = 0; c < ch; ++c) {
    ASSERT_NEAR(m[c], ref.mean[c], 1e-6 * std::abs(ref.mean[c]) + 1e-7 * sd) << c;
    ASSERT_NEAR(var[c], ref.var[c], 1e-5 * ref.var[c] + 1e-12) << c;
    ASSERT_NEAR(db[c], ref.dbeta[c], tol * std::sqrt(static_cast<double>(rows)) + tol) << c;
    ASSERT_NEAR(dg[c], ref.dgamma[c], tol * std::sqrt(static_cast<double>(rows)) + tol) << c;
  }
  for (size_t k = 0; k < x.size(); ++k) {
    ASSERT_NEAR(static_cast<double>(y[k]), ref.y[k], tol * (1 + std::abs(ref.y[k]))) << k;
    ASSERT_NEAR(static_cast<double>(dx[k]), ref.dx[k], tol * (1 + std::abs(ref.dx[k]))) << k;
  }
}

TEST(FusedBatchNormLeakyTest, AgainstReference) {
  Check<double>(300, 5, 0.0, 1.0, 0.1f, 1e-12, 1);
  Check<float>(300, 5, 0.0, 1.0, 0.1f, 2e-5, 2);
  Check<float>(1, 7, 0.0, 1.0, 0.3f, 2e-5, 3);       // one row: variance 0
  Check<float>(700, 3, 100.0, 0.01, 0.0f, 5e-3, 4);  // large mean, small spread
  Check<Eigen::half>(200, 4, 0.0, 1.0, 0.1f, 4e-3, 5);
  Check<Eigen::bfloat16>(200, 4, 0.0, 1.0, 0.1f, 3e-2, 6);
}

TEST(FusedBatchNormLeakyTest, GradientAgainstCentralDifferences) {
  const int64_t rows = 6, ch = 2;
  auto x = Normal(rows * ch, 11, 0.0, 1.0);
  std::vector<double> gamma{1.2, 0.7}, beta{0.1, -0.3};
  auto dy = Normal(rows * ch, 12, 0.0, 1.0);
  BatchNormLeakyParams p;
  p.alpha = 0.2f;
  p.epsilon = 1e-3f;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& g,
                  const std::vector<double>& b) {
    std::vector<double> y(xs.size()), m(ch), v(ch);
    BatchNormLeakyForward<double>(p, xs.data(), g.data(), b.data(), y.data(), m.data(), v.data(),
                                  SerialParallel());
    double s = 0;
    for (size_t k = 0; k < y.size(); ++k) s += y[k] * dy[k];
    return s;
  };
  std::vector<double> y(x.size()), m(ch), v(ch), dx(x.size()), dg(ch), db(ch);
  BatchNormLeakyForward<double>(p, x.data(), gamma.data(), beta.data(), y.data(), m.data(),
                                v.data(), SerialParallel());
  BatchNormLeakyBackward<double>(p, dy.data(), x.data(), gamma.data(), beta.data(), m.data(),
                                 v.data(), dx.data(), dg.data(), db.data(), SerialParallel());
  const double h = 1e-6;
  for (size_t k = 0; k < x.size(); ++k) {
    auto a = x, b = x;
    a[k] += h;
    b[k] -= h;
    EXPECT_NEAR(dx[k], (loss(a, gamma, beta) - loss(b, gamma, beta)) / (2 * h), 1e-6) << k;
  }
  for (int64_t c = 0; c < ch; ++c) {
    auto ga = gamma, gb = gamma, ba = beta, bb = beta;
    ga[c] += h;
    gb[c] -= h;
    ba[c] += h;
    bb[c] -= h;
    EXPECT_NEAR(dg[c], (loss(x, ga, beta) - loss(x, gb, beta)) / (2 * h), 1e-6);
    EXPECT_NEAR(db[c], (loss(x, gamma, ba) - loss(x, gamma, bb)) / (2 * h), 1e-6);
  }
}

TEST(FusedBatchNormLeakyTest, SameBitsForEveryThreadCount) {
  const int64_t rows = 3000, ch = 9;
  auto xd = Normal(rows * ch, 21, 0.5, 2.0), dyd = Normal(rows * ch, 22, 0.0, 1.0);
  std::vector<float> x(xd.begin(), xd.end()), dy(dyd.begin(), dyd.end());
  std::vector<float> g(ch, 1.1f), b(ch, 0.2f);
  BatchNormLeakyParams p;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));
  auto run = [&](const Parallel& par) {
    std::vector<float> y(x.size()), m(ch), v(ch), dx(x.size()), dg(ch), db(ch);
    BatchNormLeakyForward<float>(p, x.data(), g.data(), b.data(), y.data(), m.data(), v.data(),
                                 par);
    BatchNormLeakyBackward<float>(p, dy.data(), x.data(), g.data(), b.data(), m.data(), v.data(),
                                  dx.data(), dg.data(), db.data(), par);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), m.begin(), m.end());
    y.insert(y.end(), v.begin(), v.end());
    y.insert(y.end(), dg.begin(), dg.end());
    y.insert(y.end(), db.begin(), db.end());
    return y;
  };
  const auto one = run(SerialParallel());
  for (int t : {2, 3, 7}) EXPECT_TRUE(test::SameBits(run(ThreadParallel(t)), one)) << t;
}

TEST(FusedBatchNormLeakyTest, EmptyRowsGiveNanStatistics) {
  BatchNormLeakyParams p;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({0, 4, 3}, {3}, {3}, &p));
  std::vector<float> g(3, 1.0f), b(3, 0.0f), m(3), v(3);
  BatchNormLeakyForward<float>(p, nullptr, g.data(), b.data(), nullptr, m.data(), v.data(),
                               SerialParallel());
  for (int c = 0; c < 3; ++c) EXPECT_TRUE(std::isnan(m[c]) && std::isnan(v[c]));
}

// inf and NaN: the exact answers, not what a pivot or the folded scale and shift would make.
TEST(FusedBatchNormLeakyTest, InfiniteValuesGiveTheExactAnswer) {
  const double inf = std::numeric_limits<double>::infinity();
  BatchNormLeakyParams p;
  p.alpha = 0.5f;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({3, 2}, {2}, {2}, &p));
  // Channel 0 starts with inf (the mean is inf, not inf - inf = NaN; the variance is NaN);
  // channel 1 is finite with gamma = inf: z = xhat * inf + beta is +-inf, and 0 where xhat is 0
  // times inf (NaN), never the NaN of x * inf + (beta - mean * inf).
  const std::vector<double> x = {inf, 1.0, 2.0, 3.0, 5.0, 2.0};
  const std::vector<double> gamma = {1.0, inf}, beta = {0.0, 1.0};
  std::vector<double> y(6), m(2), v(2);
  BatchNormLeakyForward<double>(p, x.data(), gamma.data(), beta.data(), y.data(), m.data(),
                                v.data(), SerialParallel());
  EXPECT_EQ(m[0], inf);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_DOUBLE_EQ(m[1], 2.0);
  EXPECT_EQ(y[1], -inf * 0.5);    // x = 1 < mean: xhat < 0
  EXPECT_EQ(y[3], inf);           // x = 3 > mean
  EXPECT_TRUE(std::isnan(y[5]));  // x = mean: 0 x inf
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(std::isnan(y[2 * r]));
  // The gradient takes the same unfolded form: dx = inf x a finite sum, not inf - inf.
  const std::vector<double> dy = {0.0, 1.0, 0.0, 2.0, 0.0, -1.0};
  std::vector<double> dx(6), dg(2), db(2);
  BatchNormLeakyBackward<double>(p, dy.data(), x.data(), gamma.data(), beta.data(), m.data(),
                                 v.data(), dx.data(), dg.data(), db.data(), SerialParallel());
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(std::isinf(dx[2 * r + 1]) || std::isnan(dx[2 * r + 1]));
  EXPECT_TRUE(std::isinf(dx[1]));
}

TEST(FusedBatchNormLeakyTest, Validation) {
  BatchNormLeakyParams p;
  EXPECT_TRUE(
      Contains(ValidateBatchNormLeaky({}, {1}, {1}, &p).message(), "x must be at least 1-D"));
  EXPECT_TRUE(Contains(ValidateBatchNormLeaky({2, 3}, {2}, {3}, &p).message(),
                       "FusedBatchNormLeakyRelu: scale must be [3]"));
  EXPECT_TRUE(
      Contains(ValidateBatchNormLeaky({2, 3}, {3}, {3, 1}, &p).message(), "offset must be [3]"));
  EXPECT_TRUE(
      Contains(ValidateBatchNormLeakyGrad({2, 4}, {2, 3}, {3}, {3}, {3}, {3}, &p).message(),
               "FusedBatchNormLeakyReluGrad: grad must be the shape of x, [2, 3], got [2, 4]"));
  EXPECT_TRUE(Contains(ValidateBatchNormLeakyGrad({2, 3}, {2, 3}, {3}, {3}, {2}, {3}, &p).message(),
                       "batch_mean must be the shape of scale"));
  p.epsilon = 0.0f;
  EXPECT_TRUE(Contains(ValidateBatchNormLeaky({2, 3}, {3}, {3}, &p).message(),
                       "epsilon must be finite and > 0"));
}

}  // namespace
}  // namespace opforge
