"""DESIGN's invariants on the defaults: a local folder and a SQLite registry."""

from __future__ import annotations

import pytest

from tests.contracts.invariants import InvariantContract


class TestLocalInvariants(InvariantContract):
    FAULTS = (*InvariantContract.FAULTS, "storage")

    @pytest.fixture
    def target(self, local_target):
        return local_target


class TestLocalAsyncInvariants(InvariantContract):
    """The same invariants with ``async_upload=True``: the background worker runs DESIGN's path unchanged."""

    FAULTS = (*InvariantContract.FAULTS, "storage")

    @pytest.fixture
    def target(self, local_target):
        local_target.saver_options = {"async_upload": True}
        return local_target
