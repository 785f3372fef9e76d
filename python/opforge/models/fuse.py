"""Rewriting trained Keras models onto opforge's fused ops: `fold_batch_norm(model)` turns every
Conv2D -> BatchNormalization -> LeakyReLU chain into one `opforge.layers.ConvBNLeaky`."""
from __future__ import annotations

from opforge._keras import require_keras3

require_keras3("opforge.models.fuse")

from typing import Dict, List, Optional

import keras  # noqa: E402
import numpy as np

__all__ = ["fold_batch_norm", "find_conv_bn_leaky_chains", "transfer_weights"]


def _leaky_slope(layer) -> Optional[float]:
    """The negative slope of a LeakyReLU layer (Keras's, opforge's, or the tf twin of the YOLO
    models), or None for any other layer."""
    from opforge.layers import LeakyReLU as OpforgeLeakyReLU

    kinds = [keras.layers.LeakyReLU, OpforgeLeakyReLU]
    try:
        from opforge.models.yolov3 import TfLeakyReLU

        kinds.append(TfLeakyReLU)
    except ImportError:  # pragma: no cover
        pass
    if type(layer) in kinds:
        return float(layer.negative_slope)
    return None


def _consumers(model) -> Dict[int, List]:
    """id(tensor) -> the graph nodes that take it as an input."""
    out: Dict[int, List] = {}
    for nodes in model._nodes_by_depth.values():
        for node in nodes:
            if node.operation is None or node.is_input:
                continue
            for t in node.input_tensors:
                out.setdefault(id(t), []).append(node)
    return out


def find_conv_bn_leaky_chains(model: keras.Model) -> List[tuple]:
    """The (conv, batch_norm, leaky) layer triples of a Functional model that fold_batch_norm
    fuses: a Conv2D (channels last, one group, no activation, 'same' or 'valid') whose only
    consumer is a BatchNormalization over the last axis, whose only consumer is a LeakyReLU with a
    slope >= 0, each layer used once and no intermediate tensor a model output."""
    if not hasattr(model, "_nodes_by_depth"):
        raise ValueError("opforge.models.fuse: a Functional keras.Model is needed (Sequential models work too; "
                         f"got {type(model).__name__}, a subclassed model: build it with fused=True instead)")
    consumers = _consumers(model)
    outputs = {id(t) for t in model.outputs}
    chains = []
    for nodes in model._nodes_by_depth.values():
        for node in nodes:
            conv = node.operation
            if type(conv) is not keras.layers.Conv2D or len(conv._inbound_nodes) != 1:
                continue
            if (conv.data_format != "channels_last" or conv.groups != 1 or conv.padding not in ("same", "valid")
                    or conv.activation not in (keras.activations.linear, None)):
                continue
            (z,) = node.outputs
            nxt = consumers.get(id(z), [])
            if len(nxt) != 1 or id(z) in outputs:
                continue
            bn = nxt[0].operation
            if type(bn) is not keras.layers.BatchNormalization or len(bn._inbound_nodes) != 1:
                continue
            if bn.axis not in (-1, 3) and bn.axis != [3] and bn.axis != [-1]:
                continue
            (n,) = nxt[0].outputs
            after = consumers.get(id(n), [])
            if len(after) != 1 or id(n) in outputs:
                continue
            leaky = after[0].operation
            slope = _leaky_slope(leaky)
            if slope is None or slope < 0 or len(leaky._inbound_nodes) != 1:
                continue
            chains.append((conv, bn, leaky))
    return chains


def _fused_layer(conv, bn, leaky):
    from opforge.layers import ConvBNLeaky

    layer = ConvBNLeaky(conv.filters, conv.kernel_size, strides=conv.strides, padding=conv.padding,
                        alpha=_leaky_slope(leaky), momentum=float(bn.momentum), epsilon=float(bn.epsilon),
                        dilation_rate=conv.dilation_rate, kernel_regularizer=conv.kernel_regularizer,
                        name=conv.name, dtype=conv.dtype_policy)
    layer.build(conv.input.shape)
    kernel = conv.kernel.numpy()
    channels = conv.filters
    gamma = bn.gamma.numpy() if bn.scale else np.ones(channels, np.float32)
    beta = bn.beta.numpy() if bn.center else np.zeros(channels, np.float32)
    mean = bn.moving_mean.numpy()
    if conv.use_bias:
        # BN(conv + b) normalises conv + b - mean: the bias moves into the mean (inference).
        mean = mean - conv.bias.numpy().astype(mean.dtype)
    layer.set_weights([kernel, gamma, beta, mean, bn.moving_variance.numpy()])
    return layer


