"""The `opforge` command: doctor, verify and bench."""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = argparse.ArgumentParser(prog="opforge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="build and runtime information; exits non-zero if the library cannot load")
    p_verify = sub.add_parser("verify", help="every op against its reference: errors and speed")
    p_verify.add_argument("ops", nargs="*", help="ops to verify (default: all)")
    p_verify.add_argument("--json", action="store_true", help="machine-readable output")
    p_verify.add_argument("--size", type=int, default=None,
                          help="elements in the speed check (default: each op's own case)")
    p_verify.add_argument("--repeats", type=int, default=30)
    p_bench = sub.add_parser("bench", help="time ops against TensorFlow and tf.py_function")
    p_bench.add_argument("ops", nargs="*", help="ops to benchmark (default: all)")
    p_bench.add_argument("--size", type=int, default=None,
                         help="elements in every case; model-shaped cases scale their batch "
                              "(default: each case's own size, 4M for element-wise ops)")
    p_bench.add_argument("--repeats", type=int, default=50)
    p_bench.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.command != "doctor" and args.size is not None and args.size <= 0:
        parser.error(f"--size must be a positive number of elements, got {args.size}")

    from opforge._loader import LoadError

    try:
        if args.command == "doctor":
            from opforge import doctor

            return doctor.run()
        if args.command == "verify":
            from opforge import verify

            return verify.run(args.json, args.size, args.repeats, args.ops)
        from opforge import bench

        return bench.run(args.ops, args.size, args.repeats, args.json)
    except LoadError as exc:
        print(f"opforge {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
