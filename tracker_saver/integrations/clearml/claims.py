"""The ClearML registry's stream claims (one writer per stream): one hidden model per claim.

Stream claims (one writer per stream) are hidden models, one per claim (the codec says how),
made visible with their tag and holder by one ``models.create``. A claim by a live holder (:func:`tracker_saver.core.claims.is_alive`) makes the stream busy; dead
holders' claims are deleted; a holder renews its own (the comment's ``heartbeat``). Two
savers that find a stream free at once both create a claim, look again, and the oldest
claim (server ``created``, then id) wins; the other deletes its own and raises
``StreamBusyError``.
"""

from __future__ import annotations

import time

from tracker_saver.core.claims import Holder, is_alive
from tracker_saver.core.errors import RecordNotFoundError
from tracker_saver.core.records import StreamId
from tracker_saver.integrations.clearml.codec import ARCHIVED_TAG, claim_comment, claim_tag, read_claim
from tracker_saver.integrations.clearml.transport import ClearMLTransport
from tracker_saver.registry.base import StreamClaims, busy

__all__ = ["ClearMLClaims"]


class ClearMLClaims(StreamClaims):
    """A ClearML registry's stream claims: claim, renew, look up and release a stream's writer; who the registry is.

    Args:
        transport: the registry's transport, through which every request goes.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            claims = ClearMLClaims(ClearMLTransport())
            claims.claim(stream, holder)   # StreamBusyError if another live saver holds it
            claims.holder(stream) == holder   # True
    """

    def __init__(self, transport: ClearMLTransport) -> None:
        self._transport = transport

    def _stream_claims(self, stream: StreamId, project_id: str) -> list[tuple[str, Holder, float]]:
        """The stream's claims, oldest first: ``(model id, holder, heartbeat)``."""
        data = self._transport.send(
            self._transport.services().models.GetAllRequest(
                project=[project_id], tags=[claim_tag(stream)], only_fields=["id", "comment", "created"]
            ),
            f"reading the claims on stream {stream.label}",
        )
        found: list[tuple[str, Holder, float]] = []
        for model in sorted(data.get("models") or [], key=lambda m: (str(m.get("created") or ""), str(m.get("id")))):
            claim = read_claim(model, stream)
            if claim is not None:  # else not a claim tracker_saver wrote
                found.append((str(model["id"]), *claim))
        return found

    def _settle(self, stream: StreamId, project_id: str, holder: Holder) -> tuple[tuple[str, Holder] | None, list[str]]:
        """``(the claim that holds the stream, holder's claim models)``; dead holders' claims are deleted.

        The oldest claim of a live holder (or of ``holder``) holds the stream.
        """
        winner: tuple[str, Holder] | None = None
        mine: list[str] = []
        for model_id, other, heartbeat in self._stream_claims(stream, project_id):
            if other.token == holder.token:
                mine.append(model_id)
            elif not is_alive(other, heartbeat=heartbeat):
                self._drop_claim(model_id)
                continue
            winner = winner or (model_id, other)
        return winner, mine

    def _drop_claim(self, model_id: str) -> None:
        try:
            delete = self._transport.services().models.DeleteRequest(model=model_id, force=True)
            self._transport.send(delete, f"deleting claim model {model_id}", record_id=model_id)
        except RecordNotFoundError:
            pass  # someone else deleted it first

    def claim(self, stream: StreamId, holder: Holder) -> None:
        project_id = self._transport.project_id(stream.project, create=True)
        assert project_id is not None
        winner, mine = self._settle(stream, project_id, holder)
        if winner is None:
            self._transport.send(
                self._transport.services().models.CreateRequest(
                    uri="",
                    name=f"tracker_saver claim: {stream.stream}"[:250],
                    project=project_id,
                    ready=False,
                    tags=[claim_tag(stream)],
                    system_tags=[ARCHIVED_TAG],
                    comment=claim_comment(stream, holder, time.time()),
                ),
                f"claiming stream {stream.label}",
            )
            # Two savers may both have found the stream free: the oldest claim wins.
            winner, mine = self._settle(stream, project_id, holder)
        elif winner[0] in mine:
            self._transport.send(
                self._transport.services().models.EditRequest(
                    model=winner[0], comment=claim_comment(stream, holder, time.time())
                ),
                f"renewing the claim on stream {stream.label}",
                record_id=winner[0],
            )
        if winner is not None and winner[0] not in mine:
            for model_id in mine:
                self._drop_claim(model_id)
            raise busy(stream, winner[1])

    def holder(self, stream: StreamId) -> Holder | None:
        project_id = self._transport.project_id(stream.project, create=False)
        if project_id is None:
            return None
        alive = (
            other
            for _, other, heartbeat in self._stream_claims(stream, project_id)
            if is_alive(other, heartbeat=heartbeat)
        )
        return next(alive, None)

    def release(self, stream: StreamId, holder: Holder) -> None:
        project_id = self._transport.project_id(stream.project, create=False)
        if project_id is None:
            return
        for model_id, other, _ in self._stream_claims(stream, project_id):
            if other.token == holder.token:
                self._drop_claim(model_id)

    def registry_id(self, project: str) -> str:
        """The id clearml-server gave ``project`` (random, made by the server): this registry, for its streams."""
        found = self._transport.project_id(project, create=True)
        assert found is not None  # create=True makes it
        return found
