"""The lifecycle contract (tests/contracts/lifecycle.py) on each registry: SQLite, MLflow, the ClearML stand-in.

Each class inherits the promises its registry keeps; the table in the contract's docstring says
which it does not keep, and why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contracts.lifecycle import AliasKeepContract, ArchiveContract, HistoryContract, NoHistoryContract
from tests.helpers import Target
from tracker_saver.registry.base import Registry


class TestLifecycleOnSQLite(ArchiveContract, AliasKeepContract, HistoryContract):
    @pytest.fixture
    def target(self, local_target: Target) -> Target:
        return local_target


class TestAliasKeepsOnSQLiteWithAsyncUpload(AliasKeepContract):
    """The alias of a slot record is moved on the upload worker, before the slot is replaced."""

    @pytest.fixture
    def target(self, local_target: Target) -> Target:
        local_target.saver_options = {"async_upload": True}
        return local_target


@pytest.mark.mlflow
class TestLifecycleOnMLflow(ArchiveContract, AliasKeepContract, NoHistoryContract):
    @pytest.fixture
    def target(self, mlflow_registry: Registry, tmp_path: Path) -> Target:
        return Target(output_uri=str(tmp_path / "output"), registry=mlflow_registry)


@pytest.mark.clearml
class TestLifecycleOnClearML(ArchiveContract, AliasKeepContract, NoHistoryContract):
    @pytest.fixture
    def target(self, clearml_server: object, clearml_project: str, tmp_path: Path) -> Target:
        return Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
