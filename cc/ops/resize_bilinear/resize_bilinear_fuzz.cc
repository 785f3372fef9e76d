// libFuzzer harness of the ResizeBilinear core (forward and gradient), as resize_bilinear_tf.cc
// calls it (see fuzz/fuzz_util.h). Bytes: mode (0 ResizeBilinear, 1 ResizeBilinearGrad), dtype
// (forward: int8, uint8, int16, uint16, int32, int64, half, bfloat16, float, double; gradient:
// half, bfloat16, float, double), flags (extra bits 0, 1: align_corners, half_pixel_centers);
// forward: images Shape(4), size's shape ShapeOr([2]) and its int32 values (Int each); gradient:
// grads Shape(4), original_image [DimOr(batch), Dim, Dim, DimOr(channels)]; then the values.
#include <vector>

#include "fuzz/fuzz_util.h"
#include "ops/resize_bilinear/resize_bilinear.h"

namespace opforge {
namespace fuzz {
namespace {

template <typename T>
void Forward(Input& in, const FuzzFlags& flags, bool align, bool half) {
  std::vector<int64_t> images = in.Shape(4);
  std::vector<int64_t> size_shape = in.ShapeOr({2});
  Input::Fix({&images, &size_shape});
  // The size tensor's values (int32), however many it has; a huge one is not built.
  int64_t count = 0;
  if (!TfShapeOk(size_shape, &count) || count > 16) return;
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t& v : values) v = static_cast<int32_t>(in.Int());
  Note("images", images);
  Note("size", size_shape);
  Note("size_values", values);
  ResizeBilinearParams p;
  if (!Passed(ValidateResizeBilinear(images, size_shape, values, align, half, &p),
              {"ResizeBilinear"})) {
    return;
  }
  if (!InputsPossible({&images, &size_shape})) return;
  const std::vector<int64_t> out = {p.batch, p.out_height, p.out_width, p.channels};
  if (std::vector<int64_t>{p.batch, p.in_height, p.in_width, p.channels} != images) {
    Fail("params do not match the images' shape");
  }
  Outputs outs;
  outs.Add<float>("resized_images", out);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({images})) return;
  Tensor<T> x(images);
  x.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    ResizeBilinearForward<T>(p, x.data(), outs.Get<float>(0), parallel);
  });
}

template <typename T>
void Backward(Input& in, const FuzzFlags& flags, bool align, bool half) {
  std::vector<int64_t> grads = in.Shape(4);
  const int64_t b = grads.size() == 4 ? grads[0] : 1, c = grads.size() == 4 ? grads[3] : 1;
  const int64_t h = in.Dim(), w = in.Dim();
  std::vector<int64_t> original = in.ShapeOr({in.DimOr(b), h, w, in.DimOr(c)});
  Input::Fix({&grads, &original});
  Note("grads", grads);
  Note("original_image", original);
  ResizeBilinearParams p;
  if (!Passed(ValidateResizeBilinearGrad(grads, original, align, half, &p),
              {"ResizeBilinearGrad"})) {
    return;
  }
  if (!InputsPossible({&grads, &original})) return;
  if (std::vector<int64_t>{p.batch, p.out_height, p.out_width, p.channels} != grads ||
      std::vector<int64_t>{p.batch, p.in_height, p.in_width, p.channels} != original) {
    Fail("params do not match the shapes of grads and original_image");
  }
  Outputs outs;
  outs.Add<T>("output", original);
  if (!outs.Small() || !outs.AnyNonEmpty() || !SmallEnough({grads, original})) return;
  Tensor<float> g(grads);
  g.Fill(in);
  outs.Run(flags, [&](const Parallel& parallel) {
    ResizeBilinearBackward<T>(p, g.data(), outs.Get<T>(0), parallel);
  });
}

}  // namespace
}  // namespace fuzz
}  // namespace opforge

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace opforge;
  using namespace opforge::fuzz;
  Input in(data, size);
  const int mode = in.Byte() % 2;
  const uint8_t dtype = in.Byte();
  const FuzzFlags flags(in.Byte());
  const bool align = (flags.extra & 1) != 0, half = (flags.extra & 2) != 0;
  Note("mode", mode);
  Note("align_corners", align);
  Note("half_pixel_centers", half);
  // The kernel's constructor.
  if (!Passed(ValidateResizeBilinearAttrs(mode == 0 ? "ResizeBilinear" : "ResizeBilinearGrad",
                                          align, half),
              {mode == 0 ? "ResizeBilinear" : "ResizeBilinearGrad"})) {
    return 0;
  }
  if (mode == 1) {
    WithFloatType(dtype, [&](auto t) {
      using T = decltype(t);
      Note("T", TypeName<T>());
      Backward<T>(in, flags, align, half);
    });
    return 0;
  }
  auto run = [&](auto t) {
    using T = decltype(t);
    Note("T", TypeName<T>());
    Forward<T>(in, flags, align, half);
  };
  switch (dtype % 10) {
    case 0:
      run(int8_t());
      break;
    case 1:
      run(uint8_t());
      break;
    case 2:
      run(int16_t());
      break;
    case 3:
      run(uint16_t());
      break;
    case 4:
      run(int32_t());
      break;
    case 5:
      run(int64_t());
      break;
    default:
      WithFloatType(dtype % 10 - 6, run);
  }
  return 0;
}
