"""Run ignite's own saver tests twice, with ignite's classes and with ours, and count the outcomes.

The tests come from the sdist of the *installed* pytorch-ignite (``pip download --no-binary
pytorch-ignite --no-deps pytorch-ignite==X``), cached in the virtual environment, ``.venv/ignite-tests/``, and extracted
into a temporary folder for each run: ignite's files are never part of this repository. The
tests of :data:`SELECTION` run in one pytest as they are (the baseline), then in another with
``ignite_compat_plugin --compat-swap`` (our ``ClearMLSaver``, and a ``TrackerSaver`` behind
``DiskSaver``'s constructor); each in a process of its own with a private HOME and no ClearML
configuration, so the outcome is the same on every machine. The process is forked from the tests'
fork server (``tests/forkserver.py``), which has imported torch and ignite already: 4 s of CPU
less per run than a new interpreter.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import forkserver

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = Path(__file__).resolve().parent
CACHE = Path(sys.prefix) / "ignite-tests"  # beside the installed ignite (.venv/ignite-tests): set-up, not a leftover

#: ignite's test files we run (in ``tests/ignite/handlers/``), each with the words of its ``-k``
#: selection (none: every test). The ClearML file's other tests test the logger, not the saver,
#: and one of them (``test_integration``) waits out clearml's 300 s repository detection.
FOLDER = "tests/ignite/handlers"
SELECTION: dict[str, tuple[str, ...]] = {
    "test_clearml_logger.py": ("saver", "distrib", "no_clearml"),
    "test_checkpoint.py": (),
}

#: Longest wait, in seconds, for the sdist download and for one pytest run.
DOWNLOAD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300


class SuiteUnavailable(RuntimeError):
    """ignite's tests could not be fetched or run here; the message says how to run them."""


@dataclass
class Outcome:
    """One ignite test in one run: ``passed``, ``failed`` or ``skipped``, its error, whether it built ours."""

    outcome: str
    error: str = ""
    ours: bool = False


@dataclass
class SuiteResult:
    """Both runs of every file: ``baseline[test id]`` (ignite's classes) and ``swapped[test id]`` (ours)."""

    ignite_version: str
    baseline: dict[str, Outcome] = field(default_factory=dict)
    swapped: dict[str, Outcome] = field(default_factory=dict)

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per file name, per run (``ignite``, ``ours``): how many passed, failed and skipped; ``built_ours`` too."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for run, outcomes in (("ignite", self.baseline), ("ours", self.swapped)):
            for test, result in outcomes.items():
                file = out.setdefault(file_of(test), {}).setdefault(
                    run, {"passed": 0, "failed": 0, "skipped": 0, "built_ours": 0}
                )
                file[result.outcome] += 1
                file["built_ours"] += result.ours
        return out

    def notable(self) -> list[str]:
        """The tests worth a row: those that build our saver, or whose two outcomes are not both passed (or skipped)."""
        notable = []
        for test, ours in sorted(self.swapped.items()):
            both = {ours.outcome, self.baseline.get(test, Outcome("absent")).outcome}
            if ours.ours or both not in ({"passed"}, {"skipped"}):
                notable.append(test)
        return notable

    def to_json(self) -> dict[str, Any]:
        """The counts, and both outcomes of each :meth:`notable` test, for one JSON line."""
        return {
            "ignite_version": self.ignite_version,
            "counts": self.counts(),
            "tests": {
                test: {
                    "ignite": self.baseline[test].outcome if test in self.baseline else None,
                    "ours": self.swapped[test].outcome,
                    "built_ours": self.swapped[test].ours,
                    "error": self.swapped[test].error,
                }
                for test in self.notable()
            },
        }


def file_of(test: str) -> str:
    """``test_checkpoint.py`` for ``test_checkpoint.py::test_x[True]``."""
    return test.partition("::")[0]


def ignite_version() -> str:
    """The installed pytorch-ignite's version: the one whose tests we fetch."""
    return importlib.metadata.version("pytorch-ignite")


