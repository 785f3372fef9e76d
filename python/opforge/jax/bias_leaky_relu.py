"""opforge.jax's bias_leaky_relu: the handler of `Opforge>BiasLeakyRelu` (opforge.ops.bias_leaky_relu's
kernel); its gradient is `Opforge>LeakyReluGrad` on the output and that summed over all but the last
axis, as the TensorFlow gradient composes them. The sum adds in tf.reduce_sum's order
(`tf_sum_leading`, also the fused convolution's bias gradient), so the bits are TensorFlow's."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi
from opforge.jax._batching import Leading, apply
from opforge.jax._checks import FLOAT_DTYPES, array, check_dtype, message, number

__all__ = ["bias_leaky_relu"]

_OP = "BiasLeakyRelu"
# The integer dtypes tf.nn.bias_add takes on the CPU; tf.nn.leaky_relu then casts to float32.
INT_DTYPES = tuple(np.dtype(d) for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                                         np.uint64))
# features [..., C] takes any number of leading axes; a mapped bias is one call per element.
_LEADING = Leading((0,))


def alpha_value(op: str, alpha) -> float:
    """alpha as the TensorFlow wrapper takes it: a number, finite and >= 0."""
    value = number(op, "alpha", alpha, "a number >= 0")
    if not np.isfinite(value) or value < 0 or abs(value) > 3.4e38:
        raise ValueError(message(op, "alpha", "finite and >= 0", repr(alpha)))
    return value


# --- TensorFlow's tf.reduce_sum over all but the last axis, bit for bit ------------------------------
#
# The TensorFlow gradients sum the bias gradient with tf.reduce_sum, whose order of additions is
# Eigen's (TensorFlow's ReductionHelper collapses the tensor to [rows, C]; Eigen reduces the first
# axis). JAX's own reductions add in another order (XLA splits long ones into a tree), so the
# order is written out here, as TensorFlow's CPU build runs it (AVX: 32-byte packets, 16-byte for
# half):
# - C > 1, a column sum: the channels in whole packets ([0, C // P * P)) sum their rows in four
#   interleaved accumulators where rows >= 16 (Eigen's InnerMostDimPreserver), joined
#   ((a0 + a1) + a2) + a3 before the rows left over after the last multiple of four; the other
#   channels, and every channel below 16 rows, one after another from 0.
# - C == 1, a full sum (Eigen's InnerMostDimReducer): halves split at packet boundaries above
#   P * leaf values, leaves summed in packets (four accumulators where they make four packets),
#   the packet's lanes added pairwise, the tail one by one. Eigen shares a full sum of more than
#   ~10^5 values among its threads, an order that depends on TensorFlow's thread pool: there
#   the bits may differ.
# - bfloat16 sums in float32 and rounds once (TensorFlow's casting specialization).

_PACKET = {np.dtype(np.float64): 4, np.dtype(np.float32): 8, np.dtype(np.float16): 8}
_LEAF = {np.dtype(np.float16): 200}


def _sequential(init, rows):
    """((init + rows[0]) + rows[1]) + ..., in that order (a loop XLA does not reassociate)."""
    if rows.shape[0] <= 16:
        for i in range(rows.shape[0]):
            init = init + rows[i]
        return init
    return jax.lax.scan(lambda acc, row: (acc + row, None), init, rows, unroll=8)[0]


def _column_sum(x, packet):
    rows, channels = x.shape
    whole = channels // packet * packet
    if rows < 16 or whole == 0:
        return _sequential(jnp.zeros((channels,), x.dtype), x)
    r4 = rows // 4 * 4

    def step(carry, block):  # block [4, C]: rows 4i .. 4i + 3
        lanes, rest = carry
        lanes = lanes + block[:, :whole]
        for k in range(4):
            rest = rest + block[k, whole:]
        return (lanes, rest), None

    init = (jnp.zeros((4, whole), x.dtype), jnp.zeros((channels - whole,), x.dtype))
    (lanes, rest), _ = jax.lax.scan(step, init, x[:r4].reshape(r4 // 4, 4, channels), unroll=4)
    acc = ((lanes[0] + lanes[1]) + lanes[2]) + lanes[3]
    acc = _sequential(acc, x[r4:, :whole])
    rest = _sequential(rest, x[r4:, whole:])
    return jnp.concatenate([acc, rest])


def _predux(p, dtype):
    """A packet's lanes added pairwise, halves first (Eigen's predux; half's in float32)."""
    if dtype == np.float16:
        return _predux(p.astype(np.float32), np.dtype(np.float32)).astype(np.float16)
    while p.shape[-1] > 1:
        h = p.shape[-1] // 2
        p = p[..., :h] + p[..., h:]
    return p[..., 0]


