"""The build made both runtime adapters where it must (`make test` sets OPFORGE_REQUIRE_ADAPTERS):
on a machine of the project's kind the README's commands fetch their headers and build them, and
the day that breaks (Debian drops a package, the archive moves) this fails with the build's own
reason instead of every ONNX Runtime and LiteRT test quietly skipping."""
from __future__ import annotations

import os

import pytest

from opforge import _loader

REQUIRED = os.environ.get("OPFORGE_REQUIRE_ADAPTERS") == "1"


@pytest.mark.skipif(not REQUIRED, reason="OPFORGE_REQUIRE_ADAPTERS is not set (make test sets it)")
@pytest.mark.parametrize("library, flag, why", [("libopforge_ort.so", "ORT", "ORT_WHY_NOT"),
                                                ("libopforge_lite.so", "LITE", "LITE_WHY_NOT"),
                                                ("libopforge_ffi.so", "FFI", "FFI_WHY_NOT")])
def test_the_build_made_the_adapter(library, flag, why):
    from opforge import _build_info as b

    path = _loader.library_path().parent / library
    assert getattr(b, flag) and path.is_file(), f"{library} was not built: {getattr(b, why) or 'not installed'}"
