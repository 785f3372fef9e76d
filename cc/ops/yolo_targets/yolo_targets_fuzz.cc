// libFuzzer harness of the YoloTargets core, as yolo_targets_tf.cc calls it (see
// fuzz/fuzz_util.h), with the outputs' contract checked: every (cell, anchor) row is zero, or a
// box of the input with objectness 1 and its class. Bytes: mode (unused), dtype (float, double),
// flags (extra bit 0: boxes and classes drawn valid, not from the raw values; bit 1: num_classes
// attr from the bytes, not -1); num_scales 1 + Byte % 3; anchors_per_scale List(num_scales);
// anchor_masks List(sum of those); grid_sizes List(2 * num_scales); num_classes; Dims B, M, K;
// boxes ShapeOr([B, M, DimOr(4)]); classes ShapeOr([B, M]); anchors ShapeOr([K, DimOr(2)]); then
// the values.
#include <cmath>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/yolo_targets/yolo_targets.h"

namespace opforge {
namespace fuzz {
namespace {

constexpr const char* kOp = "YoloTargets";

template <typename T>
void Fuzz(Input& in, const FuzzFlags& flags) {
  YoloTargetsParams attrs;
  const int64_t num_scales = 1 + in.Byte() % 3;  // the attr is "int >= 1"
  attrs.anchors_per_scale = in.List(static_cast<size_t>(num_scales), [&](size_t) {
    const int64_t small = 1 + in.Byte() % 3;
    return in.IntOr(small);
  });
  int64_t total = 0;
  for (int64_t v : attrs.anchors_per_scale) total += v > 0 && v < 64 ? v : 1;
  attrs.anchor_masks = in.List(static_cast<size_t>(total), [&](size_t i) {
    const int64_t index = static_cast<int64_t>(i);
    return in.IntOr(index);
  });
  attrs.grid_sizes = in.List(static_cast<size_t>(2 * num_scales), [&](size_t) {
    const int64_t small = 1 + in.Byte() % 13;
    return in.IntOr(small);
  });
  attrs.num_classes = (flags.extra & 2) ? in.Int() : -1;
  Note("num_scales", num_scales);
  Note("anchors_per_scale", attrs.anchors_per_scale);
  Note("anchor_masks", attrs.anchor_masks);
  Note("grid_sizes", attrs.grid_sizes);
  Note("num_classes", attrs.num_classes);
  // The kernel's constructor.
  if (!Passed(ValidateYoloTargetsAttrs(attrs), {kOp})) return;
  if (num_scales != attrs.num_scales()) {
    CheckError(InvalidArgument(kOp, "num_scales",
                               "len(anchors_per_scale) = " + std::to_string(attrs.num_scales()),
                               num_scales),
               {kOp});
    return;
  }
  int64_t max_index = 0;
  for (int64_t v : attrs.anchor_masks) max_index = std::max(max_index, v);
  const int64_t k_hint =
      max_index < std::numeric_limits<int64_t>::max() ? max_index + 1 : max_index;
  const int64_t b = in.Dim(), m = in.Dim(), k = in.DimOr(k_hint);
  std::vector<int64_t> boxes = in.ShapeOr({b, m, in.DimOr(4)});
  std::vector<int64_t> classes = in.ShapeOr({b, m});
  std::vector<int64_t> anchors = in.ShapeOr({k, in.DimOr(2)});
  Input::Fix({&boxes, &classes, &anchors});
  Note("boxes", boxes);
  Note("classes", classes);
  Note("anchors", anchors);
  YoloTargetsParams p = attrs;
  if (!Passed(ValidateYoloTargets(boxes, classes, anchors, &p), {kOp})) return;
  if (!InputsPossible({&boxes, &classes, &anchors})) return;
  if (p.batch != boxes[0] || p.max_boxes != boxes[1] || p.num_anchors != anchors[0]) {
    Fail("params do not match the shapes");
  }
  Outputs outs;
  for (int64_t s = 0; s < p.num_scales(); ++s) outs.Add<T>("y_true", p.output_shape(s));
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({boxes, classes, anchors})) return;
  Tensor<T> tb(boxes), ta(anchors);
  Tensor<int32_t> tc(classes);
  if (flags.extra & 1) {  // valid rows (some padding), positive anchors, classes in range
    for (int64_t r = 0; r < tc.size(); ++r) {
      T* row = tb.data() + 4 * r;
      const uint8_t kind = in.ValueByte();
      if (kind < 0x20) {
        for (int j = 0; j < 4; ++j) row[j] = T(0);
      } else {
        const double x1 = in.ValueByte() / 256.0, y1 = in.ValueByte() / 256.0;
        row[0] = static_cast<T>(x1);
        row[1] = static_cast<T>(y1);
        row[2] = static_cast<T>(x1 + (1.0 - x1) * in.ValueByte() / 255.0);
        row[3] = static_cast<T>(y1 + (1.0 - y1) * in.ValueByte() / 255.0);
      }
      const int64_t nc = p.num_classes > 0 ? p.num_classes : 80;
      tc[r] = static_cast<int32_t>(in.ValueByte() % nc);
    }
    for (int64_t i = 0; i < ta.size(); ++i) ta[i] = static_cast<T>((1 + in.ValueByte()) / 256.0);
  } else {
    tb.Fill(in);
    tc.Fill(in);
    ta.Fill(in);
  }
  // The binding checks the values when there are boxes, then runs the kernel.
  if (p.max_boxes > 0) {
    const Status s = CheckYoloTargetsData<T>(p, tb.data(), tc.data(), ta.data());
    if (!Passed(s, {kOp})) return;
  }
  std::vector<T*> outputs;
  for (int64_t s = 0; s < p.num_scales(); ++s)
    outputs.push_back(outs.Get<T>(static_cast<size_t>(s)));
  outs.Run(flags, [&](const Parallel& parallel) {
    YoloTargets<T>(p, tb.data(), tc.data(), ta.data(), outputs, parallel);
  });
  // Every row of 6: all zero, or (x1, y1, x2, y2) of an input box, 1, its class.
  for (int64_t s = 0; s < p.num_scales(); ++s) {
    const T* y = outputs[static_cast<size_t>(s)];
    for (int64_t i = 0; i < outs.Count(static_cast<size_t>(s)); i += 6) {
      const T* row = y + i;
      if (row[4] == T(0)) {
        for (int j = 0; j < 6; ++j) {
          if (row[j] != T(0))
            Fail("y_true[%lld] row %lld: objectness 0 but not zero", (long long)s,
                 (long long)(i / 6));
        }
        continue;
      }
      if (row[4] != T(1))
        Fail("y_true[%lld] row %lld: objectness %g", (long long)s, (long long)(i / 6),
             double(row[4]));
      bool found = false;
      for (int64_t r = 0; r < tc.size() && !found; ++r) {
        const T* bx = tb.data() + 4 * r;
        found = bx[0] == row[0] && bx[1] == row[1] && bx[2] == row[2] && bx[3] == row[3] &&
                static_cast<T>(tc[r]) == row[5];
      }
      if (!found)
        Fail("y_true[%lld] row %lld: not a box of the input with its class", (long long)s,
             (long long)(i / 6));
    }
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge::fuzz;
  Input in(data, size);
  in.Byte();  // mode: one entry point
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  if (dtype % 2 == 0) {
    Note("T", "float32");
    Fuzz<float>(in, flags);
  } else {
    Note("T", "float64");
    Fuzz<double>(in, flags);
  }
  return 0;
}
