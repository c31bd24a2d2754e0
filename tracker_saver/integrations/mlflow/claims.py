"""The MLflow registry's stream claims (one writer per stream): experiment tags, oldest wins.

A claim is the experiment tag ``tracker_saver.claim.<stream digest>.<holder token>`` holding
the holder, its heartbeat and when it claimed. MLflow has no compare-and-set, so as with
ClearML: a saver that finds no live claim writes its own, reads the stream's claims again,
and the oldest live one (claim time, then token) wins; a loser deletes its tag and raises
``StreamBusyError``. Dead holders' tags are deleted; a holder renews its own heartbeat.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from tracker_saver.core.claims import Holder, is_alive
from tracker_saver.core.records import StreamId
from tracker_saver.integrations.mlflow.codec import PREFIX, digest
from tracker_saver.integrations.mlflow.store import REGISTRY_ID, MLflowStore
from tracker_saver.integrations.mlflow.transport import MLflowTransport
from tracker_saver.registry.base import StreamClaims, busy

__all__ = ["MLflowClaims"]


def _prefix(stream: StreamId) -> str:
    return f"{PREFIX}claim.{digest(repr(stream))}."


class MLflowClaims(StreamClaims):
    """Claim, renew, look up and release a stream's writer, as experiment tags through ``transport``; who the registry is.

    Examples:
        Needs a tracking server (``tests/test_mlflow_*.py`` start one)::

            claims = MLflowRegistry("http://127.0.0.1:5000").claims
            claims.claim(stream, holder)   # StreamBusyError if another live saver holds it
    """

    def __init__(self, transport: MLflowTransport, store: MLflowStore) -> None:
        self._transport = transport
        self._store = store

    def _reread(self, exp_id: str, stream: StreamId) -> Any:
        """The experiment again, by id: its tags as they are now, after this saver wrote its claim."""
        return self._transport.call(
            self._transport.client.get_experiment, f"reading the claims on stream {stream.label}", exp_id
        )

    def _claims(self, exp: Any, stream: StreamId) -> list[tuple[str, Holder, float, float]]:
        """``(tag, holder, heartbeat, claimed)`` of the stream's claims in ``exp`` (an experiment just
        read, whose tags hold them), oldest first."""
        found = []
        for key, value in (exp.tags or {}).items():
            if key.startswith(_prefix(stream)):
                data = json.loads(value)
                found.append((key, Holder(**data["holder"]), float(data["heartbeat"]), float(data["claimed"])))
        return sorted(found, key=lambda c: (c[3], c[1].token))

    def _write_claim(self, exp_id: str, stream: StreamId, holder: Holder, claimed: float) -> None:
        value = json.dumps({"holder": dataclasses.asdict(holder), "heartbeat": time.time(), "claimed": claimed})
        self._transport.call(
            self._transport.client.set_experiment_tag,
            f"claiming stream {stream.label}",
            exp_id,
            _prefix(stream) + holder.token,
            value,
        )

    def _drop(self, exp_id: str, key: str) -> None:
        self._transport.call(self._transport.client.delete_experiment_tag, "deleting a stream claim", exp_id, key)

    def _winner(self, exp: Any, stream: StreamId, holder: Holder) -> tuple[Holder | None, float | None]:
        """The holder of the oldest live claim in ``exp`` (dead ones deleted), and ``holder``'s claim time."""
        exp_id = str(exp.experiment_id)
        winner: Holder | None = None
        mine: float | None = None
        for key, other, heartbeat, claimed in self._claims(exp, stream):
            if other.token == holder.token:
                mine = claimed
            elif not is_alive(other, heartbeat=heartbeat):
                self._drop(exp_id, key)
                continue
            winner = winner or other
        return winner, mine

    def claim(self, stream: StreamId, holder: Holder) -> None:
        # Read by name, afresh (one request): its tags are the claims as they are now, so the
        # winner is judged from this very read, not from a second one.
        exp = self._store.experiment(stream.project, create=True)
        exp_id = str(exp.experiment_id)
        winner, mine = self._winner(exp, stream, holder)
        if winner is None or winner.token == holder.token:
            self._write_claim(exp_id, stream, holder, mine if mine is not None else time.time())
            if mine is None:  # two savers may both have found it free: read again, the oldest claim wins
                winner, mine = self._winner(self._reread(exp_id, stream), stream, holder)
        if winner is not None and winner.token != holder.token:
            if mine is not None:
                self._drop(exp_id, _prefix(stream) + holder.token)
            raise busy(stream, winner)

    def holder(self, stream: StreamId) -> Holder | None:
        exp = self._store.experiment(stream.project, create=False)
        if exp is None:
            return None
        claims = self._claims(exp, stream)
        return next((h for _, h, beat, _ in claims if is_alive(h, heartbeat=beat)), None)

    def release(self, stream: StreamId, holder: Holder) -> None:
        exp = self._store.experiment(stream.project, create=False)
        if exp is None:
            return
        for key, other, _, _ in self._claims(exp, stream):
            if other.token == holder.token:
                self._drop(str(exp.experiment_id), key)

    def registry_id(self, project: str) -> str:
        """The random id of ``project``'s experiment (tag ``tracker_saver.registry_id``), made if it has none.

        An experiment made by someone else gets one on first use; two savers doing that at once
        both read back the tag that stayed.
        """
        if project in self._store.registry_ids:  # read with the experiment already (as a claim does first)
            return self._store.registry_ids[project]
        exp = self._store.experiment(project, create=True)
        if not (exp.tags or {}).get(REGISTRY_ID):
            self._transport.call(
                self._transport.client.set_experiment_tag,
                f"naming experiment {project!r}'s registry",
                exp.experiment_id,
                REGISTRY_ID,
                uuid.uuid4().hex,
            )
            exp = self._transport.call(self._transport.client.get_experiment, "reading it back", exp.experiment_id)
        self._store.registry_ids[project] = str(exp.tags[REGISTRY_ID])
        return self._store.registry_ids[project]
