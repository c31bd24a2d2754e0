"""What the test command reports and enforces: its cost (scripts/cpu_time.py), each test's CPU, no skip in CI.

Each check runs the real thing in a new process: ``scripts/cpu_time.py`` over a command that
leaves an orphan behind, and pytest with ``tests/conftest_cpu.py``, ``tests/conftest_ci.py`` or ``tests/conftest_clean.py`` on a
small test file of its own (``--noconftest``: none of this suite's fixtures; ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``:
no installed plugin either, so it starts in a fraction of a second). Nothing is asserted about how many seconds
anything took: which test the report names first, and where an orphan goes, are what it is built on.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers import ROOT

#: A test file with a test that burns CPU, one that waits, and marked ones.
SAMPLE = """
import time
import pytest

def test_burns_cpu():
    assert sum(i * i for i in range(3_000_000)) > 0

def test_waits():
    time.sleep(0.3)  # wall, no CPU: the CPU table must not rank it above the one that computes

@pytest.mark.ceph
def test_marked_ceph():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_unmarked(n):
    pass
"""


def _pytest(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "-c", os.devnull,
         "--rootdir", str(folder), *args, str(folder)],
        capture_output=True, text=True, cwd=folder, timeout=300,
        # No installed plugin (hypothesis, xdist, schemathesis...): loading them cost 2.3 s of CPU a run, and
        # what is checked is our own plugin alone.
        env={**os.environ, "PYTHONPATH": str(ROOT), "CI": "", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})},
    )  # fmt: skip


def test_the_cpu_report_ranks_tests_by_cpu_and_counts_the_collected_ones_per_marker(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = _pytest(tmp_path, "-p", "tests.conftest_cpu", "-W", "ignore")
    assert done.returncode == 0, done.stdout + done.stderr
    report = [line for line in done.stdout.split("= CPU =")[1].splitlines()[1:] if line.strip()]
    assert report[0] == "5 tests collected; by marker: ceph 1, no marker 4"
    assert report[1].startswith("CPU in tests ") and "outside tests" in report[1]
    ranked = [line.split()[-1] for line in report[3:8]]
    assert ranked[0] == "test_sample.py::test_burns_cpu", report
    assert sorted(ranked) == sorted(f"test_sample.py::{name}" for name in (
        "test_burns_cpu", "test_waits", "test_marked_ceph", "test_unmarked[1]", "test_unmarked[2]"))  # fmt: skip


def test_in_ci_a_skip_anywhere_fails_the_run_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "test_skips.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_skips_in_the_call():
                pytest.skip("no server here")

            @pytest.mark.skipif(True, reason="not on this machine")
            def test_skipped_by_a_mark():
                pass

            def test_needs_a_module():
                pytest.importorskip("no_such_module_here")

            def test_runs():
                pass
            """
        )
    )
    (tmp_path / "test_module_skip.py").write_text('import pytest\npytest.importorskip("no_such_module_at_all")\n')
    outside = _pytest(tmp_path, "-p", "tests.conftest_ci", "-rs")
    assert outside.returncode == 0 and "1 passed, 4 skipped" in outside.stdout, outside.stdout
    ci = _pytest(tmp_path, "-p", "tests.conftest_ci", "--continue-on-collection-errors", env={"CI": "true"})
    assert ci.returncode != 0, ci.stdout
    for reason in ("no server here", "not on this machine", "no_such_module_here", "no_such_module_at_all"):
        assert reason in ci.stdout, ci.stdout
    assert "CI runs every test, but test_module_skip.py skipped at collection" in ci.stdout


def test_a_test_that_writes_into_the_top_folder_fails_naming_what_it_left(tmp_path: Path) -> None:
    (tmp_path / "test_writes.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path

            def test_writes_into_the_working_folder():
                Path("stray-output").mkdir()
                Path(".cache-of-a-tool").mkdir()

            def test_writes_under_tmp_path(tmp_path):
                (tmp_path / "fine").mkdir()
            """
        )
    )
    done = _pytest(tmp_path, "-p", "tests.conftest_clean")
    # the writing test passes its call and errs at its tear-down
    assert "2 passed, 1 error" in done.stdout, done.stdout
    assert "test_writes.py::test_writes_into_the_working_folder left ['stray-output'] in the repository's top" in (
        done.stdout
    )


def test_cpu_time_adopts_what_the_command_leaves_behind_and_reports_the_budget(tmp_path: Path) -> None:
    """A process whose parent exits (a server a worker started and another stops) is re-parented to
    cpu_time, which waits for it and so counts its CPU, not to init; the command's exit status passes."""
    go, answer = tmp_path / "go", tmp_path / "answer"
    os.mkfifo(go)
    os.mkfifo(answer)
    orphan = f"import os; open({str(go)!r}).read(); open({str(answer)!r}, 'w').write(str(os.getppid()))"
    # The subshell exits at once, leaving the orphan; only then is it told to say who its parent is.
    script = f"( {sys.executable} -c {shlex.quote(orphan)} & ) ; echo go > {go}; read parent < {answer}; "
    script += 'echo "parent $parent"; exit 3'
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "cpu_time.py"), "--label", "demo", "--", "bash", "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert out == f"parent {proc.pid}\n", (out, err)
    lines = err.splitlines()
    assert lines[0].startswith("cpu_time: demo: wall ") and " CPU " in lines[0] and "user " in lines[0], lines
    assert any(
        line.startswith("cpu_time: of which the Ceph daemons (ceph-mon, ceph-osd, radosgw): CPU ") for line in lines
    )
    assert lines[-1].startswith("cpu_time: budget 15 min wall and 15 CPU-min: wall "), lines


def test_dev_sh_test_runs_under_cpu_time() -> None:
    text = (ROOT / "scripts" / "dev.sh").read_text()
    assert 'exec "$PYTHON" scripts/cpu_time.py --label "scripts/dev.sh test" -- bash scripts/dev.sh test "$@"' in text
