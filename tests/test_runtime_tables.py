"""The runtime tables (`opforge.onnx.STANDARD_OPS` / `CUSTOM_OPS`, `opforge.lite.STANDARD_OPS` /
`CUSTOM_OPS`: what each op becomes when a model is exported) against the ops the library
registers (`opforge.ops.OP_NAMES`) and the ops each adapter library runs: a new op that is left
out of a table, or named in one but not built into its adapter, fails here."""
from __future__ import annotations

import pytest

import opforge

# The ops a model holds; the gradient ops run only in training, never in an exported model.
FORWARD_OPS = {name for name in opforge.ops.OP_NAMES if "Grad" not in name}


def _tables(module):
    return set(module.STANDARD_OPS), set(module.CUSTOM_OPS)


@pytest.mark.parametrize("runtime", ["onnx", "lite"])
def test_every_forward_op_is_standard_or_custom_in_each_runtime(runtime):
    module = pytest.importorskip(f"opforge.{runtime}")
    standard, custom = _tables(module)
    assert not standard & custom, f"both standard and custom: {sorted(standard & custom)}"
    assert standard | custom == FORWARD_OPS, (
        f"missing from opforge.{runtime}'s tables: {sorted(FORWARD_OPS - standard - custom)}; "
        f"named there but not registered: {sorted((standard | custom) - FORWARD_OPS)}")


@pytest.mark.parametrize("runtime", ["onnx", "lite"])
def test_each_adapter_library_runs_every_forward_op(runtime):
    """Every op, custom ones above all, runs as an opforge node in its adapter (standard_ops=False
    writes every op so): the library's exported list of op names holds them all."""
    module = pytest.importorskip(f"opforge.{runtime}")
    path = module.library_path(must_exist=False)
    if not path.is_file():
        pytest.skip(f"{path.name} was not built (tests/test_adapters_built.py says whether it must be)")
    names = module._library_op_types(path) if runtime == "onnx" else module._library_op_names(path)
    names = {n if n.startswith("Opforge>") else "Opforge>" + n for n in names or ()}
    assert FORWARD_OPS <= names, sorted(FORWARD_OPS - names)
