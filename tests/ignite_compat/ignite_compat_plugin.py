"""A pytest plugin for ignite's own tests: swap ignite's savers for ours and write each test's outcome.

Loaded into a run of ignite's test files (``tests/ignite_compat/suite.py`` does it), by module
name: ``pytest -p ignite_compat_plugin`` with this folder on ``PYTHONPATH``. Ignite's tests are
a package named ``tests`` too, so this module never imports ours.

* ``--compat-swap``: ``ignite.handlers.clearml_logger.ClearMLSaver`` becomes
  ``tracker_saver.clearml.ClearMLSaver`` before ignite's test module imports it, and the name
  ``DiskSaver`` in ignite's ``test_checkpoint.py`` becomes ``TrackerDiskSaver`` (see
  :func:`tracker_disk_saver`) while each of its tests runs (but those of :data:`NAME_ONLY`).
  Only that name: ``Checkpoint``, ``ModelCheckpoint`` and their ``isinstance(save_handler,
  DiskSaver)`` checks keep ignite's own class, as in a user's code, so ``last_checkpoint`` and
  ``reload_objects`` work with ours only because TrackerSaver is a DiskSaver.
* ``--compat-only FILE=WORD,...``: in FILE, only the tests ``-k "WORD or ..."`` would select, so
  one run can take several files, each with its own selection.
* ``--compat-report PATH``: a JSON object: ``tests``, one entry per test id (its outcome,
  ``passed``, ``failed`` or ``skipped``; its error, the crash message on one line; whether it
  built one of our savers), and ``tracker_saver``, the file the package was imported from.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

#: The test id of the test running now, the ids of those that built one of our savers, the outcomes.
_current: list[str] = []
_built: set[str] = set()
_reports: dict[str, dict[str, Any]] = {}

#: Folders ignite's tests name outright, which TrackerSaver creates where DiskSaver(create_dir=False)
#: refuses: removed after the run when it made them, so a later run with ignite's classes sees none.
FIXED_PATHS = (Path("/tmp/non-existing-folder"),)

#: With ``--compat-swap``: ``root``, the temporary folder; ``disk_saver``, the adapter class;
#: ``absent``, the :data:`FIXED_PATHS` that did not exist before the run.
_swap: dict[str, Any] = {}

#: Tests of ``test_checkpoint.py`` that keep ignite's ``DiskSaver`` under its name, and why.
NAME_ONLY = {
    "test_save_handler_as_str": "it builds no saver: it checks that Checkpoint(save_handler=PATH) builds ignite's own",
}


def _record_build() -> None:
    if _current:
        _built.add(_current[-1])


def tracker_disk_saver(root: Path) -> type:
    """``TrackerDiskSaver``: DiskSaver's constructor over a real ``TrackerSaver``, its files under ``root``."""
    from tracker_saver import TrackerSaver

    count = itertools.count()

    class TrackerDiskSaver(TrackerSaver):
        """``DiskSaver(dirname, atomic, create_dir, require_empty, save_on_rank, **kwargs)`` as a ``TrackerSaver``.

        What it maps: ``dirname`` is TrackerSaver's ``dirname`` (the local folder where each
        live checkpoint appears under its filename); each saver gets a fresh output_uri and
        SQLite registry of its own under the plugin's temporary folder (removed at the end of
        the run); ``save_on_rank`` is passed on, and the other keywords as ``save_kwargs``
        (for ``torch.save``). ``atomic``, ``create_dir`` and ``require_empty`` are dropped:
        TrackerSaver always writes atomically, creates its folders and reuses slots.
        Nothing else is changed or faked.
        """

        def __init__(
            self,
            dirname: str | os.PathLike[str],
            atomic: bool = True,
            create_dir: bool = True,
            require_empty: bool = True,
            save_on_rank: int = 0,
            **kwargs: Any,
        ) -> None:
            _record_build()
            own = root / f"saver{next(count)}"
            super().__init__(
                own / "output",
                registry=str(own / "registry.db"),
                dirname=dirname,
                save_on_rank=save_on_rank,
                save_kwargs=kwargs,
            )

    return TrackerDiskSaver


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ignite-compat", "ignite's own tests against tracker_saver")
    group.addoption("--compat-swap", action="store_true", help="swap ignite's ClearMLSaver and DiskSaver for ours")
    group.addoption("--compat-report", metavar="PATH", help="write each test's outcome to PATH (JSON)")
    group.addoption(
        "--compat-only",
        metavar="FILE=WORD,...",
        action="append",
        default=[],
        help="run only the tests of FILE that -k WORD would select for one of the WORDs (other files: all)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = dict(option.split("=", 1) for option in config.getoption("--compat-only"))
    if not only:
        return
    keep, drop = [], []
    for item in items:
        words = only.get(item.path.name)
        # -k WORD: a case-insensitive substring of one of the item's keywords (names, markers)
        wanted = words is None or any(w.lower() in k.lower() for w in words.split(",") for k in item.keywords)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--compat-swap"):
        return
    import ignite.handlers.clearml_logger as clearml_logger

    from tracker_saver.clearml import ClearMLSaver

    root = Path(tempfile.mkdtemp(prefix="ignite-compat-"))
    absent = [path for path in FIXED_PATHS if not path.exists()]
    _swap.update(root=root, disk_saver=tracker_disk_saver(root), absent=absent)
    # Before ignite's test module runs `from ignite.handlers.clearml_logger import ClearMLSaver`.
    clearml_logger.ClearMLSaver = _counted(ClearMLSaver)  # type: ignore[misc]


def _counted(cls: type) -> type:
    """``cls`` itself, noting which test builds one (its ``__init__`` is wrapped, nothing else)."""
    init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _record_build()
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    module = getattr(item, "module", None)
    swapped = (
        bool(_swap)
        and module is not None
        and module.__name__.endswith("test_checkpoint")
        and getattr(item, "originalname", item.name) not in NAME_ONLY
    )
    if swapped:
        ignite_class, module.DiskSaver = module.DiskSaver, _swap["disk_saver"]
    _current.append(item.nodeid)
    try:
        return (yield)
    finally:
        _current.pop()
        if swapped:
            module.DiskSaver = ignite_class


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _reports.setdefault(report.nodeid, {"outcome": None, "error": None, "ours": False})
    if report.failed:
        if entry["outcome"] != "failed":
            entry["error"] = _error_text(report)
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] != "failed":
        entry["outcome"] = "skipped"
    elif report.when == "call" and report.passed and entry["outcome"] is None:
        entry["outcome"] = "passed"
    entry["ours"] = report.nodeid in _built


def _error_text(report: pytest.TestReport) -> str:
    """The crash message on one line; for a chained error (``pytest.warns`` around a raise) the first, then the last."""
    crashes = [c for _, c, _ in getattr(report.longrepr, "chain", [])] or [getattr(report.longrepr, "reprcrash", None)]
    texts = [c.message if c is not None else str(report.longrepr) for c in crashes]
    one_line = [" / ".join(ln.strip() for ln in t.strip().splitlines() if ln.strip()) for t in texts]
    if len(one_line) == 1:
        return one_line[0][:500]
    return f"{one_line[0][:300]} (then: {one_line[-1][:200]})"


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.getoption("--compat-report")
    if path:
        imported = sys.modules.get("tracker_saver")
        where = getattr(imported, "__file__", None)
        Path(path).write_text(json.dumps({"tracker_saver": where, "tests": _reports}, indent=1, sort_keys=True))
    if _swap:
        shutil.rmtree(_swap["root"], ignore_errors=True)
        for path in _swap["absent"]:
            with contextlib.suppress(OSError):  # only an empty folder: never someone else's files
                path.rmdir()
