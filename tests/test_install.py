"""Installing into an environment of one's own: `pip install --no-build-isolation .` where the
build requirements are missing names them (the full fresh-environment install is
`make install-check`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_missing_build_backend_names_what_to_install(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    pip = tmp_path / "venv" / "bin" / "pip"
    proc = subprocess.run(
        [str(pip), "install", "--no-build-isolation", "--no-deps", "--no-index", str(ROOT)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert 'pip install "scikit-build-core>=0.10" "cmake>=3.22" ninja' in output, output[-3000:]
    assert "--no-build-isolation" in output
