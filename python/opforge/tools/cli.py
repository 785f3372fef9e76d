"""The `opforge` command: doctor, verify, bench (and bench paths, bench gpu, bench deploy), fuzz,
check, new, the YOLO workflow (`opforge yolo ...`) and MFCCs back to audio (`opforge audio ...`).

Each subcommand is two small functions: `_add_<command>(sub)` declares its parser and names its
handler with `set_defaults(func=...)`, and the handler runs it. The parser comes whole from
`build_parser()`; `bench paths`, `bench gpu` (also `gpu-bench`) and `bench deploy` have parsers of
their own, in their modules."""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, List, Optional, Tuple

# Subcommands that parse the rest of the command line themselves: their module's main(argv).
DELEGATED = {
    ("bench", "paths"): "opforge.tools.paths",  # the four paths to an activation
    ("bench", "gpu"): "opforge.tools.gpu_bench",  # the GPU kernels
    ("gpu-bench",): "opforge.tools.gpu_bench",
    ("bench", "deploy"): "opforge.tools.deploy_bench",  # the detector in ONNX Runtime and LiteRT
}


def main(argv: Optional[List[str]] = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    argv = sys.argv[1:] if argv is None else list(argv)
    for words, module in DELEGATED.items():
        if tuple(argv[:len(words)]) == words:
            return importlib.import_module(module).main(argv[len(words):])
    args = build_parser().parse_args(argv)
    return args.func(args)


def build_parser() -> argparse.ArgumentParser:
    """The whole `opforge` command line but the delegated subcommands (DELEGATED)."""
    parser = argparse.ArgumentParser(prog="opforge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True,
                                help="the subcommand (`opforge COMMAND --help` for its options)")
    for add in (_add_doctor, _add_verify, _add_bench, _add_fuzz, _add_check, _add_new, _add_yolo, _add_audio):
        add(sub)
    return parser


# --- helpers ---------------------------------------------------------------------------------


def _command(sub, name: str, handler: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
    """A subcommand `name` run by `handler`; the handler finds its own name in `args.prog`."""
    parser = sub.add_parser(name, help=help, description=help)
    parser.set_defaults(func=handler, prog=parser.prog)
    return parser


def _positive(kind: type, what: str = "positive"):
    """An argparse type: a number of `kind` above zero (a usage error, exit status 2, otherwise)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number ({kind.__name__}), got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value

    return parse


def _fails_with(errors: Callable[[], Tuple[type, ...]]):
    """The handler's errors of the kinds `errors()` returns (imported when they happen) are its
    answer: one line on stderr, `opforge COMMAND: what went wrong`, and exit status 1."""

    def wrap(handler):
        @functools.wraps(handler)
        def run(args: argparse.Namespace) -> int:
            try:
                return handler(args)
            except Exception as exc:
                if not isinstance(exc, errors()):
                    raise
                print(f"{args.prog}: {exc}", file=sys.stderr)
                return 1

        return run

    return wrap


def _load_errors():
    from opforge._loader import LoadError

    return (LoadError,)


def _yolo_errors():
    from opforge.data import LabelError

    return (LabelError, FileNotFoundError, ValueError)


def _audio_errors():
    from opforge._loader import LoadError

    return (LoadError, OSError)


# --- doctor, verify, bench -------------------------------------------------------------------


def _add_doctor(sub) -> None:
    _command(sub, "doctor", _doctor, "build and runtime information; exits non-zero if the library cannot load")


@_fails_with(_load_errors)
def _doctor(args) -> int:
    from opforge.tools import doctor

    return doctor.run()


def _add_verify(sub) -> None:
    p = _command(sub, "verify", _verify, "every op against its reference: errors and speed")
    p.add_argument("ops", nargs="*", help="ops to verify (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--size", type=_positive(int, "a positive number of elements"), default=None,
                   help="elements in the speed check (default: each op's own case)")
    p.add_argument("--repeats", type=int, default=30, help="timed calls of each in the speed check (default 30)")


@_fails_with(_load_errors)
def _verify(args) -> int:
    from opforge.tools import verify

    return verify.run(args.json, args.size, args.repeats, args.ops)


def _add_bench(sub) -> None:
    p = _command(sub, "bench", _bench, "time ops against TensorFlow and tf.py_function, in float32 or bfloat16 "
                                       "(--dtype); the header names the CPU, with AVX512-BF16 and AMX")
    p.add_argument("ops", nargs="*", help="ops to benchmark (default: all); or `paths`: the four ways to write an "
                                          "activation, timed, and what each supports (opforge bench paths --help); "
                                          "or `gpu`: the GPU kernels against TensorFlow's and a device copy "
                                          "(opforge bench gpu --help; also `opforge gpu-bench`); or `deploy`: the "
                                          "YOLO detector and its post-processing in ONNX Runtime and LiteRT against "
                                          "TensorFlow (opforge bench deploy --help)")
    p.add_argument("--size", type=_positive(int, "a positive number of elements"), default=None,
                   help="elements in every case; model-shaped cases scale their batch "
                        "(default: each case's own size, 4M for element-wise ops)")
    p.add_argument("--repeats", type=int, default=50, help="interleaved timed calls of each candidate (default 50)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="dtype of every float speed case: its inputs are made in it and opforge and its TensorFlow "
                        "rival(s) both compute in it (a TensorFlow op without that kernel casts to float32 and back, "
                        "and says so); a case whose op has no kernel of it is left out, with a line saying so "
                        "(default float32)")
    p.add_argument("--xla", action="store_true",
                   help="time each op under XLA (tf.function(jit_compile=True)) against the same call in a "
                        "tf.function without it and eagerly: ratios above 1 mean faster under XLA")
    p.add_argument("--jax", action="store_true",
                   help="time opforge.jax instead: each op's FFI call under jax.jit against the same maths in "
                        "jax.numpy / jax.lax under jax.jit (and jax.grad of both), with whether they give the same "
                        "bits; ratios above 1 mean the FFI call is faster")
    p.add_argument("--json", action="store_true", help="machine-readable rows, each with its dtype and machine")
    p.add_argument("--plot", metavar="PATH", default=None,
                   help="also draw the speed ratios against TensorFlow as a chart (PNG or SVG by the suffix)")
    p.add_argument("--from", dest="sources", metavar="JSON", action="append", default=[],
                   help="with --plot: time nothing, draw the rows of a file `--json` wrote (repeatable: float32 "
                        "and bfloat16, or two CPUs, side by side)")


@_fails_with(_load_errors)
def _bench(args) -> int:
    from opforge.tools import bench

    return bench.run(args.ops, args.size, args.repeats, args.json, args.dtype, args.plot, args.sources,
                     xla=args.xla, jax=args.jax)


# --- fuzz, check, new ------------------------------------------------------------------------


def _add_fuzz(sub) -> None:
    p = _command(sub, "fuzz", _fuzz, "malformed calls of every op in child processes: crashes, hangs, vague errors")
    p.add_argument("--calls", type=int, default=200, help="calls per op (default 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn calls (default 0)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a call may take before it is a hang")
    p.add_argument("-v", "--verbose", action="store_true", help="print every call and its outcome")
    p.add_argument("ops", nargs="*", help="spec names (default: every op)")


def _fuzz(args) -> int:
    from opforge.tools import fuzz

    return fuzz.main(args.calls, args.seed, args.timeout, args.ops or None, args.verbose)


def _add_check(sub) -> None:
    p = _command(sub, "check", _check, "opcheck for an op: shape function, gradient, kernels, eager vs "
                                       "tf.function, bad inputs, determinism, SavedModel; one line per check")
    p.add_argument("targets", nargs="*",
                   help="MODULE:FUNCTION, an opforge op (spec name or C++ op name); default: every opforge op")
    p.add_argument("--inputs", nargs="+", default=[], metavar="DTYPE[SHAPE]",
                   help="one sample call of a MODULE:FUNCTION target, e.g. float32[2,3] int64[3]")
    p.add_argument("--checks", default=None, help="comma-separated subset of the checks (default: all)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a call in a child may take (a hang)")
    p.add_argument("--fuzz-calls", type=int, default=20, help="opforge.tools.fuzz calls per opforge op (default 20)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--cuda-sim", action="store_true",
                   help="also run the op's CUDA kernels on the CPU (opforge's SIMT runtime) against its CPU kernels: "
                        "its library is built for that (OPFORGE_CUDA_SIM=1); no GPU needed")
    p.add_argument("--cuda-sim-tolerance", type=float, default=1e-5,
                   help="how far the CUDA kernels may be from the CPU's, relative to the largest value (default 1e-5)")


def _check(args) -> int:
    from opforge.tools import check

    return check.main(args.targets, args.json, args.inputs, args.checks.split(",") if args.checks else None,
                      args.timeout, args.fuzz_calls, cuda_sim=args.cuda_sim,
                      cuda_sim_tolerance=args.cuda_sim_tolerance)


def _add_new(sub) -> None:
    p = _command(sub, "new", _new, "scaffold your own op: core, binding, CUDA, wrapper with gradient, tests and a "
                                   "benchmark, built with opforge.build")
    p.add_argument("name", help="the op's snake_case name (a Python identifier)")
    p.add_argument("--dir", default=".", help="where the project folder NAME is written (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite a non-empty NAME folder")


def _new(args) -> int:
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


# --- yolo ------------------------------------------------------------------------------------

MODEL_HELP = ("a folder written by `opforge yolo train` or `opforge yolo demo` (model.keras, history.json), "
              "or the model.keras in it (default: yolo_out)")


def trained_folder(path: str) -> Path:
    """The folder `opforge yolo train` (or `demo`) wrote, from a --model: that folder or the
    model.keras in it. Anything else is a ValueError naming the path and what was expected."""
    given = Path(path)
    folder = given.parent if given.is_file() and given.name == "model.keras" else given
    if not given.exists():
        why = "not found"
    elif given.is_file() and given.name != "model.keras":
        why = "a file other than model.keras"
    else:
        why = "; ".join(f"no {name} in {folder}" for name in ("model.keras", "history.json")
                        if not (folder / name).is_file())
    if why:
        raise ValueError(f"--model {path}: {why}; expected a folder written by `opforge yolo train` "
                         "(model.keras, history.json) or the model.keras in it")
    return folder


def _trained(path: str):
    """The model of a --model, its class names and input size (history.json)."""
    from opforge.models import app

    folder = trained_folder(path)
    try:
        info = json.loads((folder / "history.json").read_text())
        names, size = list(info["class_names"]), int(info["input_size"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--model {path}: {folder / 'history.json'} is not the history `opforge yolo train` "
                         f"writes ({type(exc).__name__}: {exc})") from None
    try:
        model = app.load_model(str(folder / "model.keras"))
    except Exception as exc:  # Keras raises several kinds (ValueError, zipfile.BadZipFile, ...)
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ValueError(f"--model {path}: {folder / 'model.keras'} cannot be loaded ({type(exc).__name__}: "
                         f"{first})") from None
    return model, names, size


def _add_yolo(sub) -> None:
    what = "YOLO-v3 built from opforge ops: train, detect, eval, export, demo, bench, parity"
    p = sub.add_parser("yolo", help=what, description=what)
    yolo = p.add_subparsers(dest="yolo_command", required=True, help="the YOLO subcommand")
    for add in (_add_yolo_train, _add_yolo_detect, _add_yolo_eval, _add_yolo_export, _add_yolo_demo,
                _add_yolo_bench, _add_yolo_parity):
        add(yolo)


def _add_yolo_train(yolo) -> None:
    p = _command(yolo, "train", _yolo_train, "train on the synthetic shapes set or your own labelled images")
    p.add_argument("--data", default="shapes",
                   help="'shapes' (synthetic), a folder of images with YOLO .txt labels, or a COCO .json")
    p.add_argument("--classes", default="", help="class names, comma-separated (for YOLO-label folders)")
    p.add_argument("--model", choices=("tiny", "full"), default="tiny",
                   help="YOLO-v3-tiny or the full YOLO-v3 (default tiny)")
    p.add_argument("--size", type=int, default=128, help="input size, a multiple of 32")
    p.add_argument("--epochs", type=int, default=30, help="epochs (default 30)")
    p.add_argument("--steps", type=int, default=50, help="steps per epoch")
    p.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    p.add_argument("--images", type=int, default=800, help="synthetic images to generate")
    p.add_argument("--out", default="yolo_out", help="output folder (model.keras, checkpoints, history)")


@_fails_with(_yolo_errors)
def _yolo_train(args) -> int:
    from opforge.models import app

    classes = [c for c in args.classes.split(",") if c]
    data = app.load_data(args.data, args.size, classes, num_images=args.images)
    result = app.train(data, args.out, kind=args.model, epochs=args.epochs, steps_per_epoch=args.steps,
                       batch_size=args.batch)
    print(f"saved {args.out}/model.keras after {result['seconds']:.0f} s; loss {result['loss'][0]:.3g} -> "
          f"{result['loss'][-1]:.3g}")
    return 0


def _add_yolo_detect(yolo) -> None:
    p = _command(yolo, "detect", _yolo_detect, "detect objects in images and draw them")
    p.add_argument("images", nargs="+", help="image files (PNG, JPEG, BMP, GIF)")
    p.add_argument("--model", default="yolo_out", help=MODEL_HELP)
    p.add_argument("--out", default="detections.png", help="the drawing of the detections (default detections.png)")
    p.add_argument("--score", type=float, default=0.3, help="score threshold")


@_fails_with(_yolo_errors)
def _yolo_detect(args) -> int:
    import numpy as np

    from opforge.data import letterbox
    from opforge.data.detection import _read_image
    from opforge.models import app

    model, names, size = _trained(args.model)
    images = np.stack([letterbox(_read_image(Path(p)), np.zeros((0, 4)), size)[0] for p in args.images])
    found = app.detect(model, images, len(names), score_threshold=args.score)
    app.draw_detections(images, found, names, args.out)
    for path, dets in zip(args.images, found):
        print(f"{path}: " + (", ".join(f"{names[c]} {s:.2f} at {[round(float(v), 3) for v in b]}" for b, s, c in dets)
                             or "nothing"))
    print(f"wrote {args.out}")
    return 0


def _add_yolo_eval(yolo) -> None:
    p = _command(yolo, "eval", _yolo_eval, "COCO mAP of a trained model")
    p.add_argument("--model", default="yolo_out", help=MODEL_HELP)
    p.add_argument("--data", default="shapes",
                   help="'shapes' (synthetic), a folder of images with YOLO .txt labels, or a COCO .json")
    p.add_argument("--classes", default="",
                   help="class names, comma-separated (for YOLO-label folders; default: the model's)")
    p.add_argument("--images", type=int, default=100, help="synthetic held-out images")


@_fails_with(_yolo_errors)
def _yolo_eval(args) -> int:
    from opforge.models import app

    model, names, size = _trained(args.model)
    data = app.load_data(args.data, size, [c for c in args.classes.split(",") if c] or names,
                         num_images=args.images, seed=2)
    det = app.make_detector(model, len(names), size, score_threshold=0.05)
    metrics = app.evaluate_map(det, data.images, data.boxes, data.classes, data.class_names, quiet=True)
    print(f"mAP@0.5 = {metrics['map50']:.3f}, mAP@[.5:.95] = {metrics['map']:.3f}")
    for name, ap in metrics["per_class_ap50"].items():
        print(f"  {name}: AP@0.5 = {ap:.3f}")
    return 0


EXPORT_OUT = {"savedmodel": "yolo_savedmodel", "onnx": "yolo_detector.onnx", "tflite": "yolo_detector.tflite"}


def _add_yolo_export(yolo) -> None:
    p = _command(yolo, "export", _yolo_export, "the detector with its post-processing: a SavedModel taking uint8 "
                                               "images, or an ONNX / LiteRT file taking float images in [0, 1]")
    p.add_argument("--model", default="yolo_out", help=MODEL_HELP)
    p.add_argument("--format", choices=tuple(EXPORT_OUT), default="savedmodel",
                   help="savedmodel (TensorFlow), onnx (ONNX Runtime) or tflite (LiteRT) (default savedmodel)")
    p.add_argument("--out", default=None, help="default: yolo_savedmodel, yolo_detector.onnx or yolo_detector.tflite")
    p.add_argument("--score", type=float, default=0.3, help="score threshold of the post-processing")


@_fails_with(_yolo_errors)
def _yolo_export(args) -> int:
    from opforge.models import app

    model, names, size = _trained(args.model)
    out = args.out or EXPORT_OUT[args.format]
    app.export_deployable(model, len(names), size, out, args.format, score_threshold=args.score)
    how = {"savedmodel": "serving_default(images: uint8 [B, H, W, 3]); load with import opforge; "
                         "tf.saved_model.load(...)",
           "onnx": f"images: float32 [B, {size}, {size}, 3] in [0, 1]; run with opforge.onnx.session(...)",
           "tflite": f"images: float32 [1, {size}, {size}, 3] in [0, 1]; run with "
                     "opforge.lite.interpreter(...)"}[args.format]
    print(f"wrote {out}: {how}")
    return 0


def _add_yolo_demo(yolo) -> None:
    p = _command(yolo, "demo", _yolo_demo, "train YOLO-tiny on the synthetic set (about 5 minutes on 2 cores)")
    p.add_argument("--out", default="demo_out",
                   help="output folder: model.keras, history.json, detections.png, loss.png (default demo_out)")
    p.add_argument("--seconds", type=float, default=300.0, help="training time budget in seconds (default 300)")


@_fails_with(_yolo_errors)
def _yolo_demo(args) -> int:
    from opforge.models import app

    return app.demo(args.out, args.seconds)


def _add_yolo_bench(yolo) -> None:
    p = _command(yolo, "bench", _yolo_bench, "training step and inference post-processing, opforge against TF "
                                             "built-ins; the fused Darknet block; in float32 or under Keras's "
                                             "mixed_bfloat16 policy (--policy)")
    p.add_argument("cases", nargs="*", help="train, train_full, post, infer (default), block, fused, train_xla")
    p.add_argument("--repeats", type=int, default=10, help="interleaved timed calls of each (default 10)")
    p.add_argument("--size", type=int, action="append", help="input size (repeatable; default 416)")
    p.add_argument("--policy", choices=("float32", "mixed_bfloat16"), default="float32",
                   help="Keras dtype policy both models (opforge's and its TensorFlow twin) are built and run under: "
                        "mixed_bfloat16 computes in bfloat16 with float32 variables; the previous policy is "
                        "restored afterwards (default float32)")


@_fails_with(_yolo_errors)
def _yolo_bench(args) -> int:
    from opforge.tools import yolo_bench

    return yolo_bench.run(repeats=args.repeats, sizes=args.size, cases=args.cases or None, policy=args.policy)


def _add_yolo_parity(yolo) -> None:
    p = _command(yolo, "parity", _yolo_parity, "ops='opforge' against ops='tf': first-step loss, gradients, 20 steps")
    p.add_argument("--size", type=int, default=416, help="input size, a multiple of 32 (default 416)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="float64 takes round-off out of the comparison")
    p.add_argument("--model", choices=("tiny", "full"), default="tiny",
                   help="YOLO-v3-tiny or the full YOLO-v3 (default tiny)")


@_fails_with(_yolo_errors)
def _yolo_parity(args) -> int:
    from opforge.tools import yolo_parity

    return yolo_parity.run(size=args.size, dtype=args.dtype, model=args.model)


# --- audio -----------------------------------------------------------------------------------


def _add_audio(sub) -> None:
    what = "MFCCs back to audio (opforge.audio): demo, benchmark and ONNX export"
    p = sub.add_parser("audio", help=what, description=what)
    audio = p.add_subparsers(dest="audio_command", required=True, help="the audio subcommand")
    for add in (_add_audio_demo, _add_audio_bench, _add_audio_export):
        add(audio)


def _add_audio_demo(audio) -> None:
    p = _command(audio, "demo", _audio_demo, "speech -> MFCCs -> opforge.audio.mfcc_to_audio: WAV files, a PNG of "
                                             "both spectrograms, spectral convergence, real-time factor")
    p.add_argument("--out", default="audio_out", help="output folder (default: audio_out)")
    p.add_argument("--seconds", type=_positive(float), default=3.0,
                   help="length of the synthesised speech when espeak-ng is not installed (default 3)")
    p.add_argument("--n-iter", type=_positive(int), default=32, help="Griffin-Lim iterations (default 32)")


@_fails_with(_audio_errors)
def _audio_demo(args) -> int:
    from opforge.tools import audio_demo

    return audio_demo.demo(args.out, args.seconds, args.n_iter)


def _add_audio_bench(audio) -> None:
    p = _command(audio, "bench", _audio_bench, "mfcc_to_audio against librosa's through tf.numpy_function: 5 s at "
                                               "22.05 kHz, n_mfcc=20, n_mels=128, n_fft=2048, n_iter=32")
    p.add_argument("--repeats", type=_positive(int), default=10, help="interleaved calls of each (default 10)")
    p.add_argument("--threads", type=_positive(int), default=2, help="TensorFlow and BLAS threads (default 2)")


@_fails_with(_audio_errors)
def _audio_bench(args) -> int:
    from opforge.tools import audio_demo

    return audio_demo.bench(args.repeats, args.threads)


def _add_audio_export(audio) -> None:
    p = _command(audio, "export", _audio_export, "mfcc_to_audio as an ONNX file (opforge nodes run by "
                                                 "libopforge_ort.so), checked against TensorFlow in ONNX Runtime")
    p.add_argument("--format", choices=("onnx",), default="onnx", help="the file's format (onnx, the only one)")
    p.add_argument("--out", default="mfcc_to_audio.onnx", help="the ONNX file written (default mfcc_to_audio.onnx)")
    p.add_argument("--sr", type=int, default=22050, help="sample rate of the audio in Hz (default 22050)")
    p.add_argument("--n-mfcc", type=int, default=20, help="MFCCs per frame, the input's first dimension (default 20)")
    p.add_argument("--n-mels", type=int, default=128, help="mel bands the MFCCs were computed from (default 128)")
    p.add_argument("--n-fft", type=int, default=2048, help="FFT size of the STFT (default 2048)")
    p.add_argument("--n-iter", type=int, default=32, help="Griffin-Lim iterations (default 32)")
    p.add_argument("--seed", type=int, default=0, help="Griffin-Lim's random phases (fixed in the file)")


@_fails_with(_audio_errors)
def _audio_export(args) -> int:
    from opforge.tools import audio_demo

    return audio_demo.export(args.out, args.sr, args.n_mfcc, args.n_mels, args.n_fft, args.n_iter, args.seed)


if __name__ == "__main__":
    sys.exit(main())
