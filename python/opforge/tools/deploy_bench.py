"""`opforge bench deploy`: the YOLO-v3-tiny detector (with its post-processing) at batch 1 and 8
in ONNX Runtime and in LiteRT against TensorFlow (`tf.function`, jit off), and the
post-processing op (opforge's YoloPostprocess) alone in each runtime, timed interleaved in one
process; medians and ratios.

The detector: `opforge.models.YoloV3Tiny` (3 classes, `--size` pixels, 416 by default) with
random weights whose objectness bias makes detections exist (as tests/test_onnx_export.py's
fixture), followed by `opforge.layers.YoloPostprocess`. The candidates of each case:

- TensorFlow: a `tf.function` of the model (jit_compile=False), the input a tf.Tensor already;
- ONNX Runtime: `opforge.onnx.export(standard_ops=True)` (the network as standard ONNX ops, the
  post-processing as the `opforge.YoloPostprocess` node of libopforge_ort.so), in
  `opforge.onnx.session(intra_op_num_threads=T)`, `session.run` on a NumPy input;
- LiteRT: `opforge.lite.convert` (builtins, the post-processing a custom op run by
  libopforge_lite.so), `opforge.lite.interpreter(num_threads=T)` with its input resized to the
  batch; set_tensor, invoke, get_tensor of the four outputs.

T is TensorFlow's intra-op thread count (`--threads` sets it). The post-processing alone runs on
fixed head maps (the detector's own, captured at batch 1 and 8). The "floor" rows are what a
call of each runtime costs with (next to) nothing to do, on the same head maps as inputs: in
TensorFlow a tf.function returning `maps[0][0, 0, 0, 0] + 1`, in ONNX Runtime a model computing
the same (Slice + Add), in LiteRT the same (SLICE + ADD): the per-call overhead every case pays.

Before timing, each runtime's detections are checked against TensorFlow's: counts and each
image's classes equal, every detection matched by one of the same class with its box within 1e-4
and its score within 1e-5 (order-free: random weights give scores that tie to rounding, which
the runtimes' own convolutions may order otherwise); a mismatch is printed and the exit status
is 1.
A ratio above 1 means the runtime is faster than TensorFlow (ratio = TF's median / runtime's).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

CLASSES = 3
BATCHES = (1, 8)
SCORE_THRESHOLD = 0.3
MAX_DETECTIONS = 100
BOX_TOLERANCE, SCORE_TOLERANCE = 1e-4, 1e-5

Row = Dict[str, object]


# --- models ----------------------------------------------------------------------------------


def make_detector(size: int, seed: int = 5):
    """(the YOLO-v3-tiny base model, its detector, the post-processing layer): random weights,
    objectness bias 3 on the output convolutions so that detections exist."""
    import keras

    import opforge.models as M
    from opforge.layers import YoloPostprocess

    keras.utils.set_random_seed(seed)
    base = M.YoloV3Tiny(CLASSES, size)
    for layer in base.layers:
        if isinstance(layer, keras.layers.Conv2D) and layer.filters == 3 * (5 + CLASSES):
            kernel, bias = layer.get_weights()
            bias = bias.copy()
            bias[4::8] = 3.0  # objectness logits of the three anchors
            layer.set_weights([kernel * 0.1, bias])
    det = M.detector(base, CLASSES, size, score_threshold=SCORE_THRESHOLD, max_detections=MAX_DETECTIONS)
    post = next(layer for layer in det.layers if isinstance(layer, YoloPostprocess))
    return base, det, post


def _lite_runner(content: bytes, shapes: Sequence[Sequence[int]], threads: int):
    """(call(inputs) -> outputs in the signature's output order, output names) of a LiteRT
    interpreter of `content` with its inputs resized to `shapes`."""
    import opforge.lite

    it = opforge.lite.interpreter(model_content=content, num_threads=threads)
    # The signature's tensor indices (a SignatureRunner would hold references to the tensors,
    # which resize_tensor_input refuses).
    sig = next(iter(it._get_full_signature_list().values()))
    in_names, out_names = sorted(sig["inputs"]), sorted(sig["outputs"])
    in_index = [sig["inputs"][n] for n in in_names]
    out_index = [sig["outputs"][n] for n in out_names]
    for index, shape in zip(in_index, shapes):
        it.resize_tensor_input(index, list(shape))
    it.allocate_tensors()

    def call(inputs):
        for index, x in zip(in_index, inputs):
            it.set_tensor(index, x)
        it.invoke()
        return [it.get_tensor(i) for i in out_index]

    return call, out_names


def _detections(outputs) -> List[np.ndarray]:
    """(boxes, scores, classes, valid) as NumPy arrays: ONNX Runtime gives the model's order,
    `_lite_runner` the signature's outputs sorted by name (output_0..output_3), the same."""
    return [np.asarray(o) for o in outputs]


def _matched(got, expected, image: int, n: int) -> Tuple[float, float]:
    """(box, score): the largest distance from each of TensorFlow's detections of one image to
    the nearest of the runtime's of the same class. Order-free: detections whose scores tie to
    rounding (random weights give many) may come out in another order from another runtime's
    convolutions, so position-by-position boxes would differ where nothing is wrong."""
    box = score = 0.0
    for k in range(n):
        same = np.flatnonzero(got[2][image, :n] == expected[2][image, k])
        if not same.size:
            return float("inf"), float("inf")
        d = np.abs(got[0][image, same] - expected[0][image, k]).max(axis=1)
        j = same[int(np.argmin(d))]
        box = max(box, float(d.min()))
        score = max(score, float(abs(got[1][image, j] - expected[1][image, k])))
    return box, score


def _agree(got, expected) -> Tuple[bool, str]:
    """Whether a runtime's (boxes, scores, classes, valid) are TensorFlow's: the counts equal, the
    classes of each image equal as a multiset, and every detection matched by one of the same
    class within the tolerances."""
    got, expected = [np.asarray(g) for g in got], [np.asarray(e) for e in expected]
    counts = np.array_equal(got[3], expected[3])
    classes = counts and all(np.array_equal(np.sort(got[2][i, :n]), np.sort(expected[2][i, :n]))
                             for i, n in enumerate(expected[3]))
    box = score = 0.0
    if classes:
        for i, n in enumerate(expected[3]):
            b, s = _matched(got, expected, i, int(n))
            box, score = max(box, b), max(score, s)
    same = counts and classes and box <= BOX_TOLERANCE and score <= SCORE_TOLERANCE
    text = (f"{int(expected[3].sum())} detections; counts {'equal' if counts else 'DIFFERENT'}, classes "
            f"{'equal' if classes else 'DIFFERENT'}, boxes within {box:.1e}, scores within {score:.1e}")
    return same, text


# --- the cases -------------------------------------------------------------------------------


class Case:
    def __init__(self, name: str, candidates: Dict[str, Callable[[], object]], check: Optional[str] = None):
        self.name, self.candidates, self.check = name, candidates, check


def build_cases(size: int, threads: int, workdir: Path, log=print) -> Tuple[List[Case], List[str]]:
    """The timed cases, and the agreement failures (empty where every runtime agrees)."""
    import tensorflow as tf

    import opforge.lite
    import opforge.onnx

    base, det, post = make_detector(size)
    failures: List[str] = []
    cases: List[Case] = []
    rng = np.random.default_rng(0)
    images = {b: rng.uniform(0, 1, (b, size, size, 3)).astype(np.float32) for b in BATCHES}

    # The detector.
    tf_det = tf.function(lambda x: det(x, training=False), jit_compile=False)
    onnx_path = workdir / "detector.onnx"
    opforge.onnx.export(det, onnx_path, standard_ops=True)
    sess = opforge.onnx.session(onnx_path, intra_op_num_threads=threads)
    ort_in = sess.get_inputs()[0].name
    lite_det = opforge.lite.convert(det)
    for b in BATCHES:
        x_np, x_tf = images[b], tf.constant(images[b])
        expected = [t.numpy() for t in tf_det(x_tf)]
        lite_call, _ = _lite_runner(lite_det, [x_np.shape], threads)
        checks = []
        for runtime, outputs in (("ORT", _detections(sess.run(None, {ort_in: x_np}))),
                                 ("LiteRT", _detections(lite_call([x_np])))):
            same, text = _agree(outputs, expected)
            checks.append(f"{runtime}: {text}")
            if not same:
                failures.append(f"detector batch {b}, {runtime}: {text}")
        cases.append(Case(f"detector {size}px, batch {b}", {
            "tf": lambda x=x_tf: tf_det(x),
            "ort": lambda x=x_np: sess.run(None, {ort_in: x}),
            "lite": lambda x=x_np, call=lite_call: call([x]),
        }, "; ".join(checks)))

    # The post-processing alone, on the detector's head maps.
    tf_base = tf.function(lambda x: base(x, training=False), jit_compile=False)
    heads = {b: [t.numpy() for t in tf_base(tf.constant(images[b]))] for b in BATCHES}
    specs = [tf.TensorSpec([None, *h.shape[1:]], tf.float32, name=f"head_{i}") for i, h in enumerate(heads[1])]

    def postprocess(*maps):
        return post(list(maps))

    tf_post = tf.function(postprocess, input_signature=specs, jit_compile=False)
    post_path = workdir / "postprocess.onnx"
    opforge.onnx.export(tf.function(postprocess, input_signature=specs), post_path, standard_ops=True)
    post_model = __import__("onnx").load(str(post_path))
    post_nodes = [(n.domain, n.op_type) for n in post_model.graph.node]
    if ("opforge", "YoloPostprocess") not in post_nodes:
        failures.append(f"the post-processing export has no opforge.YoloPostprocess node: {post_nodes}")
    post_sess = opforge.onnx.session(post_path, intra_op_num_threads=threads)
    post_in = [i.name for i in post_sess.get_inputs()]
    lite_post = opforge.lite.convert(tf.function(postprocess, input_signature=specs))

    # The floors: a call with next to nothing to do, on the same inputs.
    def floor(*maps):
        return maps[0][0, 0, 0, 0] + 1.0

    tf_floor = tf.function(floor, input_signature=specs, jit_compile=False)
    floor_path = workdir / "floor.onnx"
    opforge.onnx.export(tf.function(floor, input_signature=specs), floor_path, standard_ops=True)
    floor_sess = opforge.onnx.session(floor_path, intra_op_num_threads=threads)
    floor_in = [i.name for i in floor_sess.get_inputs()]
    lite_floor = opforge.lite.convert(tf.function(floor, input_signature=specs))

    for b in BATCHES:
        maps_np = heads[b]
        maps_tf = [tf.constant(h) for h in maps_np]
        expected = [t.numpy() for t in tf_post(*maps_tf)]
        lite_call, _ = _lite_runner(lite_post, [h.shape for h in maps_np], threads)
        checks = []
        ort_feed = dict(zip(post_in, maps_np))
        for runtime, outputs in (("ORT", _detections(post_sess.run(None, ort_feed))),
                                 ("LiteRT", _detections(lite_call(maps_np)))):
            same, text = _agree(outputs, expected)
            checks.append(f"{runtime}: {text}")
            if not same:
                failures.append(f"postprocess batch {b}, {runtime}: {text}")
        cases.append(Case(f"YoloPostprocess alone, batch {b}", {
            "tf": lambda m=maps_tf: tf_post(*m),
            "ort": lambda f=ort_feed: post_sess.run(None, f),
            "lite": lambda m=maps_np, call=lite_call: call(m),
        }, "; ".join(checks)))
        floor_call, _ = _lite_runner(lite_floor, [h.shape for h in maps_np], threads)
        floor_feed = dict(zip(floor_in, maps_np))
        cases.append(Case(f"floor (x[0,0,0,0] + 1 of the maps), batch {b}", {
            "tf": lambda m=maps_tf: tf_floor(*m),
            "ort": lambda f=floor_feed: floor_sess.run(None, f),
            "lite": lambda m=maps_np, call=floor_call: call(m),
        }))
    return cases, failures


# --- timing and the table --------------------------------------------------------------------


def format_rows(rows: List[Row]) -> str:
    header = (f"{'case':<44}{'TF ms':>10}{'ORT ms':>11}{'TF/ORT':>8}{'LiteRT ms':>12}{'TF/LiteRT':>11}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['case']:<44}{r['tf_ms']:>10.3f}{r['ort_ms']:>11.3f}{r['ratio_ort']:>7.2f}x"
                     f"{r['lite_ms']:>12.3f}{r['ratio_lite']:>10.2f}x")
    return "\n".join(lines)


def run(size: int = 416, repeats: int = 30, threads: Optional[int] = None, as_json: bool = False) -> int:
    import tensorflow as tf

    from opforge._machine import machine
    from opforge.tools.timing import interleaved

    if threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # TensorFlow already initialised: its own count stays
            pass
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1
    import onnxruntime

    info = (f"machine: {machine()}\n"
            f"threads: {threads} (TensorFlow intra-op; ORT intra_op_num_threads; LiteRT num_threads); "
            f"TensorFlow {tf.__version__}, ONNX Runtime {onnxruntime.__version__}; "
            f"YOLO-v3-tiny {size}px, {CLASSES} classes, score_threshold {SCORE_THRESHOLD}, "
            f"max_detections {MAX_DETECTIONS}; median of {repeats} interleaved calls; "
            "ratio = TF / runtime (>1: the runtime is faster)")
    if not as_json:
        print(info, flush=True)
    with tempfile.TemporaryDirectory(prefix="opforge_deploy_bench_") as d:
        cases, failures = build_cases(size, threads, Path(d))
        rows: List[Row] = []
        for case in cases:
            if case.check and not as_json:
                print(f"check {case.name}: {case.check}", flush=True)
            medians = interleaved(case.candidates, repeats=repeats)
            rows.append({"case": case.name, "tf_ms": medians["tf"] * 1e3, "ort_ms": medians["ort"] * 1e3,
                         "lite_ms": medians["lite"] * 1e3, "ratio_ort": medians["tf"] / medians["ort"],
                         "ratio_lite": medians["tf"] / medians["lite"], "check": case.check})
    if as_json:
        print(json.dumps({"machine": machine(), "threads": threads, "size": size, "rows": rows,
                          "failures": failures}, indent=2))
    else:
        print(format_rows(rows))
        for failure in failures:
            print(f"MISMATCH: {failure}")
    return 1 if failures else 0


def main(argv: Optional[List[str]] = None) -> int:
    """`opforge bench deploy [--size S] [--repeats N] [--threads T] [--json]`."""
    parser = argparse.ArgumentParser(
        prog="opforge bench deploy",
        description="YOLO-v3-tiny with its post-processing at batch 1 and 8, and the post-processing op "
                    "alone, in TensorFlow (tf.function), ONNX Runtime and LiteRT, timed interleaved.")
    parser.add_argument("--size", type=int, default=416, help="input size, a multiple of 32 (default 416)")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved calls of each (default 30)")
    parser.add_argument("--threads", type=int, default=None,
                        help="TensorFlow's intra-op threads, and the runtimes' (default: TensorFlow's)")
    parser.add_argument("--json", action="store_true", help="machine-readable rows, each with its runtime and machine")
    args = parser.parse_args(argv)
    if args.size <= 0 or args.size % 32:
        parser.error(f"--size must be a positive multiple of 32, got {args.size}")
    if args.repeats <= 0 or (args.threads is not None and args.threads <= 0):
        parser.error("--repeats and --threads must be positive")
    from opforge._loader import LoadError

    try:
        return run(args.size, args.repeats, args.threads, args.json)
    except (LoadError, FileNotFoundError) as exc:  # OrtLibraryError / LiteLibraryError among them
        print(f"opforge bench deploy: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
