// The YoloTargets CUDA version against the CPU core (SerialParallel): the same bits in every
// output (the per-row maths is shared and only compares, halves, multiplies and floors; the GPU
// replaces the CPU's sequential overwrite by "the last row of an image on a cell and anchor
// writes"), and the same error message for every kind of bad data (the GPU checks on the device
// and builds the message from the copied-back row), on a non-blocking stream with scratch memory
// the caller provides, as the binding does. Without a CUDA device the GPU tests say "skipped: no
// CUDA device".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "common/cuda_test_util.h"
#include "common/dtype.h"
#include "common/parallel.h"
#include "common/status.h"
#include "common/test_util.h"
#include "ops/yolo_targets/yolo_targets.h"
#include "ops/yolo_targets/yolo_targets_test_data.h"

namespace opforge {
namespace {

using test::DeviceBuffer;
using test::DownloadOn;
using test::NumElements;
using test::SameBits;
using test::SyncStream;
using test::TestStream;
using test::UploadOn;

using test::yolo_targets::Case;
using test::yolo_targets::Data;
using test::yolo_targets::Describe;
using test::yolo_targets::RandomData;

YoloTargetsParams ParamsOf(const Case& c) {
  YoloTargetsParams p;
  const Status s = test::yolo_targets::ParamsOf(c, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  return p;
}

std::vector<Case> Cases() {
  return {
      {{{6, 7, 8}, {3, 4, 5}, {0, 1, 2}}, {13, 13, 26, 26, 52, 52}, 80, 8, 100, 9},
      {{{5, 6}, {2, 3, 4}, {0, 1}}, {5, 7, 10, 14, 20, 28}, -1, 3, 50, 9},
      {{{3, 4, 5}, {0, 1, 2}}, {8, 8, 16, 16}, 20, 5, 37, 6},
      {{{0}}, {1, 1}, 5, 2, 6, 1},
      {{{1, 1, 0}, {2}}, {3, 11, 7, 2}, 5, 3, 25, 3},
      // Many boxes in few cells: most rows are overwritten by later ones.
      {{{0, 1}, {2, 3}}, {2, 2, 3, 1}, 10, 4, 300, 4},
      // Empty: no boxes per image, or no images.
      {{{0, 1}}, {4, 4}, 10, 3, 0, 2},
      {{{0, 1}}, {4, 4}, 10, 0, 7, 2},
  };
}

// The CPU's outputs, or its error.
template <typename T>
Status Cpu(const YoloTargetsParams& p, const Data<T>& d, std::vector<std::vector<T>>* outputs) {
  if (p.max_boxes > 0) {
    OPFORGE_RETURN_IF_ERROR(
        CheckYoloTargetsData<T>(p, d.boxes.data(), d.classes.data(), d.anchors.data()));
  }
  *outputs = test::yolo_targets::Run(p, d, SerialParallel());
  return Status::Ok();
}

// The GPU's outputs (the buffers filled with 0xFF bytes first: everything must be overwritten),
// or its error. Everything on a non-blocking stream (as TensorFlow's), which alone is
// synchronised; the scratch memory is the caller's (the binding's allocate_temp), here filled
// with 0xFF bytes too, so that nothing may rely on its contents.
template <typename T>
void Gpu(const YoloTargetsParams& p, const Data<T>& d, Status* status,
         std::vector<std::vector<T>>* outputs) {
  TestStream stream;
  OPFORGE_ASSERT_CUDA(stream.Create());
  DeviceBuffer db, dc, da, scratch;
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), d.boxes, &db));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), d.classes, &dc));
  ASSERT_NO_FATAL_FAILURE(UploadOn(stream.get(), d.anchors, &da));
  const int64_t scratch_bytes = YoloTargetsGpuScratchBytes(p);
  OPFORGE_ASSERT_CUDA(scratch.Allocate(static_cast<size_t>(scratch_bytes)));
  if (scratch_bytes > 0) {
    OPFORGE_ASSERT_CUDA(
        cudaMemsetAsync(scratch.get(), 0xFF, static_cast<size_t>(scratch_bytes), stream.get()));
  }
  std::vector<DeviceBuffer> dout(static_cast<size_t>(p.num_scales()));
  std::vector<void*> pointers;
  outputs->clear();
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    const size_t n = static_cast<size_t>(NumElements(p.output_shape(s)));
    outputs->emplace_back(n);
    DeviceBuffer& b = dout[static_cast<size_t>(s)];
    OPFORGE_ASSERT_CUDA(b.Allocate(n * sizeof(T)));
    if (n > 0) OPFORGE_ASSERT_CUDA(cudaMemsetAsync(b.get(), 0xFF, n * sizeof(T), stream.get()));
    pointers.push_back(b.get());
  }
  *status = YoloTargetsGpu(DTypeOf<T>::value, p, db.get(), static_cast<const int32_t*>(dc.get()),
                           da.get(), pointers, scratch.get(), scratch_bytes, stream.get());
  ASSERT_NO_FATAL_FAILURE(SyncStream(stream.get()));
  if (!status->ok()) return;
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    ASSERT_NO_FATAL_FAILURE(DownloadOn(stream.get(), dout[static_cast<size_t>(s)],
                                       &(*outputs)[static_cast<size_t>(s)]));
  }
}

template <typename T>
class YoloTargetsCudaTest : public ::testing::Test {};
using TargetTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(YoloTargetsCudaTest, TargetTypes, test::TypeNames);