def how_to_run(version: str) -> str:
    """What to do when the sdist cannot be fetched: the same words wherever it fails."""
    return (
        f"ignite's own tests (the sdist of pytorch-ignite=={version}) are needed for the compatibility suite: "
        "connect to the package index and rerun, or put the sdist in place yourself with "
        f"`pip download --no-binary pytorch-ignite --no-deps pytorch-ignite=={version} -d {CACHE}`; "
        "offline, leave the suite out with -m 'not ignite_suite' (CI never does)"
    )


def fetch_sdist(version: str, cache: Path = CACHE) -> Path:
    """The sdist of pytorch-ignite ``version``, from ``cache`` or downloaded into it with pip.

    Raises:
        SuiteUnavailable: pip could not download it (no network, no such version).
    """
    target = cache / f"pytorch_ignite-{version}.tar.gz"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        # --no-binary for ignite alone: with `:all:`, pip builds its build back-end (hatchling) and that
        # back-end's own dependencies from sources too, 42 s of CPU against 4 s on an empty pip cache.
        command = [sys.executable, "-m", "pip", "download", "--no-binary", "pytorch-ignite", "--no-deps", "-q"]
        command += ["--disable-pip-version-check", f"pytorch-ignite=={version}", "-d", tmp]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise SuiteUnavailable(f"pip download took over {DOWNLOAD_TIMEOUT_S} s; {how_to_run(version)}") from exc
        # Older releases name it pytorch-ignite-VERSION.tar.gz (0.5.0.post2, the matrix's lowest cell).
        found = sorted(Path(tmp).glob("pytorch[-_]ignite-*.tar.gz"))
        if done.returncode != 0 or not found:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SuiteUnavailable(f"pip download failed ({last}); {how_to_run(version)}")
        os.replace(found[0], target)  # atomic: a concurrent run sees the whole file or none
    return target


def extract_tests(sdist: Path, into: Path) -> Path:
    """Extract the sdist's ``tests/`` and ``pyproject.toml`` (not its ``ignite/``: the installed one is tested)."""
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.isfile()
            and (m.name.partition("/")[2].startswith("tests/") or m.name.partition("/")[2] == "pyproject.toml")
        ]
        unsafe = [m.name for m in members if m.name.startswith("/") or ".." in Path(m.name).parts]
        if unsafe or not members:
            raise SuiteUnavailable(f"{sdist} has no tests/ or unsafe paths {unsafe[:3]}: delete it and rerun")
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later; the check above holds without it
            archive.extractall(into, members=members, filter="data")
        else:
            archive.extractall(into, members=members)
    (root,) = {m.name.partition("/")[0] for m in members}
    return into / root


