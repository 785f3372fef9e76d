"""Installing into an environment of one's own: `pip install --no-build-isolation .` where the
build requirements are missing names them (the full fresh-environment install is
`make install-check`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_supported_tensorflow_range_is_stated_once_in_each_place():
    """The range opforge builds against: opforge._loader.SUPPORTED_TF (doctor), the source
    package's `cpu` / `gpu` extras, and the Makefile's compat-check versions all agree."""
    import re

    from opforge._loader import SUPPORTED_TF, tf_supported

    low, high = SUPPORTED_TF
    pyproject = (ROOT / "pyproject.toml").read_text()
    next_minor = f"{high.split('.')[0]}.{int(high.split('.')[1]) + 1}"
    assert f'cpu = ["tensorflow-cpu>={low},<{next_minor}"]' in pyproject
    assert f'gpu = ["tensorflow[and-cuda]>={low},<{next_minor}"]' in pyproject
    versions = re.search(r"^TF_VERSIONS \?= (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    minors = sorted({tuple(int(p) for p in v.split(".")[:2]) for v in versions})
    lo, hi = (tuple(int(p) for p in v.split(".")) for v in SUPPORTED_TF)
    assert minors == [(lo[0], m) for m in range(lo[1], hi[1] + 1)], versions
    assert tf_supported("2.16.2") and tf_supported("2.21.0") and tf_supported("2.21.1rc0")
    assert not tf_supported("2.15.1") and not tf_supported("2.22.0")


def _fake_wheel(path: Path) -> Path:
    import zipfile

    wheel = path / "opforge-0.1.0-cp312-cp312-linux_x86_64.whl"
    metadata = ("Metadata-Version: 2.1\nName: opforge\nVersion: 0.1.0\nRequires-Dist: numpy\n"
                "Provides-Extra: cpu\nRequires-Dist: tensorflow-cpu<2.22,>=2.16; extra == \"cpu\"\n"
                "Provides-Extra: gpu\nRequires-Dist: tensorflow[and-cuda]<2.22,>=2.16; extra == \"gpu\"\n\n"
                "# opforge\n")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("opforge/__init__.py", "x = 1\n")
        z.writestr("opforge/_opforge_ops.so", b"\x7fELF not really")
        z.writestr("opforge-0.1.0.dist-info/METADATA", metadata)
        z.writestr("opforge-0.1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: cp312-cp312-linux_x86_64\n")
        z.writestr("opforge-0.1.0.dist-info/RECORD", "stale,,\n")
    return wheel


def test_make_wheel_labels_the_tensorflow_and_rewrites_record(tmp_path):
    """cmake/make_wheel.py: local version label +tf<X.Y>, extras pinned to that release, the
    dist-info renamed, and a RECORD whose hashes and sizes are the files' own."""
    import base64
    import hashlib
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("make_wheel", ROOT / "cmake" / "make_wheel.py")
    make_wheel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_wheel)
    out = make_wheel.retag(_fake_wheel(tmp_path), tmp_path / "dist", "2.21.0")
    assert out.name == "opforge-0.1.0+tf2.21-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(out) as z:
        names = z.namelist()
        assert not any(n.startswith("opforge-0.1.0.dist-info/") for n in names)
        metadata = z.read("opforge-0.1.0+tf2.21.dist-info/METADATA").decode()
        assert "Version: 0.1.0+tf2.21\n" in metadata
        assert 'Requires-Dist: tensorflow-cpu==2.21.*; extra == "cpu"' in metadata
        assert 'Requires-Dist: tensorflow[and-cuda]==2.21.*; extra == "gpu"' in metadata
        assert "Requires-Dist: numpy\n" in metadata and metadata.endswith("# opforge\n")
        rows = z.read("opforge-0.1.0+tf2.21.dist-info/RECORD").decode().splitlines()
        assert sorted(r.split(",")[0] for r in rows) == sorted(names)
        for row in rows:
            name, digest, size = row.split(",")
            if name.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), name
    with pytest.raises(SystemExit, match="already has a local version label"):
        make_wheel.retag(out, tmp_path / "again", "2.21.0")


def test_without_tools_hides_exactly_the_named_programs():
    """.ci/without-tools (CI's second pass of the optional-tool tests, install-check's wheel
    install without compilers): the named programs are gone from PATH, everything else stays."""
    script = ROOT / ".ci" / "without-tools"
    proc = subprocess.run([str(script), "ls,sed", "bash", "-c",
                           "command -v ls || echo no-ls; command -v sed || echo no-sed; command -v grep"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "without-tools: hidden from PATH: ls sed"
    assert lines[1:3] == ["no-ls", "no-sed"] and lines[3].endswith("/grep"), lines
    proc = subprocess.run([str(script), "ls"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage" in proc.stderr
