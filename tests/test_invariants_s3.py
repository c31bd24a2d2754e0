"""DESIGN's invariants with the output_uri on a real Ceph RADOS Gateway (same tests as local)."""

from __future__ import annotations

import pytest

from tests.contracts.invariants import InvariantContract
from tests.helpers import Target

pytestmark = pytest.mark.ceph


class TestCephInvariants(InvariantContract):
    @pytest.fixture
    def target(self, s3_output_uri, tmp_path):
        # Credentials and endpoint come from boto3's chain (the environment), as users set them.
        return Target(output_uri=s3_output_uri, registry=str(tmp_path / "registry.db"))


class TestCephAsyncInvariants(InvariantContract):
    """The same invariants with ``async_upload=True``: uploads run on the background worker."""

    @pytest.fixture
    def target(self, s3_output_uri, tmp_path):
        return Target(s3_output_uri, str(tmp_path / "registry.db"), saver_options={"async_upload": True})
