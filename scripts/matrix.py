"""The dependency matrix (docs/compatibility.md): a chosen subset of the suite in cells, one fresh venv each.

    scripts/dev.sh matrix                    the cells that run before each release: lowest, newest
    scripts/dev.sh matrix lowest             only these cells (any of CELLS below)
    scripts/dev.sh matrix lowest --groups core,mlflow    only these groups of tests

A cell is a Python version and a resolution of the declared ranges (pyproject.toml): ``lowest``
installs every direct requirement at the lowest release its range allows (``uv pip install
--resolution lowest-direct``), ``newest`` at the newest. Only the runtime ranges vary: torch is the
local CPU wheel ``constraints.txt`` pins (never a CUDA build by accident), and the test tools
(pytest, hypothesis, …) are pinned to the versions in .venv, so a cell tests our ranges, not
pytest's. The ``py3.10``/``py3.12``/``py3.13`` cells take the index's torch for that Python (a
CUDA build of several GB): they run only when named.

Each cell's venv is ``.matrix/<cell>/`` (git-ignored), its install log, pytest log and JUnit XML
beside it. The tests run with ``CI=true``, so a skip (a missing server or extra) fails as in CI;
the S3 tests use the shared Ceph gateway (``scripts/ceph-s3.sh env``; never started here).
Ignite's own saver tests run against the cell's pytorch-ignite: the rows of docs/migration.md's
table hold, and a test the table lacks must pass with ours. It prints a table (cell, Python, key
versions, result, wall) and one JSON line, also kept in ``.matrix/last.json``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".matrix"
UV = ROOT / ".venv" / "bin" / "uv"


@dataclass(frozen=True)
class Cell:
    """A Python version, a resolution of pyproject's ranges, and where torch comes from."""

    python: str
    resolution: str  # uv's --resolution: lowest-direct or highest
    local_torch: bool  # the CPU wheel constraints.txt pins (Python 3.11 only) or the index's build


CELLS = {
    "lowest": Cell("3.11", "lowest-direct", local_torch=True),
    "newest": Cell("3.11", "highest", local_torch=True),
    "py3.10": Cell("3.10", "highest", local_torch=False),
    "py3.12": Cell("3.12", "highest", local_torch=False),
    "py3.13": Cell("3.13", "highest", local_torch=False),
}
DEFAULT_CELLS = ("lowest", "newest")

#: The subset of the suite each cell runs: a group's files, each file in one group.
GROUPS = {
    "core": (
        "tests/test_invariants_local.py",
        "tests/test_slots.py",
        "tests/test_aliases.py",
        "tests/test_models_api.py",
    ),
    "sqlite": ("tests/test_registry_sqlite.py",),
    "mlflow": ("tests/test_mlflow_registry.py", "tests/test_mlflow_saver.py"),
    "clearml": ("tests/test_clearml_registry.py", "tests/test_clearml_saver.py"),
    "ceph": ("tests/test_invariants_s3.py",),
    "ui": ("tests/test_ui_api.py",),
    "examples": ("tests/test_examples.py",),
}
IGNITE = "ignite"  # Ignite's own saver tests: not a file of ours, run by IGNITE_CHECK
ALL_GROUPS = (*GROUPS, IGNITE)

#: The versions the table shows, in its column order.
KEY_PACKAGES = ("torch", "pytorch-ignite", "clearml", "mlflow", "boto3", "fastapi", "uvicorn")

#: Run in the cell's Python: ignite's own tests with ignite's classes and ours, checked against
#: docs/migration.md. Its counts are for one ignite version; for another, each row still holds and
#: each test the table lacks must pass with ours (the counts are that version's own).
IGNITE_CHECK = """
import json
from tests.ignite_compat.suite import SuiteUnavailable, run_suite
from tests.ignite_compat.table import Row, disagreements, read_page
try:
    result = run_suite()
except SuiteUnavailable as exc:
    print(json.dumps({"problems": [str(exc)], "counts": {}})); raise SystemExit
rows, version, counts = read_page()
measured = result.counts()
if version != result.ignite_version:
    rows = {test: rows.get(test, Row(test, "passes", "")) for test in result.swapped}
    version = result.ignite_version
    counts = {f: tuple(r[k] for r in (runs["ours"], runs["ignite"]) for k in ("passed", "failed", "skipped"))
              for f, runs in measured.items()}
print(json.dumps({"problems": disagreements(result, rows, version, counts), "counts": measured}))
"""


def log(message: str) -> None:
    print(f"matrix: {message}", file=sys.stderr, flush=True)


