"""DESIGN's invariants with records in a real MLflow tracking server (tests/conftest_mlflow.py):
a local output_uri, and (marked ceph, run with the Ceph RGW) an S3 one."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")

from tests.contracts.invariants import InvariantContract  # noqa: E402
from tests.helpers import Target  # noqa: E402
from tracker_saver.registry.mlflow import MLflowRegistry  # noqa: E402

pytestmark = pytest.mark.mlflow


def _registry(uri: str) -> MLflowRegistry:
    return MLflowRegistry(uri, experiment_prefix=f"i{uuid.uuid4().hex[:10]}-", timeout=4)


class TestMLflowLocalInvariants(InvariantContract):
    """The ``registry`` fault is a tracking server that stops answering (tests/tcp_gate.py)."""

    FAULTS = (*InvariantContract.FAULTS, "storage")

    @pytest.fixture
    def target(self, mlflow_server: str, tmp_path):
        return Target(output_uri=str(tmp_path / "output"), registry=_registry(mlflow_server))


@pytest.mark.ceph
class TestMLflowCephInvariants(InvariantContract):
    @pytest.fixture
    def target(self, mlflow_server: str, s3_output_uri):
        return Target(output_uri=s3_output_uri, registry=_registry(mlflow_server))
