"""Every test and doctest runs with a private HOME and a private temporary folder; CI's Hypothesis profile.

torch runs one intra-op thread in the tests and every process they start (``OMP_NUM_THREADS=1``
unless set): the models are tiny, and on 2 cores shared by 4 pytest-xdist workers, each process's
OpenMP threads spin-waiting for each other cost 3 to 4 times the CPU of the work itself (a demo run
took 13 s of CPU instead of 3.5 s). Set it in the environment to run the tests with more.

A test run leaves nothing behind but pytest's own folder: ``tempfile.mkdtemp()`` in a doctest, a
subprocess's scratch files and torch's inductor cache (``/tmp/torchinductor_<user>``, made when
torch imports ``torch._dynamo``) all land in one folder per pytest process, removed at its end.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

# Every test's CPU (tests/conftest_cpu.py), CI's no-skip rule (tests/conftest_ci.py) and a clean top folder
# (tests/conftest_clean.py), doctests included.
pytest_plugins = ["tests.conftest_cpu", "tests.conftest_ci", "tests.conftest_clean"]

# Before anything imports torch (which reads it once); subprocesses, xdist's workers included, inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

_scratch: list[str] = []

# CI draws the same examples every run and keeps no example database (no .hypothesis/ in the
# clone): a submission never passes or fails by the luck of the draw. Developers' runs draw new
# examples and replay the failures they found from .hypothesis/.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_configure(config: pytest.Config) -> None:
    # pytest's own folder stays where it always is (``/tmp/pytest-of-<user>``), kept for a look.
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    scratch = tempfile.mkdtemp(prefix="tracker-saver-tests-")
    _scratch.append(scratch)
    os.environ["TMPDIR"] = scratch  # subprocesses inherit it
    tempfile.tempdir = scratch
    if os.environ.get("CI"):  # Hypothesis's caches (constants, unicode data) too: no .hypothesis/ in CI's clone
        set_hypothesis_home_dir(os.path.join(scratch, "hypothesis"))


def pytest_unconfigure(config: pytest.Config) -> None:
    for scratch in _scratch:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the developer's ~/.tracker_saver or a registry from the environment."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("TRACKER_SAVER_REGISTRY", raising=False)
