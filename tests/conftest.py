"""Fixtures for every test: a local backend; Ceph and ClearML come from their plugin modules."""

from __future__ import annotations

import pytest

from tests.helpers import Target

pytest_plugins = ["tests.conftest_ceph", "tests.conftest_clearml"]


@pytest.fixture(autouse=True)
def _private_home(tmp_path_factory, monkeypatch):
    """No test may touch the developer's ~/.tracker_saver or a registry from the environment."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))
    monkeypatch.delenv("TRACKER_SAVER_REGISTRY", raising=False)


@pytest.fixture
def local_target(tmp_path) -> Target:
    return Target(output_uri=str(tmp_path / "output"), registry=str(tmp_path / "registry" / "registry.db"))
