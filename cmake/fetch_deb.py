#!/usr/bin/env python3
"""Fetches Debian packages (headers) into a build folder, installing nothing.

The runtime adapters need headers no PyPI wheel ships: ONNX Runtime's C API
(`libonnxruntime-dev`, Debian trixie and later) and LiteRT's C structs
(`libtensorflow-lite-dev`, sid), with flexbuffers (`libflatbuffers-dev`). This script downloads
them with apt from the release that has them, using its own sources list and state folders under
DEST, so apt checks the archive's signatures with the machine's Debian keyring as usual while
nothing is installed and the machine's own apt state is untouched. The packages are unpacked into
DEST/root; a second run with everything in place does nothing (the build calls it at configure
time).

    fetch_deb.py DEST SUITE PACKAGE[=VERSION] [SUITE PACKAGE ...] --check FILE [--check FILE]

Each --check FILE (relative to DEST/root) must exist afterwards. Exits 0 when they all do; else
prints one line saying why (no apt-get, the archive unreachable, the package missing) and exits 1.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

MIRROR = os.environ.get("OPFORGE_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def _apt_options(state: Path) -> list:
    return [
        f"-oDir::Etc::SourceList={state / 'sources.list'}",
        "-oDir::Etc::SourceParts=/nonexistent",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::Cache::Archives={state / 'archives'}",
        f"-oDir::Cache={state / 'cache'}",
        f"-oDir::State::status={state / 'status'}",
        "-oDebug::NoLocking=1",
        "-oAPT::Sandbox::User=root",
        "-qq",
    ]


def fetch(dest: Path, wanted: list, checks: list) -> str:
    """Downloads and unpacks `wanted` [(suite, package)] into dest/root; '' or why it failed."""
    root = dest / "root"
    if checks and all((root / c).exists() for c in checks):
        return ""
    apt = shutil.which("apt-get")
    dpkg = shutil.which("dpkg-deb")
    if not apt or not dpkg:
        return "no apt-get / dpkg-deb on this machine (a Debian-based one has them)"
    for suite in sorted({s for s, _ in wanted}):
        state = dest / "apt" / suite
        for sub in ("lists/partial", "archives/partial", "cache"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        (state / "sources.list").write_text(f"deb {MIRROR} {suite} main\n")
        (state / "status").touch()
        opts = _apt_options(state)
        run = subprocess.run([apt, *opts, "update"], capture_output=True, text=True)
        if run.returncode != 0:
            return f"apt-get update for Debian {suite} failed: {(run.stderr or run.stdout).strip()[-300:]}"
        packages = [p for s, p in wanted if s == suite]
        run = subprocess.run([apt, *opts, "download", *packages], cwd=state / "archives",
                             capture_output=True, text=True)
        if run.returncode != 0:
            return f"apt-get download {' '.join(packages)} from Debian {suite} failed: " + (
                (run.stderr or run.stdout).strip()[-300:])
        root.mkdir(parents=True, exist_ok=True)
        for deb in sorted((state / "archives").glob("*.deb")):
            run = subprocess.run([dpkg, "-x", str(deb), str(root)], capture_output=True, text=True)
            if run.returncode != 0:
                return f"dpkg-deb -x {deb.name} failed: {run.stderr.strip()[-300:]}"
    missing = [c for c in checks if not (root / c).exists()]
    if missing:
        return f"the packages do not contain {', '.join(missing)}"
    return ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("pairs", nargs="+", help="SUITE PACKAGE pairs")
    parser.add_argument("--check", action="append", default=[])
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give SUITE PACKAGE pairs")
    wanted = list(zip(args.pairs[::2], args.pairs[1::2]))
    why = fetch(args.dest.resolve(), wanted, args.check)
    if why:
        print(why)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
