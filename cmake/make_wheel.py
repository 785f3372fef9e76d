"""`make wheel`: turns the wheel pip built against the installed TensorFlow into opforge's binary
wheel for that TensorFlow: dist/opforge-<version>+tf<X.Y>-<python tag>-<abi>-<platform>.whl.

A compiled custom-op library loads only into the TensorFlow release it was built against (opforge
refuses any other at load), so the wheel says which: its version carries the local label
`+tf<X.Y>`, and its `cpu` / `gpu` extras require that release (`tensorflow-cpu==X.Y.*`) instead
of the source package's supported range. Everything else (files, tags) is pip's wheel as built;
RECORD is rewritten with the new hashes.

    python cmake/make_wheel.py BUILT_WHEEL OUT_DIR TF_VERSION
"""
from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def retag(built: Path, out_dir: Path, tf_version: str) -> Path:
    major_minor = ".".join(tf_version.split(".")[:2])
    match = re.match(r"(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl$", built.name)
    if not match:
        raise SystemExit(f"make_wheel: not a wheel file name: {built.name}")
    name, version, tags = match["name"], match["version"], match["tags"]
    if "+" in version:
        raise SystemExit(f"make_wheel: {built.name} already has a local version label")
    new_version = f"{version}+tf{major_minor}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    pin = f"=={major_minor}.*"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{new_version}-{tags}.whl"
    records = []
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            path = info.filename
            if path == f"{old_info}/RECORD":
                continue
            data = src.read(info)
            if path.startswith(old_info + "/"):
                path = new_info + path[len(old_info):]
            if path == f"{new_info}/METADATA":
                text = data.decode()
                text = re.sub(r"^Version: .*$", f"Version: {new_version}", text, count=1, flags=re.M)
                # The extras name the one TensorFlow release this binary loads into.
                text = re.sub(r'^(Requires-Dist: tensorflow-cpu)[^;\n]*;',
                              rf'\1{pin};', text, flags=re.M)
                text = re.sub(r'^(Requires-Dist: tensorflow\[and-cuda\])[^;\n]*;',
                              rf'\1{pin};', text, flags=re.M)
                data = text.encode()
            out = zipfile.ZipInfo(path, date_time=info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(out, data)
            records.append(f"{path},{_record_hash(data)},{len(data)}")
        records.append(f"{new_info}/RECORD,,")
        record = zipfile.ZipInfo(f"{new_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        record.external_attr = 0o644 << 16
        dst.writestr(record, "\n".join(records) + "\n")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(retag(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
