// Google Benchmark of the YoloTargets core, no TensorFlow in the process: `make core-bench`.
// YOLO-v3 training targets: batch 8, up to 100 boxes per image (a fifth of them padding), 9
// anchors over three scales (grids 13, 26, 52). Arguments: boxes, threads (ThreadParallel).
// Reports the bytes of the outputs written per second (the zeroing dominates).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/bench_util.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {
namespace {

void BM_YoloTargets(benchmark::State& state) {
  YoloTargetsParams p;
  p.anchor_masks = {6, 7, 8, 3, 4, 5, 0, 1, 2};
  p.anchors_per_scale = {3, 3, 3};
  p.grid_sizes = {13, 13, 26, 26, 52, 52};
  p.num_classes = 80;
  const int64_t batch = 8, max_boxes = state.range(0);
  ValidateYoloTargets({batch, max_boxes, 4}, {batch, max_boxes}, {9, 2}, &p);
  const ThreadParallel parallel(static_cast<int>(state.range(1)));

  // The yolov3 anchors, normalised to a 416 input.
  std::vector<float> anchors = {10, 13, 16,  30,  33, 23,  30,  61,  62,
                                45, 59, 119, 116, 90, 156, 198, 373, 326};
  for (float& a : anchors) a /= 416.0f;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f), size(0.01f, 0.5f);
  std::uniform_int_distribution<int32_t> cls(0, 79);
  std::vector<float> boxes;
  std::vector<int32_t> classes;
  for (int64_t r = 0; r < batch * max_boxes; ++r) {
    const bool padding = r % max_boxes >= max_boxes * 4 / 5;
    const float x1 = unit(rng) * 0.5f, y1 = unit(rng) * 0.5f;
    for (float v : {x1, y1, x1 + size(rng), y1 + size(rng)}) boxes.push_back(padding ? 0.0f : v);
    classes.push_back(cls(rng));
  }

  std::vector<std::vector<float>> outputs;
  std::vector<float*> pointers;
  int64_t bytes = 0;
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    outputs.emplace_back(static_cast<size_t>(bench::NumElements(p.output_shape(s))));
    bytes += static_cast<int64_t>(outputs.back().size() * sizeof(float));
  }
  for (auto& o : outputs) pointers.push_back(o.data());
  bench::Run(state, bytes, [&] {
    YoloTargets<float>(p, boxes.data(), classes.data(), anchors.data(), pointers, parallel);
  });
}

BENCHMARK(BM_YoloTargets)->Apply([](benchmark::internal::Benchmark* b) {
  bench::WithThreads(b, {100});
});

}  // namespace
}  // namespace opforge
