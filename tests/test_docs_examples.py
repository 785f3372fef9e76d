"""Every Python code block of the README and of the manual (docs/) runs, so no example can drift
from the API. A page's blocks run in order in one fresh interpreter (a later block may use what an
earlier one defined), in an empty folder (what they write stays there); a traceback names the
page and its line.

A block whose full size takes long runs at a smaller one, said in the page's source just above
it, in an HTML comment the rendered page does not show:

    <!-- docs-test: replace("epochs=30", "epochs=1"); replace("800", "64") -->

Each replacement must match the block (else the test fails: a marker cannot go stale), and there
is no other way to leave a block out."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
PYTHON_FENCES = {"python", "py", "python3"}
MARKER = re.compile(r"^<!--\s*docs-test:(.*?)-->\s*$")
REPLACE = re.compile(r'replace\(\s*"((?:[^"\\]|\\.)*)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)')


class Block:
    def __init__(self, page, line, code, replacements):
        self.page, self.line, self.code, self.replacements = page, line, code, replacements

    def source(self) -> str:
        code = self.code
        for old, new in self.replacements:
            if old not in code:
                raise AssertionError(f"{self.page}:{self.line}: docs-test replace({old!r}, ...) matches nothing "
                                     "in the block below it")
            code = code.replace(old, new)
        return code


def blocks(path: pathlib.Path):
    """The Python blocks of a Markdown page: (1-based line of the first code line, code, replacements)."""
    lines = path.read_text().split("\n")
    found, i, marker = [], 0, None
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line.strip())
        if m:
            spec = m.group(1).strip()
            pairs = REPLACE.findall(spec)
            rest = REPLACE.sub("", spec).replace(";", "").strip()
            if rest:
                raise AssertionError(f"{path}:{i + 1}: docs-test marker says {rest!r}; only replace(\"a\", \"b\") is known")
            marker = [(json.loads(f'"{a}"'), json.loads(f'"{b}"')) for a, b in pairs]
            i += 1
            continue
        fence = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", line)
        if fence:
            indent, ticks, info = fence.groups()
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(ticks):
                j += 1
            if info.lower() in PYTHON_FENCES:
                code = "\n".join(l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j])
                name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                found.append(Block(name, i + 2, code, marker or []))
            elif marker:
                raise AssertionError(f"{path}:{i + 1}: a docs-test marker above a block that is not Python")
            marker = None
            i = j + 1
            continue
        if line.strip() and marker is not None:
            raise AssertionError(f"{path}:{i + 1}: a docs-test marker must stand just above a Python block")
        i += 1
    return found


def pages_with_blocks():
    return [p for p in PAGES if blocks(p)]


RUNNER = r'''
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for block in blocks:
    # Padded with blank lines so that a traceback's line numbers are the page's own.
    code = compile("\n" * (block["line"] - 1) + block["source"], block["page"], "exec")
    exec(code, namespace)
print("docs-examples: ran", len(blocks), "blocks")
'''


def test_the_readme_and_the_manual_have_python_examples():
    names = {str(p.relative_to(ROOT)) for p in pages_with_blocks()}
    assert "README.md" in names and len(names) >= 8, names


@pytest.mark.parametrize("page", pages_with_blocks(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_of_the_page_runs(page, tmp_path):
    found = blocks(page)
    spec = [{"page": str(b.page), "line": b.line, "source": b.source()} for b in found]
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    (tmp_path / "runner.py").write_text(RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="error::DeprecationWarning:__main__")
    out = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")], cwd=work,
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{page.relative_to(ROOT)}:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    assert f"ran {len(found)} blocks" in out.stdout


def test_a_marker_shrinks_its_block_and_a_stale_one_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('Text.\n\n<!-- docs-test: replace("epochs=30", "epochs=1") -->\n```python\nfit(epochs=30)\n```\n'
                    '\n```python\nx = 1\n```\n')
    first, second = blocks(page)
    assert (first.line, first.source(), second.source()) == (5, "fit(epochs=1)", "x = 1")
    page.write_text('<!-- docs-test: replace("epochs=30", "epochs=1") -->\n```python\nfit(epochs=3)\n```\n')
    (stale,) = blocks(page)
    with pytest.raises(AssertionError, match="matches nothing"):
        stale.source()
    page.write_text('<!-- docs-test: skip -->\n```python\nx = 1\n```\n')
    with pytest.raises(AssertionError, match="only replace"):
        blocks(page)


def test_the_readme_is_a_front_door_whose_links_resolve():
    """The README stays short (the manual is in docs/) and every relative link in it, to a page
    of the manual or a file, points at something in the tree (mkdocs --strict checks the links
    inside docs/, not the README's)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250, "README.md is the front door: keep it under 250 lines"
    local = relative_links(ROOT / "README.md")
    assert len(local) >= 20, local
    missing = missing_links(ROOT / "README.md")
    assert not missing, f"README.md links to what is not in the tree: {missing}"
    for page in ("docs/getting-started.md", "docs/ops/index.md", "docs/guides/deploy.md",
                 "docs/guides/write-your-own-op.md", "docs/measured.md"):
        assert page in local, page


def test_every_relative_link_of_the_manual_resolves():
    """mkdocs --strict checks the links between pages; this checks the links to other files too
    (the benchmark's JSON, the pictures), which it lets through."""
    missing = [f"{page.relative_to(ROOT)}: {t}" for page in sorted((ROOT / "docs").rglob("*.md"))
               for t in missing_links(page)]
    assert not missing, "links to what is not in the tree:\n" + "\n".join(missing)


def relative_links(page: pathlib.Path):
    """The targets of a page's Markdown links that point into the tree (no scheme, not an anchor
    of the page itself), outside code blocks."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+:", t) and not t.startswith("#")]


def missing_links(page: pathlib.Path):
    return [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).resolve().exists()]
