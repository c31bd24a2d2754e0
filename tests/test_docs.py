"""The documentation site builds strictly, and its code and claims cannot drift from the code.

The rules, each a test below:

* ``mkdocs build --strict`` succeeds: no broken link, nav entry, snippet or API reference.
* Every ``python`` block in ``docs/`` is either a snippet include of ``examples/`` (which
  ``tests/test_examples.py`` runs) or a doctest (``>>>``), which runs here. Every ``python``
  block in ``README.md`` (GitHub cannot include snippets) is a verbatim excerpt of an example.
  A fence without a language must not hold Python.
* Every test a page names (``tests/test_x.py::test_y`` or a bare ``test_y``) exists.
* The API reference documents every name of ``tracker_saver.__all__``.
* Every ``python -m MODULE`` a page tells people to run can run as a script.
* Every shell block runs as written, or is marked ``<!-- not-run: WHY -->``: ``tests/test_docs_shell.py``.
"""

from __future__ import annotations

import ast
import doctest
import html
import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
SOURCES = [*PAGES, ROOT / "README.md"]
SNIPPET = re.compile(r'^--8<-- "(examples/[\w.-]+\.py)(?::([\w-]+))?"$')
FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>```+|~~~+)(?P<lang>[\w-]*)[^\n]*$")
LOOKS_LIKE_PYTHON = re.compile(r"^\s*(import \w|from [\w.]+ import |>>> |def \w+\(|class \w+[(:])", re.M)


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, indented ones (in admonitions, grids) included."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, start = len(match["indent"]), match["fence"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        blocks.append(Block(path, start + 1, match["lang"].lower(), "\n".join(body)))
        i += 1
    return blocks


BLOCKS = [block for path in SOURCES for block in fenced_blocks(path)]
PYTHON = ("python", "py", "pycon")


def section(path: str, name: str | None) -> str:
    """The text of ``examples/...py`` or of its ``--8<-- [start:name]`` … ``[end:name]`` section."""
    text = (ROOT / path).read_text()
    if name is None:
        return text
    match = re.search(rf"# --8<-- \[start:{name}\]\n(.*?)\n[ ]*# --8<-- \[end:{name}\]", text, re.S)
    assert match, f"{path} has no section {name!r}: mark it with # --8<-- [start:{name}] … [end:{name}]"
    return match.group(1)


# ------------------------------------------------------------------ the build


def test_the_site_builds_with_mkdocs_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in proc.stderr.splitlines() if not line.startswith("INFO")]
    assert proc.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems[-60:])
    page = (tmp_path / "site" / "index.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page))  # the code is highlighted: one span per token
    assert "saver = TrackerSaver(output_uri" in text, "the quickstart snippet was not included"


# ------------------------------------------------------------------ code blocks


def test_every_python_block_in_the_docs_is_an_included_example_or_a_doctest() -> None:
    bad = []
    for block in BLOCKS:
        if block.path.name == "README.md" or block.lang not in PYTHON:
            continue
        lines = [line.strip() for line in block.text.strip().splitlines()]
        if lines and lines[0].startswith(">>>"):
            continue
        if not lines or not all(SNIPPET.match(line) for line in lines):
            bad.append(block.where)
    assert not bad, (
        "these python blocks are neither a snippet include of examples/ "
        '(--8<-- "examples/x.py:section") nor a doctest (>>>): ' + ", ".join(bad)
    )


def test_every_snippet_include_names_an_existing_example_section() -> None:
    for block in BLOCKS:
        for line in block.text.splitlines():
            if "--8<--" in line:
                match = SNIPPET.match(line.strip())
                assert match, f"{block.where}: snippets may only include examples/*.py, got {line.strip()!r}"
                assert (ROOT / match[1]).is_file(), f"{block.where}: {match[1]} does not exist"
                section(match[1], match[2])


def test_every_python_block_in_the_readme_is_a_verbatim_excerpt_of_an_example() -> None:
    examples = {path.name: path.read_text() for path in (ROOT / "examples").glob("*.py")}
    for block in fenced_blocks(ROOT / "README.md"):
        if block.lang in PYTHON:
            assert any(block.text.strip() in text for text in examples.values()), (
                f"{block.where}: README's python blocks must be copied verbatim from examples/ "
                "(which CI runs); this one is not"
            )


def test_no_unlabelled_block_holds_python() -> None:
    bad = [block.where for block in BLOCKS if not block.lang and LOOKS_LIKE_PYTHON.search(block.text)]
    assert not bad, f"label these blocks python (and make them examples or doctests): {', '.join(bad)}"


DOCTESTS = [block for block in BLOCKS if block.lang in PYTHON and block.text.lstrip().startswith(">>>")]


@pytest.mark.parametrize("block", DOCTESTS, ids=[block.where for block in DOCTESTS])
def test_the_doctest_blocks_of_the_docs_run(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    test = doctest.DocTestParser().get_doctest(block.text, {}, block.where, str(block.path), block.line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"the doctest at {block.where} failed (its output is above)"


# ------------------------------------------------------------------ claims and references


def _test_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


def test_every_test_a_page_names_exists() -> None:
    names, missing = _test_names(), []
    for path in SOURCES:
        text = path.read_text()
        for file, name in re.findall(r"`(tests/[\w/.-]+\.py)(?:::(\w+))?`", text):
            if not (ROOT / file).is_file():
                missing.append(f"{path.name}: {file}")
            elif name and not re.search(rf"def {name}\b", (ROOT / file).read_text()):
                missing.append(f"{path.name}: {file}::{name}")
        missing += [f"{path.name}: {name}" for name in re.findall(r"`(test_\w+)`", text) if name not in names]
    assert not missing, "the docs cite tests that do not exist (renamed?): " + ", ".join(missing)


def test_the_api_reference_covers_the_public_api() -> None:
    tree = ast.parse((ROOT / "tracker_saver" / "__init__.py").read_text())
    public = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
    )
    page = (DOCS / "api.md").read_text()
    missing = [name for name in public if f"::: tracker_saver.{name}\n" not in page + "\n"]
    assert not missing, f"docs/api.md lacks `::: tracker_saver.NAME` for {missing}"


def test_every_python_m_command_in_the_docs_can_run() -> None:
    for block in BLOCKS:
        if block.lang not in ("bash", "sh", "console"):
            continue
        for module in re.findall(r"python -m ([\w.]+)", block.text):
            if module in {"pytest", "pip", "venv", "mkdocs", "tracker_saver"}:
                continue
            spec = importlib.util.find_spec(module)
            assert spec is not None and spec.origin, f"{block.where}: python -m {module}: no such module"
            if spec.submodule_search_locations:  # a package: needs its __main__
                assert importlib.util.find_spec(f"{module}.__main__"), f"{block.where}: {module} has no __main__"
            else:
                source = Path(spec.origin).read_text()
                assert '__name__ == "__main__"' in source, f"{block.where}: python -m {module} does nothing"


def test_every_example_is_on_the_examples_page() -> None:
    page = (DOCS / "examples.md").read_text()
    missing = [path.name for path in (ROOT / "examples").glob("*.py") if f"`examples/{path.name}`" not in page]
    assert not missing, f"docs/examples.md does not list {missing}"
