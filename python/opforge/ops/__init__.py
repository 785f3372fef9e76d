"""opforge's ops. Each wrapper mirrors the TensorFlow function it replaces (same argument names
and defaults), so switching is a one-word change. Importing this module registers the
gradients; the C++ library itself is loaded on the first call."""
from opforge.ops.conv2d_transpose import conv2d_transpose
from opforge.ops.element_mul import element_mul
from opforge.ops.leaky_relu import leaky_relu, leaky_relu_grad, leaky_relu_with_mask
from opforge.ops.resize_bilinear import resize_bilinear, resize_bilinear_grad

# Every op the C++ library registers (checked against the library by the tests).
OP_NAMES = (
    "Opforge>LeakyRelu",
    "Opforge>LeakyReluWithMask",
    "Opforge>LeakyReluGrad",
    "Opforge>ElementMul",
    "Opforge>ElementMulGrad",
    "Opforge>ResizeBilinear",
    "Opforge>ResizeBilinearGrad",
    "Opforge>Conv2DTranspose",
    "Opforge>Conv2DTransposeInputGrad",
    "Opforge>Conv2DTransposeFilterGrad",
)

__all__ = [
    "OP_NAMES",
    "conv2d_transpose",
    "element_mul",
    "leaky_relu",
    "leaky_relu_grad",
    "leaky_relu_with_mask",
    "resize_bilinear",
    "resize_bilinear_grad",
]
