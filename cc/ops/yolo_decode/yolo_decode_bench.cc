// Google Benchmark of the YoloDecode core, no TensorFlow in the process: `make core-bench`.
// A YOLO-v3 head on a 416x416 input: batch 8, 3 anchors, 80 classes, one grid of 13, 26 or 52.
// Arguments: grid size, threads (ThreadParallel). Reports bytes read and written per second.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "common/bench_util.h"
#include "ops/yolo_decode/yolo_decode.h"

namespace opforge {
namespace {

constexpr int64_t kBatch = 8, kAnchors = 3, kClasses = 80, kInput = 416;

YoloDecodeParams Params(int64_t grid) {
  YoloDecodeParams p;
  p.num_classes = kClasses;
  p.input_size = {kInput, kInput};
  ValidateYoloDecode({kBatch, grid, grid, kAnchors * (5 + kClasses)}, {kAnchors, 2}, &p);
  return p;
}

// The yolov3 anchors of one scale, in pixels.
const std::vector<float> kAnchorsPx = {116, 90, 156, 198, 373, 326};

void BM_YoloDecodeForward(benchmark::State& state) {
  const YoloDecodeParams p = Params(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const int64_t n = p.batch * p.boxes_per_image();
  const auto features = bench::RandomFloats(n * (5 + kClasses), 7);
  std::vector<float> boxes(static_cast<size_t>(n * 4)), scores(static_cast<size_t>(n)),
      class_scores(static_cast<size_t>(n * kClasses));
  std::vector<int32_t> indices(static_cast<size_t>(n));
  const int64_t bytes = static_cast<int64_t>(sizeof(float)) * n * (5 + kClasses + 4 + 2 + kClasses);
  bench::Run(state, bytes, [&] {
    YoloDecodeForward<float>(p, features.data(), kAnchorsPx.data(), boxes.data(), scores.data(),
                             indices.data(), class_scores.data(), parallel);
  });
}

void BM_YoloDecodeBackward(benchmark::State& state) {
  const YoloDecodeParams p = Params(state.range(0));
  const ThreadParallel parallel(static_cast<int>(state.range(1)));
  const int64_t n = p.batch * p.boxes_per_image();
  const auto features = bench::RandomFloats(n * (5 + kClasses), 7);
  const auto grad_boxes = bench::RandomFloats(n * 4, 8);
  const auto grad_scores = bench::RandomFloats(n, 9);
  const auto grad_class_scores = bench::RandomFloats(n * kClasses, 10);
  std::vector<float> grad_features(features.size());
  const int64_t bytes =
      static_cast<int64_t>(sizeof(float)) * n * (2 * (5 + kClasses) + 4 + 1 + kClasses);
  bench::Run(state, bytes, [&] {
    YoloDecodeBackward<float>(p, grad_boxes.data(), grad_scores.data(), grad_class_scores.data(),
                              features.data(), kAnchorsPx.data(), grad_features.data(), parallel);
  });
}

void Grids(benchmark::internal::Benchmark* b) { bench::WithThreads(b, {13, 26, 52}); }

BENCHMARK(BM_YoloDecodeForward)->Apply(Grids);
BENCHMARK(BM_YoloDecodeBackward)->Apply(Grids);

}  // namespace
}  // namespace opforge
