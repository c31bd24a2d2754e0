"""The stream-claims contract: one writer per stream (``StreamClaims``), written once, run by every backend.

A backend opts in by adding ``StreamClaimsContract`` to its registry test class (see
``tests/contracts/records.py``). A holder's liveness is its saver's: ``release_local`` plays
a saver that is gone, as a killed process is.
"""

from __future__ import annotations

import pytest

from tracker_saver.core.claims import new_holder, release_local
from tracker_saver.core.errors import StreamBusyError
from tracker_saver.core.records import StreamId
from tracker_saver.registry import Registry


class StreamClaimsContract:
    def test_a_stream_has_one_live_claim_holder(self, registry: Registry) -> None:
        class Owner: ...

        first, second = Owner(), Owner()
        a, b = new_holder(first), new_holder(second)
        stream = StreamId("file:///out", "p", "r", "best_model")
        registry.claims.claim(stream, a)
        registry.claims.claim(stream, a)  # renewing is fine
        registry.claims.claim(StreamId("file:///out", "p", "r", "checkpoint"), b)  # another stream is fine
        with pytest.raises(StreamBusyError, match=f"pid {a.pid}"):
            registry.claims.claim(stream, b)
        registry.claims.release(stream, a)
        registry.claims.claim(stream, b)
        release_local(b)  # b's saver is gone: its claim is dead
        registry.claims.claim(stream, a)
        registry.claims.release(stream, a)
        registry.claims.release(StreamId("file:///out", "p", "r", "checkpoint"), b)

    def test_holder_names_the_live_claim_holder_and_changes_nothing(self, registry: Registry) -> None:
        class Owner: ...

        owner = Owner()
        a = new_holder(owner)
        stream = StreamId("file:///out", "p", "r2", "best_model")
        assert registry.claims.holder(stream) is None
        registry.claims.claim(stream, a)
        assert registry.claims.holder(stream) == a
        assert registry.claims.holder(stream) == a  # asking twice takes nothing
        release_local(a)  # its saver is gone: a dead holder holds nothing
        assert registry.claims.holder(stream) is None
        registry.claims.release(stream, a)