def fold_batch_norm(model: keras.Model) -> keras.Model:
    """A copy of a trained Functional (or Sequential) model with every Conv2D -> BatchNormalization
    -> LeakyReLU chain (Keras's or opforge's LeakyReLU) replaced by one
    `opforge.layers.ConvBNLeaky` carrying the same weights: at inference the batch norm is folded
    into the convolution and the chain runs as one `fused_conv2d_bias_leaky_relu`; training the
    copy trains the same variables with the fused training ops. Other layers are shared with the
    original model (not copied). Predictions equal the original's within float rounding (the
    folded kernel rounds once more). The result saves to `.keras` and SavedModel like any model
    with opforge layers."""
    chains = find_conv_bn_leaky_chains(model)
    replace = {}
    identity = {}
    for conv, bn, leaky in chains:
        replace[id(conv)] = _fused_layer(conv, bn, leaky)
        identity[id(bn)] = identity[id(leaky)] = True

    def passthrough(x, *args, **kwargs):
        return x

    def operation_fn(op):
        if id(op) in replace:
            fused = replace[id(op)]
            return lambda x, *args, **kwargs: fused(x)
        if id(op) in identity:
            return passthrough
        return op

    inputs = [keras.Input(batch_shape=t.shape, dtype=t.dtype, name=t.name.split(":")[0]) for t in model.inputs]
    outputs = model._run_through_graph(inputs if len(inputs) > 1 else inputs[0], operation_fn=operation_fn)
    return keras.Model(inputs if len(inputs) > 1 else inputs[0], outputs, name=model.name)


def _blocks(model) -> Dict[str, list]:
    """Layer name -> its variables, with a Conv2D -> BatchNormalization -> LeakyReLU chain as one
    entry under the convolution's name (kernel, gamma, beta, moving mean, moving variance, as a
    ConvBNLeaky holds them)."""
    from opforge.layers import ConvBNLeaky

    out: Dict[str, list] = {}
    in_chain = set()
    if hasattr(model, "_nodes_by_depth"):
        for conv, bn, _ in find_conv_bn_leaky_chains(model):
            if not conv.use_bias and bn.scale and bn.center:
                out[conv.name] = [conv.kernel, bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance]
                in_chain |= {id(conv), id(bn)}
    for layer in model.layers:
        if id(layer) in in_chain or not layer.weights:
            continue
        if isinstance(layer, ConvBNLeaky):
            out[layer.name] = [layer.kernel, layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance]
        else:
            out[layer.name] = list(layer.weights)
    return out


def transfer_weights(source: keras.Model, target: keras.Model) -> None:
    """Copies the weights of `source` into `target` by layer name, where one model has
    ConvBNLeaky layers and the other the unfused Conv2D -> BatchNormalization -> LeakyReLU chains
    (a ConvBNLeaky takes the variables of the chain whose Conv2D has its name: YOLO's conv_k and
    bn_k, or fold_batch_norm's copies). `set_weights(get_weights())` does not do this between the
    two: a model's flat weight list follows its layer order, which differs where branches
    interleave. Raises ValueError for a layer of `target` that `source` lacks or whose variable
    shapes differ."""
    src, dst = _blocks(source), _blocks(target)
    for name, variables in dst.items():
        if name not in src:
            raise ValueError(f"opforge.models.fuse.transfer_weights: source has no layer (or block) named {name!r}")
        values = src[name]
        if [tuple(v.shape) for v in values] != [tuple(v.shape) for v in variables]:
            raise ValueError(f"opforge.models.fuse.transfer_weights: {name!r} has variables of shapes "
                             f"{[tuple(v.shape) for v in values]} in source, {[tuple(v.shape) for v in variables]} "
                             "in target")
        for v, value in zip(variables, values):
            v.assign(value)
