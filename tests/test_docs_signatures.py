"""The signatures the op pages quote (docs/ops/*.md: a table row's first cell, or a bullet that
starts with one) are the functions' own:
the same parameters, in the same order, of the same kind (positional or keyword-only), with the
same defaults; only `name=None`, which every op takes, is left out. So the table cannot drift
from the API."""
import ast
import inspect
import math
import pathlib
import re

import pytest

import opforge

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "ops" / "index.md"
QUOTE = re.compile(r"^(?:\| |- )`(?:opforge\.ops\.)?(\w+)\(([^`]*)\)`", re.M)


def quoted(pages=None):
    """(page, op name, its quoted arguments) of every quoted signature of an opforge.ops function."""
    found = []
    for page in pages or sorted((ROOT / "docs" / "ops").glob("*.md")):
        for name, args in QUOTE.findall(page.read_text()):
            if name in opforge.ops.__all__:
                found.append((page.name, name, args))
    return found


def documented(args: str):
    """(name, kind, default) of each parameter of `def f(<args>)`; defaults evaluated."""
    fn = ast.parse(f"def f({args}): pass").body[0].args
    positional = fn.posonlyargs + fn.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(fn.defaults)) + list(fn.defaults)
    value = lambda node: (inspect.Parameter.empty if node is inspect.Parameter.empty or node is None
                          else eval(compile(ast.Expression(node), "<doc>", "eval"), {"inf": math.inf}))
    out = [(a.arg, "positional", value(d)) for a, d in zip(positional, defaults)]
    out += [(a.arg, "keyword-only", value(d)) for a, d in zip(fn.kwonlyargs, fn.kw_defaults)]
    return out


def actual(fn):
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.POSITIONAL_ONLY: "positional", inspect.Parameter.KEYWORD_ONLY: "keyword-only"}
    return [(p.name, kinds[p.kind], p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "name"]


def test_the_table_quotes_every_op_once():
    names = [n for _, n, _ in quoted([TABLE])]
    assert len(names) == len(set(names)) >= 18, names
    public = {n for n in opforge.ops.__all__ if not n.endswith("_grad") and callable(getattr(opforge.ops, n))}
    assert set(names) <= public, set(names) - public


def test_the_family_pages_quote_signatures_too():
    assert len(quoted()) >= len(quoted([TABLE])) + 12


@pytest.mark.parametrize("page, name, args", quoted(), ids=[f"{p}:{n}" for p, n, _ in quoted()])
def test_the_quoted_signature_is_the_functions(page, name, args):
    assert documented(args) == actual(getattr(opforge.ops, name)), (
        f"docs/ops/{page} quotes {name}({args}); the function is {name}{inspect.signature(getattr(opforge.ops, name))}")


def test_a_drifted_signature_is_caught():
    assert documented("x, alpha=0.3") != actual(opforge.ops.leaky_relu)
    assert documented("features, alpha=0.2, *, extra=1") != actual(opforge.ops.leaky_relu)
    assert documented("features, alpha=0.2") == actual(opforge.ops.leaky_relu)