def _leaves(first, n, packet, leaf, out):
    """Eigen's split of a full sum into leaves: a tree of (first, n) with its leaves listed."""
    if n > packet * leaf:
        split = packet * -(-(first + -(-n // 2)) // packet)
        left = min(split - first, n)
        node = [_leaves(first, left, packet, leaf, out)]
        if left < n:
            node.append(_leaves(split, n - left, packet, leaf, out))
        return node
    out.append((first, n))
    return len(out) - 1


def _leaf_sums(x, n, firsts, packet):
    """Eigen's vectorized leaf sum of n values from each of `firsts`, all at once ([G])."""
    dtype = np.dtype(x.dtype)
    index = np.asarray(firsts)[:, None] + np.arange(n)[None, :]
    v = x[index]  # [G, n]
    g = len(firsts)
    start = 0
    pacc = jnp.zeros((g, packet), x.dtype)
    if n >= 4 * packet:
        v4 = n // (4 * packet) * (4 * packet)
        blocks = jnp.moveaxis(v[:, :v4].reshape(g, v4 // (4 * packet), 4, packet), 1, 0)
        accs = _sequential(jnp.zeros((g, 4, packet), x.dtype), blocks)
        pacc = ((accs[:, 0] + accs[:, 1]) + accs[:, 2]) + accs[:, 3]
        start = v4
    if start <= n - packet:
        vn = n // packet * packet
        pacc = _sequential(pacc, jnp.moveaxis(v[:, start:vn].reshape(g, (vn - start) // packet, packet), 1, 0))
        start = vn
    tail = _sequential(jnp.zeros((g,), x.dtype), jnp.moveaxis(v[:, start:], 1, 0))
    return tail + _predux(pacc, dtype)


def _full_sum(x, packet, leaf):
    leaves = []
    tree = _leaves(0, x.shape[0], packet, leaf, leaves)
    sums = [None] * len(leaves)
    by_size = {}
    for i, (first, n) in enumerate(leaves):
        by_size.setdefault(n, []).append(i)
    for n, members in by_size.items():
        values = _leaf_sums(x, n, [leaves[i][0] for i in members], packet)
        for k, i in enumerate(members):
            sums[i] = values[k]

    def join(node):
        if not isinstance(node, list):
            return sums[node]
        acc = jnp.zeros((), x.dtype)
        for child in node:  # accum = 0; accum += left; accum += right
            acc = acc + join(child)
        return acc

    if isinstance(tree, list):
        return join(tree)
    return sums[tree]


def tf_sum_leading(x):
    """tf.reduce_sum(x, axis=range(rank - 1)) with TensorFlow's bits on the CPU: [..., C] -> [C]."""
    if x.ndim <= 1:
        return x  # nothing to reduce: TensorFlow copies
    channels = x.shape[-1]
    rows = int(np.prod(x.shape[:-1]))
    if rows == 1:
        return x.reshape((channels,))  # only size-1 axes reduced: a copy
    if rows == 0 or channels == 0:
        return jnp.zeros((channels,), x.dtype)
    dtype = np.dtype(x.dtype)
    work = np.dtype(np.float32) if dtype == np.dtype(jnp.bfloat16) else dtype
    if work not in _PACKET:
        return jnp.sum(x, axis=tuple(range(x.ndim - 1)))  # not a float type TensorFlow's gradient sums
    packet = _PACKET[work]
    v = x.astype(work)
    if channels == 1:
        out = _full_sum(v.reshape((rows,)), packet, _LEAF.get(work, 1024)).reshape((1,))
    else:
        out = _column_sum(v.reshape((rows, channels)), packet)
    return out.astype(dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _bias_leaky_relu(features, bias, alpha):
    return apply("Opforge>BiasLeakyRelu", (features, bias), {"alpha": alpha}, _LEADING)[0]


def _fwd(features, bias, alpha):
    out = _bias_leaky_relu(features, bias, alpha)
    return out, out


def _bwd(alpha, out, g):
    from opforge.jax.leaky_relu import _leaky_relu_grad

    # alpha >= 0: the output's sign is the pre-activation's, so the output tells the slope.
    gz = _leaky_relu_grad(g, out, alpha)
    return gz, tf_sum_leading(gz)


_bias_leaky_relu.defvjp(_fwd, _bwd)


def integer_bias_leaky_relu(op: str, features: jax.Array, bias: jax.Array, alpha: float) -> jax.Array:
    """The chain on integers, as opforge.ops' integer_bias_leaky_relu: bias_add wrapping in the
    dtype, then opforge's leaky_relu, which casts to float32. The shapes are checked by the C++
    op's own Validate (the float kernel's, on the shapes alone): a ValueError with its message."""
    from opforge.jax.leaky_relu import leaky_relu

    _ffi.infer("Opforge>BiasLeakyRelu", (features, bias), {"alpha": alpha, "T": "float32"}, np.float32)
    return leaky_relu(features + bias, alpha=alpha)


def bias_leaky_relu(features, bias, alpha: float = 0.2) -> jax.Array:
    """opforge.ops.bias_leaky_relu in JAX: `leaky_relu(bias_add(features, bias), alpha)` in one
    pass (features [..., C], bias [C]), TensorFlow's bits. Integer features take TensorFlow's
    chain (the sum wraps in the dtype, the activation in float32). Gradients flow to features
    and bias (LeakyReluGrad on the output, and its sum over all but the last axis)."""
    features = array(_OP, "features", features)
    check_dtype(_OP, "features", features, FLOAT_DTYPES + INT_DTYPES)
    bias = array(_OP, "bias", bias, dtype=features.dtype)
    if bias.dtype != features.dtype:
        raise TypeError(message(_OP, "bias", f"the dtype of features ({np.dtype(features.dtype).name})",
                                np.dtype(bias.dtype).name))
    value = alpha_value(_OP, alpha)
    if np.dtype(features.dtype) in INT_DTYPES:
        return integer_bias_leaky_relu(_OP, features, bias, value)
    return _bias_leaky_relu(features, bias, value)
