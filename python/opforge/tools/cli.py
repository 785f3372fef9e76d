"""The `opforge` command: doctor, verify, bench (and bench paths, bench gpu, bench deploy), check,
the YOLO workflow (`opforge yolo ...`) and MFCCs back to audio (`opforge audio demo`, `opforge
audio bench`)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["bench", "paths"]:  # the four paths to an activation, its own options
        from opforge.tools import paths

        return paths.main(argv[2:])
    if argv[:2] == ["bench", "gpu"] or argv[:1] == ["gpu-bench"]:  # GPU kernels, its own options
        from opforge.tools import gpu_bench

        return gpu_bench.main(argv[2:] if argv[0] == "bench" else argv[1:])
    if argv[:2] == ["bench", "deploy"]:  # the detector in ONNX Runtime and LiteRT, its own options
        from opforge.tools import deploy_bench

        return deploy_bench.main(argv[2:])
    parser = argparse.ArgumentParser(prog="opforge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="build and runtime information; exits non-zero if the library cannot load")
    p_verify = sub.add_parser("verify", help="every op against its reference: errors and speed")
    p_verify.add_argument("ops", nargs="*", help="ops to verify (default: all)")
    p_verify.add_argument("--json", action="store_true", help="machine-readable output")
    p_verify.add_argument("--size", type=int, default=None,
                          help="elements in the speed check (default: each op's own case)")
    p_verify.add_argument("--repeats", type=int, default=30)
    p_bench = sub.add_parser("bench", help="time ops against TensorFlow and tf.py_function, in float32 or "
                                           "bfloat16 (--dtype); the header names the CPU, with AVX512-BF16 and AMX")
    p_bench.add_argument("ops", nargs="*", help="ops to benchmark (default: all); or `paths`: the four ways to "
                                                "write an activation, timed, and what each supports "
                                                "(opforge bench paths --help); or `gpu`: the GPU kernels "
                                                "against TensorFlow's and a device copy (opforge bench gpu "
                                                "--help; also `opforge gpu-bench`); or `deploy`: the YOLO "
                                                "detector and its post-processing in ONNX Runtime and LiteRT "
                                                "against TensorFlow (opforge bench deploy --help)")
    p_bench.add_argument("--size", type=int, default=None,
                         help="elements in every case; model-shaped cases scale their batch "
                              "(default: each case's own size, 4M for element-wise ops)")
    p_bench.add_argument("--repeats", type=int, default=50)
    p_bench.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                         help="dtype of every float speed case: its inputs are made in it and opforge and its "
                              "TensorFlow rival(s) both compute in it (a TensorFlow op without that kernel casts "
                              "to float32 and back, and says so); a case whose op has no kernel of it is left out, "
                              "with a line saying so (default float32)")
    p_bench.add_argument("--json", action="store_true", help="machine-readable rows, each with its dtype and machine")
    p_bench.add_argument("--plot", metavar="PATH", default=None,
                         help="also draw the speed ratios against TensorFlow as a chart (PNG or SVG by the suffix)")
    p_bench.add_argument("--from", dest="sources", metavar="JSON", action="append", default=[],
                         help="with --plot: time nothing, draw the rows of a file `--json` wrote (repeatable: "
                              "float32 and bfloat16, or two CPUs, side by side)")
    p_fuzz = sub.add_parser("fuzz", help="malformed calls of every op in child processes: crashes, hangs, "
                                         "vague errors")
    p_fuzz.add_argument("--calls", type=int, default=200, help="calls per op (default 200)")
    p_fuzz.add_argument("--seed", type=int, default=0)
    p_fuzz.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take before it is a hang")
    p_fuzz.add_argument("-v", "--verbose", action="store_true", help="print every call and its outcome")
    p_fuzz.add_argument("ops", nargs="*", help="spec names (default: every op)")
    p_check = sub.add_parser("check", help="opcheck for an op: shape function, gradient, kernels, eager vs "
                                           "tf.function, bad inputs, determinism, SavedModel; one line per check")
    p_check.add_argument("targets", nargs="*",
                         help="MODULE:FUNCTION, an opforge op (spec name or C++ op name); default: every opforge op")
    p_check.add_argument("--inputs", nargs="+", default=[], metavar="DTYPE[SHAPE]",
                         help="one sample call of a MODULE:FUNCTION target, e.g. float32[2,3] int64[3]")
    p_check.add_argument("--checks", default=None, help="comma-separated subset of the checks (default: all)")
    p_check.add_argument("--timeout", type=float, default=60.0, help="seconds a call in a child may take (a hang)")
    p_check.add_argument("--fuzz-calls", type=int, default=20, help="opforge.tools.fuzz calls per opforge op (default 20)")
    p_check.add_argument("--json", action="store_true", help="machine-readable output")
    p_new = sub.add_parser("new", help="scaffold your own op: core, binding, CUDA, wrapper with gradient, "
                                       "tests and a benchmark, built with opforge.build")
    p_new.add_argument("name", help="the op's snake_case name (a Python identifier)")
    p_new.add_argument("--dir", default=".", help="where the project folder NAME is written (default: .)")
    p_new.add_argument("--force", action="store_true", help="overwrite a non-empty NAME folder")
    p_yolo = sub.add_parser("yolo", help="YOLO-v3 built from opforge ops: train, detect, eval, export, demo")
    yolo = p_yolo.add_subparsers(dest="yolo_command", required=True)
    y_train = yolo.add_parser("train", help="train on the synthetic shapes set or your own labelled images")
    y_train.add_argument("--data", default="shapes",
                         help="'shapes' (synthetic), a folder of images with YOLO .txt labels, or a COCO .json")
    y_train.add_argument("--classes", default="", help="class names, comma-separated (for YOLO-label folders)")
    y_train.add_argument("--model", choices=("tiny", "full"), default="tiny")
    y_train.add_argument("--size", type=int, default=128, help="input size, a multiple of 32")
    y_train.add_argument("--epochs", type=int, default=30)
    y_train.add_argument("--steps", type=int, default=50, help="steps per epoch")
    y_train.add_argument("--batch", type=int, default=16)
    y_train.add_argument("--images", type=int, default=800, help="synthetic images to generate")
    y_train.add_argument("--out", default="yolo_out", help="output folder (model.keras, checkpoints, history)")
    y_detect = yolo.add_parser("detect", help="detect objects in images and draw them")
    y_detect.add_argument("images", nargs="+")
    y_detect.add_argument("--model", default="yolo_out", help="a folder written by `opforge yolo train`")
    y_detect.add_argument("--out", default="detections.png")
    y_detect.add_argument("--score", type=float, default=0.3, help="score threshold")
    y_eval = yolo.add_parser("eval", help="COCO mAP of a trained model")
    y_eval.add_argument("--model", default="yolo_out")
    y_eval.add_argument("--data", default="shapes")
    y_eval.add_argument("--classes", default="")
    y_eval.add_argument("--images", type=int, default=100, help="synthetic held-out images")
    y_export = yolo.add_parser("export", help="the detector with its post-processing: a SavedModel taking uint8 "
                                              "images, or an ONNX / LiteRT file taking float images in [0, 1]")
    y_export.add_argument("--model", default="yolo_out")
    y_export.add_argument("--format", choices=("savedmodel", "onnx", "tflite"), default="savedmodel")
    y_export.add_argument("--out", default=None,
                          help="default: yolo_savedmodel, yolo_detector.onnx or yolo_detector.tflite")
    y_export.add_argument("--score", type=float, default=0.3, help="score threshold of the post-processing")
    y_demo = yolo.add_parser("demo", help="train YOLO-tiny on the synthetic set (about 5 minutes on 2 cores)")
    y_demo.add_argument("--out", default="demo_out")
    y_demo.add_argument("--seconds", type=float, default=300.0)
    y_bench = yolo.add_parser("bench", help="training step and inference post-processing, opforge against TF "
                                            "built-ins; the fused Darknet block; in float32 or under Keras's "
                                            "mixed_bfloat16 policy (--policy)")
    y_bench.add_argument("cases", nargs="*", help="train, train_full, post, infer (default), block, fused")
    y_bench.add_argument("--repeats", type=int, default=10)
    y_bench.add_argument("--size", type=int, action="append", help="input size (repeatable; default 416)")
    y_bench.add_argument("--policy", choices=("float32", "mixed_bfloat16"), default="float32",
                         help="Keras dtype policy both models (opforge's and its TensorFlow twin) are built and "
                              "run under: mixed_bfloat16 computes in bfloat16 with float32 variables; the previous "
                              "policy is restored afterwards (default float32)")
    y_parity = yolo.add_parser("parity", help="ops='opforge' against ops='tf': first-step loss, gradients, 20 steps")
    y_parity.add_argument("--size", type=int, default=416)
    y_parity.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                          help="float64 takes round-off out of the comparison")
    y_parity.add_argument("--model", choices=("tiny", "full"), default="tiny")
    p_audio = sub.add_parser("audio", help="MFCCs back to audio (opforge.audio): demo and benchmark")
    audio = p_audio.add_subparsers(dest="audio_command", required=True)
    a_demo = audio.add_parser("demo", help="speech -> MFCCs -> opforge.audio.mfcc_to_audio: WAV files, a PNG of "
                                           "both spectrograms, spectral convergence, real-time factor")
    a_demo.add_argument("--out", default="audio_out", help="output folder (default: audio_out)")
    a_demo.add_argument("--seconds", type=float, default=3.0,
                        help="length of the synthesised speech when espeak-ng is not installed (default 3)")
    a_demo.add_argument("--n-iter", type=int, default=32, help="Griffin-Lim iterations (default 32)")
    a_bench = audio.add_parser("bench", help="mfcc_to_audio against librosa's through tf.numpy_function: 5 s at "
                                             "22.05 kHz, n_mfcc=20, n_mels=128, n_fft=2048, n_iter=32")
    a_bench.add_argument("--repeats", type=int, default=10, help="interleaved calls of each (default 10)")
    a_bench.add_argument("--threads", type=int, default=2, help="TensorFlow and BLAS threads (default 2)")
    a_export = audio.add_parser("export", help="mfcc_to_audio as an ONNX file (opforge nodes run by "
                                               "libopforge_ort.so), checked against TensorFlow in ONNX Runtime")
    a_export.add_argument("--format", choices=("onnx",), default="onnx")
    a_export.add_argument("--out", default="mfcc_to_audio.onnx")
    a_export.add_argument("--sr", type=int, default=22050)
    a_export.add_argument("--n-mfcc", type=int, default=20)
    a_export.add_argument("--n-mels", type=int, default=128)
    a_export.add_argument("--n-fft", type=int, default=2048)
    a_export.add_argument("--n-iter", dest="export_n_iter", type=int, default=32)
    a_export.add_argument("--seed", type=int, default=0, help="Griffin-Lim's random phases (fixed in the file)")
    args = parser.parse_args(argv)
    if args.command == "yolo":
        return _yolo(args)
    if args.command == "audio":
        return _audio(args, parser)
    if args.command == "fuzz":
        from opforge.tools import fuzz

        return fuzz.main(args.calls, args.seed, args.timeout, args.ops or None, args.verbose)
    if args.command == "new":
        from opforge.tools import scaffold

        try:
            files = scaffold.new_project(args.name, args.dir, args.force)
        except (ValueError, FileExistsError) as exc:
            print(exc, file=sys.stderr)
            return 2
        root = files[0].parent
        print(f"wrote {root}/: " + ", ".join(f.name for f in files))
        print(f"next: cd {root} && python -m pytest test_{args.name}.py && opforge check {args.name}:{args.name}")
        return 0
    if args.command == "check":
        from opforge.tools import check

        return check.main(args.targets, args.json, args.inputs, args.checks.split(",") if args.checks else None,
                          args.timeout, args.fuzz_calls)
    if args.command != "doctor" and args.size is not None and args.size <= 0:
        parser.error(f"--size must be a positive number of elements, got {args.size}")

    from opforge._loader import LoadError

    try:
        if args.command == "doctor":
            from opforge.tools import doctor

            return doctor.run()
        if args.command == "verify":
            from opforge.tools import verify

            return verify.run(args.json, args.size, args.repeats, args.ops)
        from opforge.tools import bench

        return bench.run(args.ops, args.size, args.repeats, args.json, args.dtype, args.plot, args.sources)
    except LoadError as exc:
        print(f"opforge {args.command}: {exc}", file=sys.stderr)
        return 1


def _audio(args, parser) -> int:
    for name in ("seconds", "n_iter", "repeats", "threads"):
        value = getattr(args, name, None)
        if value is not None and not value > 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    from opforge.tools import audio_demo
    from opforge._loader import LoadError

    try:
        if args.audio_command == "demo":
            return audio_demo.demo(args.out, args.seconds, args.n_iter)
        if args.audio_command == "export":
            return audio_demo.export(args.out, args.sr, args.n_mfcc, args.n_mels, args.n_fft, args.export_n_iter,
                                     args.seed)
        return audio_demo.bench(args.repeats, args.threads)
    except (LoadError, OSError) as exc:
        print(f"opforge audio {args.audio_command}: {exc}", file=sys.stderr)
        return 1


def _yolo(args) -> int:
    import json
    from pathlib import Path

    import numpy as np

    from opforge.data import LabelError

    try:
        from opforge.models import app

        if args.yolo_command == "train":
            classes = [c for c in args.classes.split(",") if c]
            data = app.load_data(args.data, args.size, classes, num_images=args.images)
            result = app.train(data, args.out, kind=args.model, epochs=args.epochs, steps_per_epoch=args.steps,
                               batch_size=args.batch)
            print(f"saved {args.out}/model.keras after {result['seconds']:.0f} s; loss {result['loss'][0]:.3g} -> "
                  f"{result['loss'][-1]:.3g}")
            return 0
        if args.yolo_command == "demo":
            return app.demo(args.out, args.seconds)
        if args.yolo_command == "bench":
            from opforge.tools import yolo_bench as bench

            return bench.run(repeats=args.repeats, sizes=args.size, cases=args.cases or None, policy=args.policy)
        if args.yolo_command == "parity":
            from opforge.tools import yolo_parity as parity

            return parity.run(size=args.size, dtype=args.dtype, model=args.model)
        info = json.loads((Path(args.model) / "history.json").read_text())
        model = app.load_model(str(Path(args.model) / "model.keras"))
        names, size = info["class_names"], info["input_size"]
        if args.yolo_command == "detect":
            from opforge.data.detection import _read_image
            from opforge.data import letterbox

            images = np.stack([letterbox(_read_image(Path(p)), np.zeros((0, 4)), size)[0] for p in args.images])
            found = app.detect(model, images, len(names), score_threshold=args.score)
            app.draw_detections(images, found, names, args.out)
            for path, dets in zip(args.images, found):
                print(f"{path}: " + (", ".join(f"{names[c]} {s:.2f} at {[round(float(v), 3) for v in b]}" for b, s, c in dets)
                                     or "nothing"))
            print(f"wrote {args.out}")
            return 0
        if args.yolo_command == "eval":
            data = app.load_data(args.data, size, [c for c in args.classes.split(",") if c] or names,
                                 num_images=args.images, seed=2)
            det = app.make_detector(model, len(names), size, score_threshold=0.05)
            metrics = app.evaluate_map(det, data.images, data.boxes, data.classes, data.class_names, quiet=True)
            print(f"mAP@0.5 = {metrics['map50']:.3f}, mAP@[.5:.95] = {metrics['map']:.3f}")
            for name, ap in metrics["per_class_ap50"].items():
                print(f"  {name}: AP@0.5 = {ap:.3f}")
            return 0
        if args.yolo_command == "export":
            out = args.out or {"savedmodel": "yolo_savedmodel", "onnx": "yolo_detector.onnx",
                               "tflite": "yolo_detector.tflite"}[args.format]
            app.export_deployable(model, len(names), size, out, args.format, score_threshold=args.score)
            how = {"savedmodel": "serving_default(images: uint8 [B, H, W, 3]); load with import opforge; "
                                 "tf.saved_model.load(...)",
                   "onnx": f"images: float32 [B, {size}, {size}, 3] in [0, 1]; run with opforge.onnx.session(...)",
                   "tflite": f"images: float32 [1, {size}, {size}, 3] in [0, 1]; run with "
                             "opforge.lite.interpreter(...)"}[args.format]
            print(f"wrote {out}: {how}")
            return 0
    except (LabelError, FileNotFoundError, ValueError) as exc:
        print(f"opforge yolo {args.yolo_command}: {exc}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
