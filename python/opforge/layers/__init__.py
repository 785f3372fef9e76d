"""Keras 3 layers built on opforge ops. Importing this module registers them as serializable
(package "opforge"), so `.keras` files that use them load after `import opforge.layers`."""
from opforge.layers.bilinear_resize import BilinearResize
from opforge.layers.conv2d_transpose import Conv2DTranspose
from opforge.layers.leaky_relu import LeakyReLU

__all__ = ["BilinearResize", "Conv2DTranspose", "LeakyReLU"]
