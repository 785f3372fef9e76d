"""How each op runs under `jax.vmap`: a batching rule per op, never JAX's implicit default.

An op call is `apply(target, inputs, attrs, rule=...)`: the handler's call
(`opforge.jax._ffi.call`) wrapped in `jax.custom_batching.custom_vmap`, whose rule is one of:

- `ELEMENTWISE`: inputs of one shape, element by element (leaky_relu, swish, their gradients):
  unbatched inputs are broadcast, the mapped axis is one more leading axis. One call.
- `Leading(data)`: the op takes any number of leading batch axes on its `data` inputs (the
  audio ops' `[..., n, T]`, bias_leaky_relu's `[..., C]`): the mapped axis is one more. One call.
  Where another input (a bias, filters) is mapped, each element is its own call (`lax.map`).
- `Fold(data)`: the op has one batch axis, the first, on its `data` inputs, and every output is
  per batch element (a convolution's output, a decode): the mapped axis is merged into it
  ([V, N, ...] -> [V * N, ...]) and split again in the outputs. One call.
- `Broadcasting(expand)`: NumPy broadcasting between the inputs (element_mul): ranks aligned
  with size-1 axes so the mapped axis broadcasts as a leading one; `expand` broadcasts it into
  every input (the gradient, whose per-input sums must stay per element). One call.
- `SEQUENTIAL`: each element of the mapped axis its own call, through `lax.map`: for ops whose
  results mix the batch (a batch norm's statistics, gradients summed over the batch such as a
  filter's), or whose draws depend on the whole shape (Griffin-Lim's seeded phases).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from opforge.jax import _ffi


class Rule:
    def __call__(self, run: Callable, axis_size: int, batched: Sequence[bool], inputs: Sequence[Any]):
        raise NotImplementedError


def _sequential(run, axis_size, batched, inputs):
    mapped = [x for x, b in zip(inputs, batched) if b]

    def one(xs):
        it = iter(xs)
        return run([next(it) if b else x for x, b in zip(inputs, batched)])

    out = jax.lax.map(one, mapped)
    return out, [True] * len(out)


class _Sequential(Rule):
    def __call__(self, run, axis_size, batched, inputs):
        return _sequential(run, axis_size, batched, inputs)


def _broadcast(x, axis_size):
    return jnp.broadcast_to(x[None], (axis_size,) + tuple(x.shape))


class _Elementwise(Rule):
    def __call__(self, run, axis_size, batched, inputs):
        xs = [x if b else _broadcast(x, axis_size) for x, b in zip(inputs, batched)]
        out = run(xs)
        return out, [True] * len(out)


@dataclass(frozen=True)
class Leading(Rule):
    data: Tuple[int, ...]

    def __call__(self, run, axis_size, batched, inputs):
        if any(b for i, b in enumerate(batched) if i not in self.data):
            return _sequential(run, axis_size, batched, inputs)
        xs = [_broadcast(x, axis_size) if i in self.data and not b else x
              for i, (x, b) in enumerate(zip(inputs, batched))]
        out = run(xs)
        return out, [True] * len(out)


@dataclass(frozen=True)
class Fold(Rule):
    data: Tuple[int, ...]

    def __call__(self, run, axis_size, batched, inputs):
        if any(b for i, b in enumerate(batched) if i not in self.data):
            return _sequential(run, axis_size, batched, inputs)
        xs = []
        for i, (x, b) in enumerate(zip(inputs, batched)):
            if i in self.data:
                x = x if b else _broadcast(x, axis_size)
                x = x.reshape((axis_size * x.shape[1],) + tuple(x.shape[2:]))
            xs.append(x)
        first = inputs[self.data[0]]
        n = first.shape[1] if batched[self.data[0]] else first.shape[0]  # the batch of one element
        out = run(xs)
        return [y.reshape((axis_size, n) + tuple(y.shape[1:])) for y in out], [True] * len(out)


@dataclass(frozen=True)
class Broadcasting(Rule):
    expand: bool = False

    def __call__(self, run, axis_size, batched, inputs):
        rank = max(x.ndim - (1 if b else 0) for x, b in zip(inputs, batched))
        xs = []
        for x, b in zip(inputs, batched):
            shape = tuple(x.shape[1:]) if b else tuple(x.shape)
            x = x.reshape((axis_size if b else 1,) + (1,) * (rank - len(shape)) + shape)
            if self.expand and not b:
                x = jnp.broadcast_to(x, (axis_size,) + tuple(x.shape[1:]))
            xs.append(x)
        out = run(xs)
        if self.expand:  # each output has its input's shape: drop the alignment axes
            out = [y.reshape((axis_size,) + tuple(x.shape[1:] if b else x.shape))
                   for y, x, b in zip(out, inputs[1:], batched[1:])]
        else:
            out = [jnp.broadcast_to(y, (axis_size,) + tuple(y.shape[1:])) for y in out]
        return out, [True] * len(out)


ELEMENTWISE = _Elementwise()
SEQUENTIAL = _Sequential()


def _remap(rule: Rule, free: Sequence[int]) -> Rule:
    """`rule` over the inputs left after the closed-over ones are taken out (`free`)."""
    if isinstance(rule, (Fold, Leading)):
        return type(rule)(tuple(free.index(i) for i in rule.data if i in free))
    return rule


def apply(target: str, inputs: Sequence[Any], attrs: Mapping[str, Any], rule: Rule, dtype=None,
          concrete: Mapping[int, str] = {}) -> Tuple[jax.Array, ...]:
    """Every output of the handler of `target` on `inputs`, batched under jax.vmap by `rule`
    (given over all inputs). The inputs whose values the op reads (`concrete`, by position) are
    closed over as NumPy constants, never batched: custom_vmap traces its function with abstract
    arguments, so an input passed through it would be a tracer inside even when it is a constant.
    One of them that is a tracer stays an argument, for `_ffi.call` to name it."""
    dtype = np.dtype(dtype if dtype is not None else inputs[0].dtype)
    closed = {i: np.asarray(inputs[i]) for i in concrete if _ffi.is_concrete(inputs[i])}
    free = [i for i in range(len(inputs)) if i not in closed]
    return _call(target, [inputs[i] for i in free], closed, len(inputs), dict(attrs), _remap(rule, free), dtype,
                 dict(concrete))


def _call(target, xs, closed, count, attrs, rule, dtype, concrete):
    def full(ys):
        it = iter(ys)
        return [closed[i] if i in closed else next(it) for i in range(count)]

    def run(ys):  # a batched call is itself batchable (nested vmaps)
        return _call(target, ys, closed, count, attrs, rule, dtype, concrete)

    @jax.custom_batching.custom_vmap
    def op(*ys):
        return _ffi.call(target, full(ys), attrs, dtype, concrete)

    @op.def_vmap
    def _rule(axis_size, in_batched, *ys):
        out, out_batched = rule(run, axis_size, in_batched, ys)
        return tuple(out), tuple(out_batched)

    return tuple(op(*xs))
