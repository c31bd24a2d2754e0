"""Fixtures for every test: a local backend; Ceph and ClearML come from their plugin modules.

The private HOME and temporary folder of every test and doctest are in the root ``conftest.py``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from tests.helpers import Target

pytest_plugins = ["tests.conftest_ceph", "tests.conftest_clearml", "tests.conftest_browser", "tests.conftest_mlflow"]


@pytest.fixture
def local_target(tmp_path) -> Target:
    return Target(output_uri=str(tmp_path / "output"), registry=str(tmp_path / "registry" / "registry.db"))


@pytest.fixture
def offline_env(monkeypatch, tmp_path) -> None:
    """No AWS configuration from the machine: no keys, no profile, no files, no instance metadata."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def pythons_sigint_handler() -> Iterator[None]:
    """Python's own SIGINT handler (``KeyboardInterrupt``), as a training script starts with.

    A library an earlier test of this process used may have left another: clearml's exit hooks,
    after its task closed, keep a handler that returns without raising (seen in a full run: Ctrl-C
    did nothing in the tests that send one). What these tests check is our code under Python's handler.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
