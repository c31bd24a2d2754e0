"""Count what one steady save and one ``tracker-saver models list`` walk through in tracker_saver.

(a) one steady synchronous save: a real Ignite ``Engine`` and ``Checkpoint(TrackerSaver(folder,
SQLite), n_saved=2)``, after warm-up saves that fill both slots and evict once, so the counted
save replaces a slot as every later save does; (b) ``tracker-saver models list`` on that
registry, in a fresh interpreter (its own imports are part of the walk), through the CLI's
``main``. For each: the package's files and functions called (distinct code objects, lambdas and
comprehensions included, module bodies not), the files entered counting module bodies run by
imports, and the deepest stack of tracker_saver frames; for (b) also the package's modules
imported (``sys.modules`` before and after) and the ``ArgumentParser`` objects built.

Only the public surface is used (``TrackerSaver``, ``tracker_saver.cli.main.main``), so the
same script measures an older checkout: ``PYTHONPATH=/tmp/base python scripts/trace_path.py``.

Prints a small table, then one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any


@dataclass
class Walk:
    """What a profiled stretch of code entered in one package folder."""

    root: str
    functions: set[tuple[str, int, str]] = field(default_factory=set)
    deepest: int = 0
    parsers: int = 0

    def inside(self, filename: str) -> bool:
        return filename.startswith(self.root)

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code is argparse.ArgumentParser.__init__.__code__:
            self.parsers += 1
        if not self.inside(code.co_filename):
            return
        self.functions.add((code.co_filename, code.co_firstlineno, code.co_qualname))
        depth, at = 0, frame
        while at is not None:
            depth += self.inside(at.f_code.co_filename)
            at = at.f_back
        self.deepest = max(self.deepest, depth)

    @contextlib.contextmanager
    def tracing(self) -> Any:
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    def counts(self) -> dict[str, int]:
        """Files and functions called (module bodies, run once at import, counted apart), deepest stack."""
        called = {(f, n, q) for f, n, q in self.functions if q != "<module>"}
        return {
            "files": len({f for f, _, _ in called}),
            "functions": len(called),
            "deepest": self.deepest,
            "files_with_imports": len({f for f, _, _ in self.functions}),
        }


def package_root() -> str:
    """The package's folder, found without importing it (its imports are part of walk (b))."""
    spec = importlib.util.find_spec("tracker_saver")
    assert spec is not None and spec.submodule_search_locations, "tracker_saver is not importable"
    return str(Path(list(spec.submodule_search_locations)[0]).resolve()) + os.sep


def steady_save(folder: Path) -> dict[str, int]:
    """(a): profile one save after the slots are full; returns its counts."""
    import torch
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint

    from tracker_saver import TrackerSaver

    saver = TrackerSaver(folder / "ckpt", project="trace", run="r1", registry=str(folder / "reg.db"))
    engine = Engine(lambda e, b: None)
    checkpoint = Checkpoint({"model": torch.nn.Linear(4, 2)}, saver, n_saved=2)
    for _ in range(3):  # two fill the slots, the third replaces one: the path every later save takes
        engine.state.iteration += 1
        checkpoint(engine)
    engine.state.iteration += 1
    walk = Walk(package_root())
    with walk.tracing():
        checkpoint(engine)
    saver.close()
    return walk.counts()


def models_list(registry: str) -> dict[str, int]:
    """(b), run in a fresh interpreter: profile importing the CLI and ``main(["models", "list"])``."""
    before = set(sys.modules)
    walk = Walk(package_root())
    with walk.tracing(), contextlib.redirect_stdout(io.StringIO()):
        from tracker_saver.cli.main import main

        status = main(["models", "list", "--registry", registry])
    if status != 0:
        raise SystemExit(f"models list exited {status}")
    imported = set(sys.modules) - before
    counts = walk.counts()
    counts["modules_imported"] = len(imported)
    counts["package_modules_imported"] = sum(1 for m in imported if m.split(".")[0] == "tracker_saver")
    counts["parsers"] = walk.parsers
    return counts


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--models-list":
        print(json.dumps(models_list(sys.argv[2])))
        return
    with tempfile.TemporaryDirectory() as tmp:
        save = steady_save(Path(tmp))
        out = subprocess.run(
            [sys.executable, __file__, "--models-list", str(Path(tmp) / "reg.db")],
            check=True,
            capture_output=True,
            text=True,
        )
        listing = json.loads(out.stdout.strip().splitlines()[-1])
    rows = [("one steady save", save), ("models list", listing)]
    print(f"{'walk':<17}{'files':>7}{'functions':>11}{'deepest':>9}{'files+imports':>15}{'imported':>10}{'parsers':>9}")
    for name, c in rows:
        imported, parsers = c.get("package_modules_imported", ""), c.get("parsers", "")
        print(
            f"{name:<17}{c['files']:>7}{c['functions']:>11}{c['deepest']:>9}{c['files_with_imports']:>15}"
            f"{imported:>10}{parsers:>9}"
        )
    print(json.dumps({"save": save, "models_list": listing}))


if __name__ == "__main__":
    main()