TYPED_TEST(YoloTargetsCudaTest, SameBitsAsCpu) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  uint64_t seed = 1;
  for (const Case& c : Cases()) {
    for (int repeat = 0; repeat < 3; ++repeat) {
      const YoloTargetsParams p = ParamsOf(c);
      const Data<T> d = RandomData<T>(c, seed++);
      std::vector<std::vector<T>> cpu, gpu;
      OPFORGE_ASSERT_OK(Cpu(p, d, &cpu));
      Status s;
      ASSERT_NO_FATAL_FAILURE(Gpu(p, d, &s, &gpu));
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(gpu.size(), cpu.size());
      for (size_t k = 0; k < cpu.size(); ++k) {
        EXPECT_TRUE(SameBits(gpu[k], cpu[k])) << Describe(c) << " scale " << k;
      }
    }
  }
}

// Every kind of bad row, at several places (with a second bad row after it): the GPU reports
// the first one with the CPU's message. Bad anchors too.
TYPED_TEST(YoloTargetsCudaTest, BadDataGivesTheCpuMessage) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  using T = TypeParam;
  const Case c = {{{0, 1}, {2}}, {4, 4, 8, 8}, 5, 4, 30, 3};
  const YoloTargetsParams p = ParamsOf(c);
  const Data<T> good = RandomData<T>(c, 5);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    std::vector<double> box;
    int32_t cls;
  };
  const std::vector<Bad> bad = {
      {{nan, 0.1, 0.2, 0.3}, 1},       {{0.1, 0.1, inf, 0.3}, 1},  {{0.1, -inf, 0.2, 0.3}, 1},
      {{0.5, 0.1, 0.4, 0.3}, 1},       {{0.1, 0.3, 0.2, 0.2}, 1},  {{0.1, 0.1, 1.02, 0.3}, 1},
      {{-0.02, 0.1, 0.2, 0.3}, 1},     {{0.1, 0.1, 0.2, 0.3}, -1}, {{0.1, 0.1, 0.2, 0.3}, 5},
      {{0.1, 0.1, 0.2, 0.3}, 1 << 30},
  };
  for (const Bad& b : bad) {
    for (int64_t r : {int64_t{0}, int64_t{37}, int64_t{119}}) {
      Data<T> d = good;
      for (int k = 0; k < 4; ++k)
        d.boxes[static_cast<size_t>(4 * r + k)] = static_cast<T>(b.box[k]);
      d.classes[static_cast<size_t>(r)] = b.cls;
      if (r + 1 < c.batch * c.max_boxes) {  // a later bad row, not reported
        d.boxes[static_cast<size_t>(4 * (r + 1))] = static_cast<T>(nan);
      }
      std::vector<std::vector<T>> cpu_out, gpu_out;
      const Status cpu = Cpu(p, d, &cpu_out);
      ASSERT_FALSE(cpu.ok());
      Status gpu;
      ASSERT_NO_FATAL_FAILURE(Gpu(p, d, &gpu, &gpu_out));
      ASSERT_FALSE(gpu.ok()) << cpu.message();
      EXPECT_EQ(gpu.code(), Status::Code::kInvalidArgument);
      EXPECT_EQ(gpu.message(), cpu.message());
    }
  }
  for (int64_t k = 0; k < c.num_anchors; ++k) {
    for (double v : {0.0, -0.25, nan, inf}) {
      Data<T> d = good;
      d.anchors[static_cast<size_t>(2 * k + 1)] = static_cast<T>(v);
      d.classes[3] = -1;  // a bad row too: the anchors are reported first, as on the CPU
      std::vector<std::vector<T>> cpu_out, gpu_out;
      const Status cpu = Cpu(p, d, &cpu_out);
      ASSERT_FALSE(cpu.ok());
      Status gpu;
      ASSERT_NO_FATAL_FAILURE(Gpu(p, d, &gpu, &gpu_out));
      ASSERT_FALSE(gpu.ok()) << cpu.message();
      EXPECT_EQ(gpu.message(), cpu.message());
    }
  }
}

TEST(YoloTargetsCuda, BadDTypeIsAnError) {
  OPFORGE_SKIP_WITHOUT_CUDA();
  const YoloTargetsParams p = ParamsOf(Cases()[3]);
  const Status s =
      YoloTargetsGpu(DType::kHalf, p, nullptr, nullptr, nullptr, {nullptr}, nullptr, 0, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(test::NamesWord(s.message(), "YoloTargets")) << s.message();
}

// The scratch memory: 8 bytes per row plus the masks and one, none without rows; too little is
// an error before anything runs (no GPU needed).
TEST(YoloTargetsCuda, ScratchIsTheCallersAndTooLittleIsAnError) {
  const Case c = Cases()[0];
  const YoloTargetsParams p = ParamsOf(c);
  const int64_t rows = c.batch * c.max_boxes;
  const int64_t need = YoloTargetsGpuScratchBytes(p);
  EXPECT_EQ(need, 8 * (1 + static_cast<int64_t>(p.anchor_masks.size()) + rows));
  EXPECT_EQ(YoloTargetsGpuScratchBytes(ParamsOf(Cases()[6])), 0);  // no boxes
  EXPECT_EQ(YoloTargetsGpuScratchBytes(ParamsOf(Cases()[7])), 0);  // no images
  std::vector<void*> outputs(static_cast<size_t>(p.num_scales()), nullptr);
  const Status s =
      YoloTargetsGpu(DType::kFloat, p, nullptr, nullptr, nullptr, outputs, nullptr, need, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(test::Contains(s.message(), std::to_string(need) + " bytes of scratch"))
      << s.message();
}

}  // namespace
}  // namespace opforge
