"""The package laid out by role: the public API at the top, the tooling in `opforge.tools`, no
import running back up the layers, and nothing left at the paths the modules had before they
were laid out (0.1.0 is the first release: no old path is kept alive)."""
import ast
import importlib
import pathlib
import re

import pytest

import opforge

PACKAGE = pathlib.Path(opforge.__file__).parent
ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLIC = {"ops", "layers", "models", "data", "audio", "build", "onnx", "lite", "jax", "tools", "cuda_sim"}
# Where the modules stood before the layout by role; none of these paths exists any more.
OLD_PATHS = {
    **{f"opforge.{name}": f"opforge.tools.{name}" for name in (
        "audio_demo", "bench", "check", "cli", "cuda_info", "deploy_bench", "doctor", "fuzz", "gpu_bench",
        "paths", "scaffold", "timing", "verify")},
    "opforge.spec": "opforge.ops.spec",
    "opforge.fuse": "opforge.models.fuse",
    "opforge.models.bench": "opforge.tools.yolo_bench",
    "opforge.models.parity": "opforge.tools.yolo_parity",
}


def _imports(path: pathlib.Path):
    """Every module a file imports, at any depth (function-level imports included)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def test_the_top_level_holds_the_public_api_and_private_modules_only():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    public = {n for n in names if not n.startswith("_")}
    assert public == PUBLIC, f"top-level modules other than the public API: {sorted(public - PUBLIC)}"


def test_no_import_runs_back_up_into_the_tooling():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "tools":
            continue
        for line, module in _imports(path):
            if module == "opforge.tools" or module.startswith("opforge.tools."):
                offenders.append(f"{rel}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


def _tree_files(suffix):
    for folder in ("python", "tests", "docs", "examples", "cmake"):
        yield from (ROOT / folder).rglob(f"*{suffix}")


def test_no_file_in_the_tree_uses_an_old_path():
    offenders = []
    for path in _tree_files(".py"):
        if path == pathlib.Path(__file__).resolve():
            continue
        for line, module in _imports(path):
            if module in OLD_PATHS:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module} (now {OLD_PATHS[module]})")
    old = re.compile(r"\b(" + "|".join(re.escape(p) for p in OLD_PATHS) + r")\b")
    for path in [*_tree_files(".md"), ROOT / "README.md", ROOT / "Makefile"]:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            for match in old.finditer(text):
                offenders.append(f"{path.relative_to(ROOT)}:{number} names {match.group(1)} "
                                 f"(now {OLD_PATHS[match.group(1)]})")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("old", sorted(OLD_PATHS))
def test_an_old_path_is_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    parent, name = old.rsplit(".", 1)
    assert not hasattr(importlib.import_module(parent), name)  # no module attribute answers for it


def test_the_command_line_entry_point_is_the_tools_cli():
    from importlib.metadata import entry_points

    scripts = [e for e in entry_points(group="console_scripts") if e.name == "opforge"]
    assert scripts and scripts[0].value == "opforge.tools.cli:main"


def test_opforge_ops_exports_ops_and_their_types_only():
    """`opforge.ops.__all__` is the public op API: wrappers, their result types and constants, no
    spec fixtures (references, input makers), which stay importable from their op module."""
    import inspect

    import opforge

    for name in opforge.ops.__all__:
        if name in ("CPU_ONLY", "OP_NAMES", "SPECS"):
            continue
        assert not name.startswith(("tf_", "numpy_", "random_")) and "like" not in name, name
        obj = getattr(opforge.ops, name)
        if inspect.isfunction(obj):
            assert obj.__module__.startswith("opforge.ops."), name
    from opforge.ops.yolo_postprocess import tf_yolo_postprocess, yolo_like_heads  # noqa: F401  (still there)


def test_every_installed_helper_finds_the_headers_it_includes():
    # opforge.build compiles a user's op against the helpers installed in the package
    # (CMakeLists.txt: OPFORGE_BUILD_HELPERS); a header among them that includes one left out
    # would fail only in the user's build.
    helpers = PACKAGE / "include" / "opforge" / "common"
    if not helpers.is_dir():
        pytest.skip("opforge imported from the source tree, without its installed helpers")
    missing = []
    for path in sorted(p for p in helpers.rglob("*") if p.is_file()):
        for name in re.findall(r'#include "common/([^"]+)"', path.read_text()):
            if not (helpers / name).is_file():
                missing.append(f"{path.relative_to(helpers)} includes common/{name}")
    assert not missing, missing