def _env(scratch: Path) -> dict[str, str]:
    """The environment of a run: ours, less pytest's, ClearML's and the registry's, with a private HOME."""
    drop = ("PYTEST_", "CLEARML_", "TRAINS_", "TRACKER_SAVER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    home = scratch / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(scratch), PYTHONPATH=os.pathsep.join([str(ROOT), str(PLUGIN_DIR)]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


#: ``python -c`` of the forked run, ``argv``: the extracted sdist, then pytest's arguments. Ignite's
#: tests are a package named ``tests`` too: the child forgets ours (the fork server imported
#: ``tests.helpers``), and finds the plugin where PYTHONPATH would put it for a new interpreter.
PYTEST_IN_CHILD = f"""
import os, sys
for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
    del sys.modules[name]
os.chdir(sys.argv[1])
sys.path.insert(1, {str(PLUGIN_DIR)!r})
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def run_tests(root: Path, *, swap: bool, scratch: Path) -> dict[str, Outcome]:
    """Run :data:`SELECTION` of ignite's tests (``root`` is the extracted sdist) in one pytest; outcomes by test id.

    Raises:
        SuiteUnavailable: pytest could not run them (an error before any test, nothing collected).
    """
    report = scratch / "report.json"
    command = [*(f"{FOLDER}/{file}" for file in SELECTION), "-q", "-W", "ignore"]
    command += ["-p", "no:cacheprovider", "-p", "ignite_compat_plugin", "-o", "addopts=", "--rootdir", str(root)]
    # Not the plugins ignite's tests never use (pyproject's addopts, which this run drops, says why);
    # Hypothesis's costs 1 s of CPU a run to load.
    command += ["-p", "no:schemathesis", "-p", "no:anyio", "-p", "no:hypothesispytest"]
    command += [f"--compat-only={file}={','.join(words)}" for file, words in SELECTION.items() if words]
    command += ["--compat-report", str(report)] + (["--compat-swap"] if swap else [])
    done = forkserver.run("-c", [PYTEST_IN_CHILD, str(root), *command], env=_env(scratch), timeout=RUN_TIMEOUT_S)
    if done.returncode not in (0, 1) or not report.is_file():  # 1: some tests failed; anything else: no run
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SuiteUnavailable(
            f"pytest of ignite's tests{' --compat-swap' if swap else ''} exited {done.returncode}:\n{tail}"
        )
    data = json.loads(report.read_text())
    if swap and Path(data["tracker_saver"]).resolve().parent != ROOT / "tracker_saver":
        raise SuiteUnavailable(f"the swapped run imported {data['tracker_saver']}, not {ROOT / 'tracker_saver'}")
    outcomes = {
        test.removeprefix(FOLDER + "/"): Outcome(entry["outcome"], entry["error"] or "", entry["ours"])
        for test, entry in data["tests"].items()
    }
    missing = [file for file in SELECTION if not any(file_of(test) == file for test in outcomes)]
    if missing:
        raise SuiteUnavailable(f"no test of {missing} ran (pytorch-ignite renamed them?)")
    return outcomes


def run_suite(version: str | None = None, cache: Path = CACHE) -> SuiteResult:
    """Fetch ignite's tests and run :data:`SELECTION` twice: with ignite's classes, then with ours.

    One after the other: ignite's tests name some folders outright (``/tmp/non-existing-folder``),
    and ours may create one that the run with ignite's classes must not find.

    Raises:
        SuiteUnavailable: the sdist could not be fetched, or pytest could not run the tests.
    """
    version = version or ignite_version()
    sdist = fetch_sdist(version, cache)
    with tempfile.TemporaryDirectory(prefix="ignite-tests-") as tmp:
        root = extract_tests(sdist, Path(tmp))
        scratch = {swap: Path(tmp) / ("ours" if swap else "ignite") for swap in (False, True)}
        for folder in scratch.values():
            folder.mkdir()
        baseline = run_tests(root, swap=False, scratch=scratch[False])
        swapped = run_tests(root, swap=True, scratch=scratch[True])
    return SuiteResult(version, baseline, swapped)


def format_table(result: SuiteResult) -> str:
    """A plain-text table of the :meth:`~SuiteResult.notable` tests (both outcomes, our error), then the counts."""
    lines = [f"ignite's own tests, pytorch-ignite {result.ignite_version}: ignite's classes vs ours", ""]
    width = max((len(t) for t in result.swapped), default=10)
    lines.append(f"{'test':<{width}}  {'ignite':<7}  {'ours':<7}  built ours  our error")
    for test in result.notable():
        ours, base = result.swapped[test], result.baseline.get(test, Outcome("absent"))
        built = "yes" if ours.ours else "no"
        lines.append(f"{test:<{width}}  {base.outcome:<7}  {ours.outcome:<7}  {built:<10}  {ours.error[:120]}")
    lines.append("")
    for file, runs in result.counts().items():
        parts = [f"{run} {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped" for run, c in runs.items()]
        lines.append(f"{file}: " + "; ".join(parts) + f" ({runs.get('ours', {}).get('built_ours', 0)} built ours)")
    return "\n".join(lines)
