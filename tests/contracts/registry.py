"""The registry contract: its three parts together, for a test that wants them all at once.

Each part has its own suite: ``records.py`` (``RecordStore``: records and their states),
``labels.py`` (``Labels``: names, tags, aliases, pins) and ``claims.py`` (``StreamClaims``:
one writer per stream). A backend's test module composes them, e.g.
``class TestSQLiteRegistry(RecordStoreContract, LabelsContract, StreamClaimsContract)``;
``RegistryContract`` is that composition under one name. ``SHA``, ``pending`` and ``live``
(from ``records.py``) make the records the suites start from.
"""

from __future__ import annotations

from tests.contracts.claims import StreamClaimsContract
from tests.contracts.labels import LabelsContract
from tests.contracts.records import SHA, RecordStoreContract, live, pending

__all__ = [
    "SHA",
    "LabelsContract",
    "RecordStoreContract",
    "RegistryContract",
    "StreamClaimsContract",
    "live",
    "pending",
]


class RegistryContract(RecordStoreContract, LabelsContract, StreamClaimsContract):
    """Every registry contract test: the record store's, the labels' and the stream claims'."""