def interpreter(version: str) -> str:
    """The base interpreter of Python ``version``: pyenv's (whose shims answer only the global one), else PATH's."""
    if pyenv := shutil.which("pyenv"):
        found = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, check=False)
        if found.returncode == 0:
            return f"{found.stdout.strip()}/bin/python{version}"
    if path := shutil.which(f"python{version}"):
        return path
    raise SystemExit(f"matrix: no Python {version}: install it (pyenv install {version}) or leave its cell out")


def find_links() -> list[str]:
    """pip's find-links (where this machine keeps the local CPU torch wheel): uv reads no pip.conf."""
    listed = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    links = sorted({link for m in re.finditer(r"find-links='(.*)'", listed) for link in m.group(1).split()})
    return [arg for link in links for arg in ("--find-links", link)]


def constraints(cell: Cell) -> str:
    """The cell's constraints: torch's pin, and every test tool at .venv's version (the ranges under test stay free)."""
    pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    if not pin:
        raise SystemExit("matrix: constraints.txt pins no torch (torch==VERSION): a cell would take any build")
    # +cpu: only the local wheel has that local version, so a miss fails instead of fetching a CUDA build.
    lines = [f"torch=={pin[1]}+cpu" if cell.local_torch else f"torch=={pin[1]}"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    tools = [re.match(r"[A-Za-z0-9_.-]+", req)[0] for req in extras["test"]]  # type: ignore[index]
    lines += [f"{name}=={importlib.metadata.version(name)}" for name in (*tools, "pip")]
    return "\n".join(lines) + "\n"


def ceph_env() -> dict[str, str]:
    """The shared Ceph gateway's S3 settings (``scripts/ceph-s3.sh env``); never printed: they hold keys."""
    done = subprocess.run(["bash", "scripts/ceph-s3.sh", "env"], cwd=ROOT, capture_output=True, text=True, check=False)
    env = {}
    for line in done.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = " ".join(shlex.split(value))
    if not env:
        log("no Ceph gateway answers (scripts/ceph-s3.sh env): the ceph tests will fail")
    return env


def install(name: str, cell: Cell) -> dict[str, str]:
    """A fresh venv .matrix/<name> with the package, every extra and the test tools; its versions by name."""
    venv = HOME / name
    (HOME / f"{name}.constraints.txt").write_text(constraints(cell))
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    with open(HOME / f"{name}.install.log", "w") as out:
        for command in (
            [str(UV), "venv", "-q", "--clear", "--python", interpreter(cell.python), str(venv)],
            [
                str(UV),
                "pip",
                "install",
                "--python",
                str(venv / "bin/python"),
                "--resolution",
                cell.resolution,
                "-c",
                str(HOME / f"{name}.constraints.txt"),
                *find_links(),
                "-e",
                ".[all,test]",
                "pip",
            ],
        ):
            out.write(f"$ {shlex.join(command)}\n")
            out.flush()
            if subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode:
                raise RuntimeError(f"install failed: see .matrix/{name}.install.log")
    listed = subprocess.run(
        [str(UV), "pip", "list", "--python", str(venv / "bin/python"), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {p["name"].lower(): p["version"] for p in json.loads(listed.stdout)}


def group_of(junit_case: ET.Element) -> str:
    """The group of one JUnit test case, from its module (``tests.test_slots.TestX`` or a collection error's path)."""
    where = junit_case.get("classname") or junit_case.get("name", "")
    module = ".".join(where.replace("/", ".").removesuffix(".py").split(".")[:2])
    for group, files in GROUPS.items():
        if f"{module.replace('.', '/')}.py" in files:
            return group
    return "other"


def run_tests(name: str, groups: list[str], env: dict[str, str]) -> dict[str, dict[str, object]]:
    """Run the groups' files in one pytest of the cell; passed/failed/skipped and the failures, by group."""
    files = [file for group in groups if group in GROUPS for file in GROUPS[group]]
    results: dict[str, dict[str, object]] = {}
    if files:
        junit = HOME / f"{name}.junit.xml"
        junit.unlink(missing_ok=True)
        command = [str(HOME / name / "bin/python"), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0"]
        command += ["--continue-on-collection-errors", f"--junitxml={junit}", *files]
        with open(HOME / f"{name}.pytest.log", "w") as out:
            subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        results = {g: {"passed": 0, "failed": 0, "skipped": 0, "failures": []} for g in groups if g in GROUPS}
        cases = ET.parse(junit).getroot().iter("testcase") if junit.exists() else iter(())
        for case in cases:
            counts = results.setdefault(group_of(case), {"passed": 0, "failed": 0, "skipped": 0, "failures": []})
            outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else "passed"
            outcome = "skipped" if case.find("skipped") is not None else outcome
            counts[outcome] += 1  # type: ignore[operator]
            if outcome != "passed":
                counts["failures"].append(f"{case.get('classname')}::{case.get('name')}")  # type: ignore[attr-defined]
        if not junit.exists():
            for counts in results.values():
                counts["failures"].append(f"pytest wrote no report: see .matrix/{name}.pytest.log")  # type: ignore[attr-defined]
    if IGNITE in groups:
        done = subprocess.run(
            [str(HOME / name / "bin/python"), "-c", IGNITE_CHECK], cwd=ROOT, env=env, capture_output=True, text=True
        )
        (HOME / f"{name}.ignite.log").write_text(done.stdout + done.stderr)
        lines = done.stdout.strip().splitlines()
        report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {"problems": [done.stderr[-500:]]}
        results[IGNITE] = {"failures": report["problems"], "counts": report.get("counts", {})}
    return results


def passed(groups: dict[str, dict[str, object]]) -> bool:
    return bool(groups) and not any(g["failures"] for g in groups.values())


def run_cell(name: str, groups: list[str], ceph: dict[str, str]) -> dict[str, object]:
    cell = CELLS[name]
    start = time.monotonic()
    row: dict[str, object] = {"cell": name, "resolution": cell.resolution, "groups": {}}
    try:
        log(f"{name}: installing (Python {cell.python}, --resolution {cell.resolution})")
        versions = install(name, cell)
        row["install_s"] = round(time.monotonic() - start)
        torch = versions.get("torch", "")
        if cell.local_torch and not torch.endswith("+cpu"):
            raise RuntimeError(f"torch {torch} is not the local CPU wheel")
        python = subprocess.run(
            [str(HOME / name / "bin/python"), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        row.update(python=python, versions={p: versions.get(p, "-") for p in ("rich", "tqdm", *KEY_PACKAGES)})
        log(f"{name}: testing {', '.join(groups)}")
        env = {**os.environ, **ceph, "CI": "true"}
        env.pop("VIRTUAL_ENV", None)
        row["groups"] = run_tests(name, groups, env)
        row["result"] = "pass" if passed(row["groups"]) else "fail"  # type: ignore[arg-type]
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        row["result"] = f"fail: {exc}"
    row["wall_s"] = round(time.monotonic() - start)
    return row


def minutes(seconds: object) -> str:
    s = int(seconds)  # type: ignore[call-overload]
    return f"{s // 60} min {s % 60:02d} s"


def table(rows: list[dict[str, object]]) -> str:
    """The Markdown table docs/compatibility.md shows: one line a cell, failed groups named in its result."""
    lines = [
        "| cell | python | " + " | ".join(KEY_PACKAGES) + " | result | wall |",
        "| --- " * (len(KEY_PACKAGES) + 4) + "|",
    ]
    for row in rows:
        versions = row.get("versions", {})
        failed = [g for g, r in row["groups"].items() if r["failures"]]  # type: ignore[attr-defined]
        result = str(row["result"]) + (f" ({', '.join(failed)})" if failed else "")
        cells = [str(row["cell"]), str(row.get("python", "-"))]
        cells += [versions.get(p, "-") for p in KEY_PACKAGES]  # type: ignore[attr-defined]
        lines.append("| " + " | ".join([*cells, result, minutes(row["wall_s"])]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dev.sh matrix", description=__doc__.split("\n\n")[0])
    parser.add_argument("cells", nargs="*", default=list(DEFAULT_CELLS), help=f"of {', '.join(CELLS)}")
    parser.add_argument("--groups", default=",".join(ALL_GROUPS), help=f"comma-separated, of {', '.join(ALL_GROUPS)}")
    args = parser.parse_args(argv)
    groups = args.groups.split(",")
    unknown = [c for c in args.cells if c not in CELLS] + [g for g in groups if g not in ALL_GROUPS]
    if unknown:
        parser.error(
            f"unknown cell or group {', '.join(unknown)}: cells are {', '.join(CELLS)}; groups {', '.join(ALL_GROUPS)}"
        )
    if not UV.exists():
        parser.error("no .venv/bin/uv: run scripts/dev.sh setup first")
    HOME.mkdir(exist_ok=True)
    start = time.monotonic()
    ceph = ceph_env() if "ceph" in groups or "examples" in groups else {}
    rows = [run_cell(name, groups, ceph) for name in args.cells]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    summary = {
        "date": datetime.date.today().isoformat(),
        "commit": commit.strip(),
        "wall_s": round(time.monotonic() - start),
        "groups": groups,
        "cells": rows,
    }
    print(table(rows))
    print(f"\n{len(rows)} cells, wall {minutes(summary['wall_s'])}, commit {summary['commit']}, {summary['date']}")
    print(json.dumps(summary))
    (HOME / "last.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(row["result"] == "pass" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
