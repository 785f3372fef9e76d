// The FusedBatchNormLeakyRelu CUDA kernels against the CPU kernels: the same bits (NaN matching
// any NaN) for the statistics, the output and the three gradients, in every element type, over
// rows that span many chunks, one row, an empty batch, alphas 0 and 0.2, and special values.
// Without a CUDA device every test says "skipped: no CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/fused_batch_norm_leaky_relu/fused_batch_norm_leaky_relu.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::Download;
using test::FloatTypes;
using test::SameBitsOrBothNan;
using test::Sync;
using test::TypeNames;
using test::Upload;

template <typename T>
class BatchNormLeakyCudaTest : public ::testing::Test {};
TYPED_TEST_SUITE(BatchNormLeakyCudaTest, FloatTypes, TypeNames);

template <typename T>
void CheckCase(int64_t rows, int64_t ch, float alpha, bool specials, unsigned seed) {
  using U = BnParamType<T>;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.3f, 1.7f);
  std::vector<T> x(static_cast<size_t>(rows * ch)), dy(x.size());
  for (auto& v : x) v = static_cast<T>(normal(rng));
  for (auto& v : dy) v = static_cast<T>(normal(rng));
  if (specials && x.size() > 8) {
    x[3] = static_cast<T>(std::numeric_limits<float>::infinity());
    x[5] = static_cast<T>(std::numeric_limits<float>::quiet_NaN());
    dy[7] = static_cast<T>(-std::numeric_limits<float>::infinity());
  }
  std::vector<U> gamma(static_cast<size_t>(ch)), beta(static_cast<size_t>(ch));
  for (auto& v : gamma) v = static_cast<U>(1.0f + 0.2f * normal(rng));
  for (auto& v : beta) v = static_cast<U>(0.3f * normal(rng));
  BatchNormLeakyParams p;
  p.alpha = alpha;
  OPFORGE_ASSERT_OK(ValidateBatchNormLeaky({rows, ch}, {ch}, {ch}, &p));

  std::vector<T> y(x.size()), dx(x.size());
  std::vector<U> mean(gamma.size()), var(gamma.size()), dg(gamma.size()), db(gamma.size());
  BatchNormLeakyForward<T>(p, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                           var.data(), SerialParallel());
  BatchNormLeakyBackward<T>(p, dy.data(), x.data(), gamma.data(), beta.data(), mean.data(),
                            var.data(), dx.data(), dg.data(), db.data(), SerialParallel());

  DeviceBuffer d_x, d_dy, d_gamma, d_beta, d_y, d_mean, d_var, d_dx, d_dg, d_db;
  ASSERT_NO_FATAL_FAILURE(Upload(x, &d_x));
  ASSERT_NO_FATAL_FAILURE(Upload(dy, &d_dy));
  ASSERT_NO_FATAL_FAILURE(Upload(gamma, &d_gamma));
  ASSERT_NO_FATAL_FAILURE(Upload(beta, &d_beta));
  OPFORGE_ASSERT_CUDA(d_y.Allocate(x.size() * sizeof(T)));
  OPFORGE_ASSERT_CUDA(d_dx.Allocate(x.size() * sizeof(T)));
  for (DeviceBuffer* b : {&d_mean, &d_var, &d_dg, &d_db}) {
    OPFORGE_ASSERT_CUDA(b->Allocate(gamma.size() * sizeof(U)));
  }
  cudaStream_t stream;
  OPFORGE_ASSERT_CUDA(cudaStreamCreate(&stream));
  OPFORGE_ASSERT_OK(BatchNormLeakyForwardGpu(DTypeOf<T>::value, p, d_x.get(), d_gamma.get(),
                                             d_beta.get(), d_y.get(), d_mean.get(), d_var.get(),
                                             stream));
  // The gradient from the GPU's own statistics (equal to the CPU's when the forward passes).
  OPFORGE_ASSERT_OK(BatchNormLeakyBackwardGpu(
      DTypeOf<T>::value, p, d_dy.get(), d_x.get(), d_gamma.get(), d_beta.get(), d_mean.get(),
      d_var.get(), d_dx.get(), d_dg.get(), d_db.get(), stream));
  OPFORGE_ASSERT_CUDA(cudaStreamSynchronize(stream));
  OPFORGE_ASSERT_CUDA(cudaStreamDestroy(stream));
  std::vector<T> gy(x.size()), gdx(x.size());
  std::vector<U> gmean(gamma.size()), gvar(gamma.size()), gdg(gamma.size()), gdb(gamma.size());
  ASSERT_NO_FATAL_FAILURE(Download(d_y, &gy));
  ASSERT_NO_FATAL_FAILURE(Download(d_dx, &gdx));
  ASSERT_NO_FATAL_FAILURE(Download(d_mean, &gmean));
  ASSERT_NO_FATAL_FAILURE(Download(d_var, &gvar));
  ASSERT_NO_FATAL_FAILURE(Download(d_dg, &gdg));
  ASSERT_NO_FATAL_FAILURE(Download(d_db, &gdb));
  EXPECT_TRUE(SameBitsOrBothNan(gmean, mean)) << "batch_mean";
  EXPECT_TRUE(SameBitsOrBothNan(gvar, var)) << "batch_variance";
  EXPECT_TRUE(SameBitsOrBothNan(gy, y)) << "y";
  EXPECT_TRUE(SameBitsOrBothNan(gdx, dx)) << "dx";
  EXPECT_TRUE(SameBitsOrBothNan(gdg, dg)) << "dscale";
  EXPECT_TRUE(SameBitsOrBothNan(gdb, db)) << "doffset";
}

TYPED_TEST(BatchNormLeakyCudaTest, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  CheckCase<T>(3 * 256 + 17, 37, 0.2f, false, 1);  // rows across chunks, odd channels
  CheckCase<T>(2000, 300, 0.0f, false, 2);         // more channels than threads per block
  CheckCase<T>(1, 5, 0.1f, false, 3);              // one row: variance 0
  CheckCase<T>(600, 4, 0.1f, true, 4);             // inf and NaN
  CheckCase<T>(0, 6, 0.1f, false, 5);              // empty batch: NaN statistics
}

}  // namespace
}  // namespace opforge
