"""Convolutions as direct sums over the taps that exist, in TensorFlow ops: the reference that is
exact when inputs hold inf or NaN.

TensorFlow's own convolutions (im2col, oneDNN, Winograd) multiply padding as 0 x value, so an
inf next to the border makes NaN where the exact answer is finite or inf. Here each tap adds
only the products of real pixels (a tap that reaches no pixel adds nothing), so the result is
the exact sum wherever IEEE arithmetic defines one. It is written in TensorFlow ops (slices,
products, sums, pads) so that TensorFlow's autodiff gives its exact gradients too. It is slow:
for tests on small shapes only.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import tensorflow as tf

IntOrSeq = Union[int, Sequence[int], None]


def _pair(value: IntOrSeq, channel_index: int = 3) -> Tuple[int, int]:
    """(height, width) of an int, 1, 2 or 4 ints (4 in the layout's order)."""
    if value is None:
        return 1, 1
    if isinstance(value, int):
        return value, value
    v = [int(x) for x in value]
    if len(v) == 1:
        return v[0], v[0]
    if len(v) == 2:
        return v[0], v[1]
    return (v[1], v[2]) if channel_index == 3 else (v[2], v[3])


def _pads(padding, size: int, window: int, stride: int, axis: int, out_size: int = None) -> Tuple[int, int]:
    """(before, after) padding of one spatial axis, as TensorFlow computes it."""
    if isinstance(padding, str):
        if padding == "VALID":
            return 0, 0
        out = -(-size // stride) if out_size is None else out_size
        total = max((out - 1) * stride + window - size, 0)
        return total // 2, total - total // 2
    pair = list(padding)[1 + axis]  # [[0, 0], [top, bottom], [left, right], [0, 0]] (NHWC)
    return int(pair[0]), int(pair[1])


def direct_conv2d(x, w, strides: IntOrSeq = 1, padding="VALID", dilations: IntOrSeq = 1,
                  same_out: Tuple[int, int] = None) -> tf.Tensor:
    """conv2d of x [N, H, W, Ci] with w [FH, FW, Ci, Co] (NHWC), as tf.nn.conv2d computes it but
    with padding contributing nothing. `padding`: "SAME", "VALID" or explicit [[0, 0], [t, b],
    [l, r], [0, 0]]. `same_out` gives the output size that SAME pads for (the transposed
    convolution's output size) instead of ceil(H / stride)."""
    x = tf.convert_to_tensor(x)
    w = tf.convert_to_tensor(w, dtype=x.dtype)
    n, h, wd, _ = x.shape
    fh, fw, _, co = w.shape
    sh, sw = _pair(strides)
    dh, dw = _pair(dilations)
    eh, ew = (fh - 1) * dh + 1, (fw - 1) * dw + 1
    top, bottom = _pads(padding, h, eh, sh, 0, same_out[0] if same_out else None)
    left, right = _pads(padding, wd, ew, sw, 1, same_out[1] if same_out else None)
    oh = (h + top + bottom - eh) // sh + 1
    ow = (wd + left + right - ew) // sw + 1
    out = tf.zeros([n, max(oh, 0), max(ow, 0), co], x.dtype)
    if oh <= 0 or ow <= 0:
        return out

    def valid(o_count, in_size, stride, offset):
        # The outputs o in [0, o_count) whose input index o * stride + offset is in [0, in_size).
        lo = max(0, -(-(-offset) // stride)) if offset < 0 else 0
        hi = min(o_count, (in_size - 1 - offset) // stride + 1) if in_size - 1 - offset >= 0 else 0
        return lo, hi

    for ky in range(fh):
        y0, y1 = valid(oh, h, sh, ky * dh - top)
        if y0 >= y1:
            continue
        for kx in range(fw):
            x0, x1 = valid(ow, wd, sw, kx * dw - left)
            if x0 >= x1:
                continue
            iy, ix = y0 * sh + ky * dh - top, x0 * sw + kx * dw - left
            patch = x[:, iy:iy + (y1 - y0 - 1) * sh + 1:sh, ix:ix + (x1 - x0 - 1) * sw + 1:sw, :]
            # Products of real pixels only, summed over the input channels.
            term = tf.reduce_sum(patch[..., :, None] * w[ky, kx][None, None, None], axis=-2)
            out = out + tf.pad(term, [[0, 0], [y0, oh - y1], [x0, ow - x1], [0, 0]])
    return out


def direct_conv2d_transpose(x, w, output_shape, strides: IntOrSeq = 1, padding="SAME",
                            data_format: str = "NHWC", dilations: IntOrSeq = None) -> tf.Tensor:
    """tf.nn.conv2d_transpose as direct sums: the gradient of `direct_conv2d` with respect to its
    input, of shape `output_shape` (4 values in data_format order or [height, width]); filter
    [FH, FW, out_channels, in_channels]."""
    x = tf.convert_to_tensor(x)
    w = tf.convert_to_tensor(w, dtype=x.dtype)
    channel_index = 1 if data_format == "NCHW" else 3
    if data_format == "NCHW":
        x = tf.transpose(x, [0, 2, 3, 1])
    sizes = [int(v) for v in (output_shape.numpy() if isinstance(output_shape, tf.Tensor) else output_shape)]
    if len(sizes) == 4:
        sizes = sizes[2:] if data_format == "NCHW" else sizes[1:3]
    strides2, dilations2 = _pair(strides, channel_index), _pair(dilations, channel_index)
    if not isinstance(padding, str) and data_format == "NCHW":
        p = list(padding)
        padding = [p[0], p[2], p[3], p[1]]
    z = tf.zeros([x.shape[0], sizes[0], sizes[1], w.shape[2]], x.dtype)
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = direct_conv2d(z, w, strides2, padding, dilations2, same_out=(x.shape[1], x.shape[2]))
    out = tape.gradient(y, z, output_gradients=x)
    return tf.transpose(out, [0, 3, 1, 2]) if data_format == "NCHW" else out


def explicit_or_string(padding) -> Union[str, List[List[int]]]:
    """A padding argument as direct_conv2d takes it."""
    return padding if isinstance(padding, str) else [list(map(int, p)) for p in padding]
