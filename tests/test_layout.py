"""The package laid out by role: the public API at the top, the tooling in `opforge.tools`, no
import running back up the layers, and the old paths of the modules that moved still working
(with a DeprecationWarning, and the very same module)."""
import ast
import importlib
import pathlib
import subprocess
import sys
import warnings

import pytest

import opforge
from opforge._moved import MOVED

PACKAGE = pathlib.Path(opforge.__file__).parent
PUBLIC = {"ops", "layers", "models", "data", "audio", "build", "onnx", "lite", "tools"}


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
        if rel.parts[0] == "tools" or rel.name == "_moved.py":
            continue
        for line, module in _imports(path):
            if module == "opforge.tools" or module.startswith("opforge.tools."):
                offenders.append(f"{rel}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


def test_nothing_in_the_package_uses_an_old_path():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_moved.py":
            continue
        for line, module in _imports(path):
            if module in MOVED:
                offenders.append(f"{path.relative_to(PACKAGE)}:{line} imports {module}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_gives_the_moved_module_with_a_deprecation_warning(old):
    # A fresh interpreter: here the old path may already have been imported by another test.
    code = (
        "import warnings, importlib, sys\n"
        "import opforge\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        f"assert new.__spec__.name == {MOVED[old]!r}, new.__spec__\n"
        "msgs = [str(x.message) for x in w if issubclass(x.category, DeprecationWarning)]\n"
        f"assert any({old!r} in m and {MOVED[old]!r} in m for m in msgs), msgs\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_the_warning_names_the_importing_line_and_shows_by_default_in_a_script(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text("import opforge\nfrom opforge.bench import machine\nprint(machine() != '')\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "True" in out.stdout
    assert f"{script}:2: DeprecationWarning: opforge.bench has moved to opforge.tools.bench" in out.stderr


def test_attribute_access_on_an_old_name_works_too():
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert opforge.timing is importlib.import_module("opforge.tools.timing")


def test_the_command_line_entry_point_is_the_moved_cli():
    from importlib.metadata import entry_points

    scripts = [e for e in entry_points(group="console_scripts") if e.name == "opforge"]
    assert scripts and scripts[0].value == "opforge.tools.cli:main"
