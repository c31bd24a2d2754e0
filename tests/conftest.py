"""Fixtures for every test: a local backend; Ceph and ClearML come from their plugin modules."""

from __future__ import annotations

import os

import pytest

from tests.helpers import Target

pytest_plugins = ["tests.conftest_ceph", "tests.conftest_clearml", "tests.conftest_browser"]


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory, monkeypatch):
    """No test may touch the developer's ~/.tracker_saver or a registry from the environment."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("TRACKER_SAVER_REGISTRY", raising=False)


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
