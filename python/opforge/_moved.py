"""The modules that moved when the package was laid out by role (the public API at the top, the
command-line tooling in `opforge.tools`). No file stands at an old path: `install()` puts a finder
on `sys.meta_path` (from `import opforge`, before any submodule can be imported) that answers for
each old path with the module at its new one, the same object, so
`opforge.bench.machine is opforge.tools.bench.machine`, and warns (DeprecationWarning, naming the
line that imported it). The old paths go in the release after 0.1."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

MOVED = {
    **{f"opforge.{name}": f"opforge.tools.{name}" for name in (
        "audio_demo", "bench", "check", "cli", "cuda_info", "deploy_bench", "doctor", "fuzz", "gpu_bench",
        "paths", "scaffold", "timing", "verify")},
    "opforge.spec": "opforge.ops.spec",
    "opforge.fuse": "opforge.models.fuse",
    "opforge.models.bench": "opforge.tools.yolo_bench",
    "opforge.models.parity": "opforge.tools.yolo_parity",
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        old, new = spec.name, MOVED[spec.name]
        # stacklevel 2 is this frame's caller; the import machinery's own frames are skipped, so
        # the warning names the line of the user's code that imported the old path.
        warnings.warn(f"{old} has moved to {new}; import it from there (the old path goes in the next "
                      "release)", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import machinery gave the module the old path's spec; it keeps its own.
        module.__spec__ = self._spec


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
