"""opforge.onnx: export to ONNX through tf2onnx, standard ops where an exact one exists, `opforge`
nodes elsewhere, and ONNX Runtime sessions.

Tolerances against TensorFlow (float32, ONNX Runtime's CPU provider): LeakyRelu, Mul and Clip
are exact (the same IEEE operation per element); Resize, Sigmoid * x, Conv and ConvTranspose
agree to ~1e-6 relative (another summation order / another exp). The tests that run `opforge`
nodes need opforge's ONNX Runtime library (`opforge.onnx.library_path()`) and skip without it.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
import tensorflow as tf

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")

import keras  # noqa: E402

import opforge  # noqa: E402
import opforge.models as M  # noqa: E402
import opforge.onnx as ox  # noqa: E402
from opforge import _export  # noqa: E402
from opforge.layers import (BilinearResize, ClippedIdentity, Conv2DTranspose, ConvBNLeaky, LeakyReLU,  # noqa: E402
                            Swish)

HAVE_ORT_LIBRARY = ox.library_path(must_exist=False).is_file()
needs_ort_library = pytest.mark.skipif(
    not HAVE_ORT_LIBRARY,
    reason=f"opforge's ONNX Runtime library {ox.ORT_LIBRARY_NAME} is not built (no ONNX Runtime adapter "
           "in this build: see `opforge doctor`), so models with opforge nodes cannot run")
RTOL = 1e-5  # resize, conv, sigmoid: ~1e-6 relative measured; a margin for other CPUs
BATCHES = (1, 4)


def _nodes(model):
    return [(n.domain, n.op_type) for n in model.graph.node]


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _run(path_or_model, *inputs):
    sess = ox.session(path_or_model, intra_op_num_threads=2)
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feed)


def _export_fn(fn, tmp_path, *specs, standard_ops=True, name="f.onnx"):
    return ox.export(tf.function(fn, input_signature=list(specs)), tmp_path / name, standard_ops=standard_ops)


@keras.saving.register_keras_serializable(package="opforge_tests")
class _MulBiasLeaky(keras.layers.Layer):
    """element_mul and bias_leaky_relu, which have no layer of their own."""

    def build(self, shape):
        self.scale = self.add_weight(shape=(shape[-1],), initializer=keras.initializers.RandomUniform(0.5, 1.5))
        self.bias = self.add_weight(shape=(shape[-1],), initializer=keras.initializers.RandomNormal(0, 0.3))

    def call(self, x):
        return opforge.ops.bias_leaky_relu(opforge.ops.element_mul(x, tf.reshape(self.scale, [1, 1, 1, -1])),
                                           self.bias, alpha=0.15)


def _standard_model():
    keras.utils.set_random_seed(3)
    x = keras.Input((8, 8, 3), name="image")
    y = keras.layers.Conv2D(8, 3, padding="same")(x)
    y = LeakyReLU(0.1)(y)
    y = BilinearResize(scale=2)(y)  # half_pixel
    y = BilinearResize(20, 20, align_corners=True, half_pixel_centers=False)(y)
    y = BilinearResize(24, 22, half_pixel_centers=False)(y)  # legacy: asymmetric
    y = Conv2DTranspose(6, 4, strides=2, padding="same")(y)
    y = Swish()(y)
    y = ClippedIdentity(-0.5, 0.5)(y)
    y = _MulBiasLeaky()(y)
    conv_bn = ConvBNLeaky(5, 3, alpha=0.1, name="conv_bn_leaky")  # named: unique in any process
    y = conv_bn(y)
    model = keras.Model(x, y, name="small")
    # Batch norm statistics that are not the identity, so the folding is exercised.
    kernel, gamma, beta, mean, var = conv_bn.get_weights()
    rng = np.random.default_rng(0)
    conv_bn.set_weights([kernel, gamma * 1.3, beta + 0.1, mean + rng.normal(0, 0.1, mean.shape).astype(np.float32),
                         var * 1.7])
    return model


@pytest.fixture(scope="module")
def standard(tmp_path_factory):
    """(model, path, proto): one small Keras model of every standard-mapped opforge layer."""
    model = _standard_model()
    path = tmp_path_factory.mktemp("onnx") / "small.onnx"
    return model, path, ox.export(model, path)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    """(detector, standard proto, all-custom proto): YOLO-v3-tiny (3 classes, 96x96) whose
    objectness bias makes detections exist."""
    keras.utils.set_random_seed(5)
    base = M.YoloV3Tiny(3, 96)
    for layer in base.layers:
        if isinstance(layer, keras.layers.Conv2D) and layer.filters == 3 * (5 + 3):
            kernel, bias = layer.get_weights()
            bias = bias.copy()
            bias[4::8] = 3.0  # objectness logits of the three anchors
            layer.set_weights([kernel * 0.1, bias])
    det = M.detector(base, 3, 96, score_threshold=0.05, max_detections=10)
    d = tmp_path_factory.mktemp("onnx_yolo")
    return base, det, ox.export(det, d / "det.onnx"), ox.export(det, d / "det_custom.onnx", standard_ops=False), d


# --- standard ops ---------------------------------------------------------------------------


def test_standard_export_is_standard_onnx_with_a_dynamic_batch(standard):
    _, path, proto = standard
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    types = {t for _, t in _nodes(proto)}
    assert all(domain == "" for domain, _ in _nodes(proto)), _nodes(proto)
    assert {"LeakyRelu", "Resize", "ConvTranspose", "Sigmoid", "Mul", "Clip", "Conv", "Add"} <= types, types
    assert ox.DOMAIN not in {o.domain for o in proto.opset_import}
    assert ox.custom_op_types(proto) == []
    (inp,) = proto.graph.input
    assert inp.name == "image"
    dims = inp.type.tensor_type.shape.dim
    assert dims[0].dim_param and not dims[0].dim_value  # the batch stays dynamic
    assert [d.dim_value for d in dims[1:]] == [8, 8, 3]
    assert [o.name for o in proto.graph.output] == ["conv_bn_leaky"]


def test_resize_modes_follow_the_tensorflow_flags(standard):
    modes = sorted(_attrs(n)["coordinate_transformation_mode"].decode()
                   for n in standard[2].graph.node if n.op_type == "Resize")
    assert modes == ["align_corners", "asymmetric", "half_pixel"]
    assert all(_attrs(n)["mode"] == b"linear" for n in standard[2].graph.node if n.op_type == "Resize")


@pytest.mark.parametrize("batch", BATCHES)
def test_standard_export_runs_in_plain_onnxruntime_as_tensorflow(standard, batch):
    model, path, _ = standard
    x = np.random.default_rng(batch).standard_normal((batch, 8, 8, 3)).astype(np.float32)
    expected = model(x, training=False).numpy()
    (got,) = _run(path, x)
    assert got.shape == expected.shape == (batch, 48, 44, 5)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * np.abs(expected).max())


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 3.4e38, -3.4e38], np.float32)


def _values(shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    flat = x.reshape(-1)
    flat[: SPECIALS.size] = SPECIALS
    return x


EXACT = {
    "leaky_relu": (lambda x: opforge.ops.leaky_relu(x, alpha=0.2), "LeakyRelu"),
    "leaky_relu alpha>1": (lambda x: opforge.ops.leaky_relu(x, alpha=1.5), "LeakyRelu"),
    "element_mul": (lambda x: opforge.ops.element_mul(x, tf.constant([0.5, -2.0, 3.0], tf.float32)), "Mul"),
    "clipped_identity": (lambda x: opforge.ops.clipped_identity(x, -0.3, 0.7), "Clip"),
}


@pytest.mark.parametrize("case", list(EXACT))
def test_elementwise_ops_are_exact(case, tmp_path):
    fn, onnx_op = EXACT[case]
    proto = _export_fn(fn, tmp_path, tf.TensorSpec([None, 5, 3], tf.float32, name="x"))
    assert onnx_op in {t for _, t in _nodes(proto)} and ox.custom_op_types(proto) == []
    for batch in BATCHES:
        x = _values((batch, 5, 3), batch)
        (got,) = _run(tmp_path / "f.onnx", x)
        np.testing.assert_array_equal(got, fn(tf.constant(x)).numpy())


def test_swish_and_bias_leaky_relu(tmp_path):
    def fn(x):
        return opforge.ops.swish(x), opforge.ops.bias_leaky_relu(x, tf.constant([0.1, -0.2, 0.3]), alpha=0.1)

    proto = _export_fn(fn, tmp_path, tf.TensorSpec([None, 5, 3], tf.float32, name="x"))
    assert {"Sigmoid", "Mul", "Add", "LeakyRelu"} <= {t for _, t in _nodes(proto)}
    for batch in BATCHES:
        x = np.random.default_rng(batch).standard_normal((batch, 5, 3)).astype(np.float32) * 4
        got = _run(tmp_path / "f.onnx", x)
        # ONNX Runtime's Sigmoid is MLAS's approximation: ~5e-6 relative off Eigen's logistic.
        for g, e in zip(got, fn(tf.constant(x))):
            np.testing.assert_allclose(g, e.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flags", [dict(), dict(align_corners=True), dict(half_pixel_centers=True)],
                         ids=["legacy", "align_corners", "half_pixel"])
@pytest.mark.parametrize("size", [(13, 7), (3, 2), (1, 1)], ids=["up", "down", "to-1x1"])
def test_resize_bilinear_modes(flags, size, tmp_path):
    fn = lambda x: opforge.ops.resize_bilinear(x, list(size), **flags)  # noqa: E731
    _export_fn(fn, tmp_path, tf.TensorSpec([None, 5, 4, 2], tf.float32, name="x"))
    for batch in BATCHES:
        x = np.random.default_rng(batch).uniform(-10, 10, (batch, 5, 4, 2)).astype(np.float32)
        (got,) = _run(tmp_path / "f.onnx", x)
        np.testing.assert_allclose(got, fn(tf.constant(x)).numpy(), rtol=1e-6, atol=1e-5)


def test_resize_the_tf_image_resize_drop_in(tmp_path):
    fn = lambda x: opforge.ops.resize(x, [9, 7])  # noqa: E731
    proto = _export_fn(fn, tmp_path, tf.TensorSpec([None, 5, 4, 2], tf.float32, name="x"))
    assert ox.custom_op_types(proto) == []
    (resize,) = [n for n in proto.graph.node if n.op_type == "Resize"]
    assert _attrs(resize)["coordinate_transformation_mode"] == b"half_pixel"
    x = np.random.default_rng(0).uniform(-10, 10, (4, 5, 4, 2)).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "f.onnx", x)[0], fn(tf.constant(x)).numpy(), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("case", [
    dict(shape=[None, 5, 6, 3], out=(10, 12), strides=2, padding="SAME", k=4),
    dict(shape=[None, 5, 6, 3], out=(9, 11), strides=2, padding="SAME", k=3),
    dict(shape=[None, 5, 6, 3], out=(11, 13), strides=2, padding="VALID", k=3),  # the minimal VALID size
    dict(shape=[None, 5, 6, 3], out=(12, 14), strides=2, padding="VALID", k=3),  # one past it: zero row
    dict(shape=[None, 5, 6, 3], out=(10, 13), strides=2, padding=[[0, 0], [2, 0], [0, 1], [0, 0]], k=3),
    dict(shape=[None, 5, 6, 3], out=(10, 12), strides=2, padding="SAME", k=1),  # kernel < stride
    dict(shape=[None, None, None, 3], out=None, strides=2, padding="SAME", k=4),  # sizes unknown when traced
], ids=["same-k4", "same-k3-odd", "valid", "valid-bigger", "explicit", "same-k1", "dynamic"])
def test_conv2d_transpose_paddings(case, tmp_path):
    k, s = case["k"], case["strides"]
    filters = tf.constant(np.random.default_rng(1).standard_normal((k, k, 4, 3)).astype(np.float32))

    def fn(x):
        out = case["out"] if case["out"] is not None else 2 * tf.shape(x)[1:3]
        return opforge.ops.conv2d_transpose(x, filters, out, s, case["padding"])

    proto = _export_fn(fn, tmp_path, tf.TensorSpec(case["shape"], tf.float32, name="x"))
    assert "ConvTranspose" in {t for _, t in _nodes(proto)} and ox.custom_op_types(proto) == []
    for batch in BATCHES:
        x = np.random.default_rng(batch).standard_normal((batch, 5, 6, 3)).astype(np.float32)
        (got,) = _run(tmp_path / "f.onnx", x)
        expected = fn(tf.constant(x)).numpy()
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_fused_conv_is_conv_and_leaky_relu(tmp_path):
    w = tf.constant(np.random.default_rng(2).standard_normal((3, 3, 3, 4)).astype(np.float32))
    b = tf.constant([0.1, -0.1, 0.2, 0.0])

    def fn(x):
        return opforge.ops.fused_conv2d_bias_leaky_relu(x, w, b, 1, "SAME", alpha=0.1)

    proto = _export_fn(fn, tmp_path, tf.TensorSpec([None, 6, 6, 3], tf.float32, name="x"))
    assert {"Conv", "LeakyRelu"} <= {t for _, t in _nodes(proto)} and ox.custom_op_types(proto) == []
    x = np.random.default_rng(0).standard_normal((4, 6, 6, 3)).astype(np.float32)
    (got,) = _run(tmp_path / "f.onnx", x)
    np.testing.assert_allclose(got, fn(tf.constant(x)).numpy(), rtol=1e-5, atol=1e-5)


def test_a_tf_function_traced_before_export_is_retraced_with_standard_ops(tmp_path):
    fn = tf.function(lambda x: opforge.ops.leaky_relu(x, 0.3), input_signature=[tf.TensorSpec([None], tf.float32)])
    fn(tf.ones([2]))  # a trace with the opforge op exists
    assert ox.custom_op_types(ox.export(fn, tmp_path / "a.onnx")) == []
    assert ox.custom_op_types(ox.export(fn, tmp_path / "b.onnx", standard_ops=False)) == ["LeakyRelu"]
    with pytest.raises(TypeError, match="ConcreteFunction"):
        ox.export(fn.get_concrete_function(), tmp_path / "c.onnx")
    with pytest.raises(ValueError, match="input_signature"):
        ox.export(lambda x: x, tmp_path / "d.onnx")


# --- the switch -----------------------------------------------------------------------------


def test_standard_ops_switch_is_per_thread_nests_and_restores():
    assert not _export.standard_ops_enabled()
    seen = []
    with _export.standard_ops():
        assert _export.standard_ops_enabled()
        t = threading.Thread(target=lambda: seen.append(_export.standard_ops_enabled()))
        t.start()
        t.join()
        with _export.standard_ops(False):
            assert not _export.standard_ops_enabled()
        assert _export.standard_ops_enabled()
        # Eager calls inside the switch give the same values.
        x = tf.constant([-1.0, 2.0])
        np.testing.assert_array_equal(opforge.ops.leaky_relu(x, 0.2).numpy(), np.float32([-0.2, 2.0]))
    assert seen == [False]
    assert not _export.standard_ops_enabled()
    with pytest.raises(RuntimeError):
        with _export.standard_ops():
            raise RuntimeError
    assert not _export.standard_ops_enabled()


# --- opforge nodes --------------------------------------------------------------------------


def test_standard_ops_false_writes_every_opforge_op_as_an_opforge_node(standard, tmp_path):
    model, _, _ = standard
    proto = ox.export(model, tmp_path / "custom.onnx", standard_ops=False)
    onnx.checker.check_model(proto, full_check=False)
    assert (ox.DOMAIN, ox.DOMAIN_VERSION) in {(o.domain, o.version) for o in proto.opset_import}
    types = ox.custom_op_types(proto)
    assert {"LeakyRelu", "ResizeBilinear", "Conv2DTranspose", "Swish", "ClippedIdentity", "ElementMul",
            "BiasLeakyRelu"} <= set(types), types
    by_type = {}
    for n in proto.graph.node:
        if n.domain == ox.DOMAIN:
            by_type.setdefault(n.op_type, []).append(_attrs(n))
    for attrs in sum(by_type.values(), []):
        assert not {"T", "U", "Tshape"} & set(attrs), attrs
    assert by_type["LeakyRelu"] == [{"alpha": pytest.approx(0.1)}]
    assert by_type["ClippedIdentity"] == [{"clip_min": -0.5, "clip_max": 0.5, "leak": pytest.approx(0.01)}]
    assert sorted((a["align_corners"], a["half_pixel_centers"]) for a in by_type["ResizeBilinear"]) == \
        [(0, 0), (0, 1), (1, 0)]
    (ct,) = by_type["Conv2DTranspose"]
    assert ct == {"strides": [1, 2, 2, 1], "padding": b"SAME", "explicit_paddings": [], "data_format": b"NHWC",
                  "dilations": [1, 1, 1, 1]}
    (ct_node,) = [n for n in proto.graph.node if n.op_type == "Conv2DTranspose"]
    assert len(ct_node.input) == 3  # input, filter, output_shape
    # The int32 inputs stay int32 (the resize sizes, the transposed convolution's output shape).
    inits = {t.name: t for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type in ("ResizeBilinear", "Conv2DTranspose") and n.input[-1] in inits:
            assert inits[n.input[-1]].data_type == onnx.TensorProto.INT32, n.op_type
    assert by_type["BiasLeakyRelu"] == [{"alpha": pytest.approx(0.15)}]


def test_detector_exports_a_yolo_postprocess_node_with_its_attributes(detector):
    _, _, standard_proto, custom_proto, _ = detector
    for proto in (standard_proto, custom_proto):
        onnx.checker.check_model(proto, full_check=False)
        (post,) = [n for n in proto.graph.node if n.op_type == "YoloPostprocess"]
        assert post.domain == ox.DOMAIN
        assert _attrs(post) == {"num_scales": 2, "num_classes": 3, "input_size": [96, 96], "scale_x_y": 1.0,
                                "max_log_scale": float("inf"), "pad_per_class": 0, "clip_boxes": 1}
        # 5 scalars first (ONNX's variadic input goes last: opforge.onnx.onnx_input_order), then 2 maps
        # and 2 anchor tables
        assert len(post.input) == 9
        inits = {t.name: t for t in proto.graph.initializer}
        dtypes = [inits[i].data_type for i in post.input[:5]]
        assert dtypes == [onnx.TensorProto.INT32] * 2 + [onnx.TensorProto.FLOAT] * 3
        assert [int(onnx.numpy_helper.to_array(inits[i])) for i in post.input[:2]] == [100, 10]
        assert all(i in inits for i in post.input[7:9])  # the anchors are constants
        dims = proto.graph.input[0].type.tensor_type.shape.dim
        assert dims[0].dim_param and [d.dim_value for d in dims[1:]] == [96, 96, 3]
        assert len(proto.graph.output) == 4
    assert ox.custom_op_types(standard_proto) == ["YoloPostprocess"]
    assert ox.custom_op_types(custom_proto) == ["Conv2DTranspose", "LeakyRelu", "YoloPostprocess"]


@pytest.mark.parametrize("batch", BATCHES)
def test_detector_backbone_runs_in_plain_onnxruntime(detector, batch):
    base, _, _, _, d = detector
    ox.export(base, d / "base.onnx")
    x = np.random.default_rng(batch).uniform(0, 1, (batch, 96, 96, 3)).astype(np.float32)
    got = _run(d / "base.onnx", x)
    for g, e in zip(got, base(x, training=False)):
        np.testing.assert_allclose(g, e.numpy(), rtol=RTOL, atol=RTOL * np.abs(e.numpy()).max())


def test_the_other_ops_become_opforge_nodes_with_their_attributes(tmp_path):
    anchors = tf.constant([[10.0, 14.0], [23.0, 27.0], [37.0, 58.0]])

    def fn(features, mfcc, boxes, scores):
        decoded = opforge.ops.yolo_decode(features, anchors, 2, [64, 64], box_format="center_xywh", normalized=False)
        nms = opforge.ops.combined_non_max_suppression(boxes, scores, 5, 7, 0.4, 0.1, clip_boxes=False)
        mel = opforge.ops.mfcc_to_mel(mfcc, n_mels=16, norm=None, lifter=2.0)
        y, mean, var = opforge.ops.fused_batch_norm_leaky_relu(features, tf.ones([21]), tf.zeros([21]), alpha=0.1)
        return decoded.boxes, nms.valid_detections, mel, y

    proto = _export_fn(fn, tmp_path, tf.TensorSpec([None, 2, 2, 21], tf.float32, name="features"),
                       tf.TensorSpec([None, 8, 5], tf.float32, name="mfcc"),
                       tf.TensorSpec([None, 6, 1, 4], tf.float32, name="boxes"),
                       tf.TensorSpec([None, 6, 3], tf.float32, name="scores"))
    onnx.checker.check_model(proto, full_check=False)
    nodes = {n.op_type: n for n in proto.graph.node if n.domain == ox.DOMAIN}
    assert set(nodes) == {"YoloDecode", "CombinedNonMaxSuppression", "MfccToMel", "FusedBatchNormLeakyRelu"}
    assert _attrs(nodes["YoloDecode"]) == {"num_classes": 2, "input_size": [64, 64], "box_format": b"center_xywh",
                                           "normalized": 0, "scale_x_y": 1.0, "max_log_scale": float("inf")}
    assert _attrs(nodes["CombinedNonMaxSuppression"]) == {"pad_per_class": 0, "clip_boxes": 0}
    assert len(nodes["CombinedNonMaxSuppression"].input) == 7
    mel = _attrs(nodes["MfccToMel"])
    assert mel["n_mels"] == 16 and mel["dct_type"] == 2 and mel["lifter"] == 2.0 and isinstance(mel["norm"], bytes)
    assert _attrs(nodes["FusedBatchNormLeakyRelu"]) == {"epsilon": pytest.approx(1e-3), "alpha": pytest.approx(0.1)}


# --- sessions -------------------------------------------------------------------------------


def test_session_options_and_providers(standard):
    _, path, _ = standard
    sess = ox.session(path, providers=["CPUExecutionProvider"], intra_op_num_threads=1)
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(TypeError, match="no_such_option"):
        ox.session(path, no_such_option=3)


def test_a_model_of_standard_ops_needs_no_library(standard, monkeypatch):
    def absent(must_exist=True):
        raise AssertionError("the library was asked for")

    monkeypatch.setattr(ox, "library_path", absent)
    x = np.zeros((1, 8, 8, 3), np.float32)
    assert _run(standard[1], x)[0].shape == (1, 48, 44, 5)


@pytest.mark.skipif(HAVE_ORT_LIBRARY, reason="the ORT library is installed: the missing-library error cannot occur")
def test_opforge_nodes_without_the_library_say_so(detector):
    with pytest.raises(ox.OrtLibraryError, match="opforge doctor"):
        ox.session(detector[2])


def test_ops_the_library_lacks_are_named_with_the_opforge_version(detector, monkeypatch, tmp_path):
    fake = tmp_path / ox.ORT_LIBRARY_NAME
    fake.write_bytes(b"")
    monkeypatch.setattr(ox, "library_path", lambda must_exist=True: fake)
    monkeypatch.setattr(ox, "_library_op_types", lambda path: {"LeakyRelu", "Conv2DTranspose"})
    with pytest.raises(ox.MissingOpsError) as info:
        ox.session(detector[3])
    message = str(info.value)
    assert "opforge.YoloPostprocess" in message and f"opforge {opforge.__version__}" in message
    assert "opforge.LeakyRelu" not in message and "opforge.Conv2DTranspose" not in message


@needs_ort_library
@pytest.mark.parametrize("batch", BATCHES)
def test_detector_runs_in_onnxruntime_with_the_library(detector, batch):
    _, det, _, _, d = detector
    x = np.random.default_rng(batch).uniform(0, 1, (batch, 96, 96, 3)).astype(np.float32)
    expected = [t.numpy() for t in det(x, training=False)]
    assert expected[3].min() > 0  # detections exist
    for name in ("det.onnx", "det_custom.onnx"):
        got = _run(d / name, x)
        np.testing.assert_array_equal(got[3], expected[3])  # detection counts
        np.testing.assert_array_equal(got[2], expected[2])  # classes
        np.testing.assert_allclose(got[0], expected[0], rtol=0, atol=1e-5)  # boxes
        np.testing.assert_allclose(got[1], expected[1], rtol=0, atol=1e-6)  # scores


def test_tensorflow_ops_tf2onnx_cannot_map_are_named(tmp_path):
    def fn(x):
        return tf.raw_ops.LeakyReluGrad(gradients=x, features=x, alpha=0.2)

    with pytest.raises(ox.ExportError, match="LeakyReluGrad"):
        _export_fn(fn, tmp_path, tf.TensorSpec([None], tf.float32, name="x"))
