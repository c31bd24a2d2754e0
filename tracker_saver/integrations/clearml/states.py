"""The ClearML registry's state changes: create pending, supersede, make live, set a state, each checked first.

State changes: ClearML has no compare-and-set, so each change reads the model, checks the
state it leaves, then writes. Toward a loadable state (``pending → live``, ``evicted →
live/revived``) metadata ``state`` is written first (the commit point) and the mirror after;
away from one (``live/revived → evicted``, ``pending → failed``) the mirror changes first
(archive, tags, uri cleared, off the task) and metadata ``state`` last. A failed follow-up
therefore never leaves a model that looks more loadable in ClearML than it is.
``supersede`` reads both models in one request, checks both, writes the staged sha256/size, then
evicts the replaced record that way; a replaced record someone deleted (ClearML's web UI) is
logged as a warning, and its slot reused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.core.records import LOADABLE, MetaValue, Record, RecordState, UploadInfo
from tracker_saver.integrations.clearml.codec import (
    MIN_NAME,
    check_metadata,
    check_tags,
    with_metadata,
)
from tracker_saver.integrations.clearml.tasks import ClearMLTasks
from tracker_saver.integrations.clearml.transport import ClearMLTransport
from tracker_saver.registry.base import check_transition

__all__ = ["ClearMLStates"]

log = logging.getLogger(__name__)


class ClearMLStates:
    """A ClearML registry's record states: metadata ``state`` is the truth, the rest mirrors it.

    Args:
        transport: the registry's transport, through which every request goes.
        tasks: the registry's tasks, which create models, list them on their task and mirror states.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            transport = ClearMLTransport()
            states = ClearMLStates(transport, ClearMLTasks(transport, None, framework="PyTorch"))
            states.set_state("4f1c...", RecordState.EVICTED, expected=LOADABLE).state   # RecordState.EVICTED
    """

    def __init__(self, transport: ClearMLTransport, tasks: ClearMLTasks) -> None:
        self._transport = transport
        self._tasks = tasks

    def create_pending(self, info: UploadInfo, *, uri: str) -> Record:
        metadata = check_metadata(info.metadata, f"record {info.filename!r}")
        tags = check_tags(info.tags, f"record {info.filename!r}")
        if not isinstance(info.name, str) or len(info.name.strip()) < MIN_NAME:
            raise ConfigError(
                f"record name {info.name!r} is too short for a ClearML model (at least {MIN_NAME} characters): "
                "use a longer filename_prefix or name"
            )
        return self._transport.record(
            self._tasks.create_model(info, uri=uri, metadata=metadata, tags=tags, extra={}, kind="model")
        )

    def make_live(
        self,
        record_id: str,
        *,
        sha256: str,
        size: int,
        metadata: dict[str, MetaValue] | None = None,
        fingerprint: str | None = None,
    ) -> Record:
        model = self._transport.fetch(record_id)
        record = self._transport.record(model)
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pending: it cannot become live", record_id=record_id
            )
        extra = check_metadata(metadata or {}, f"record {record_id}")
        uri = record.uri or ""
        items = {**extra, "sha256": sha256, "size": int(size), "uri": uri, "state": RecordState.LIVE.value}
        if fingerprint is not None:
            items["fingerprint"] = fingerprint
        # The commit point: from here the record is live, whatever the mirror says.
        self._transport.write_metadata(record_id, items, f"committing model {record_id} ({record.filename!r})")
        model = self._tasks.show(with_metadata(model, items), RecordState.LIVE, record.stream)
        self._tasks.attach(model, record.filename)
        return self._transport.record(model)

    def _move(self, model: dict[str, Any], record: Record, state: RecordState, error: str | None = None) -> Record:
        """Change a checked record's state: metadata ``state`` is the truth, the rest mirrors it.

        Toward loadable the truth is written first; away from it, what ClearML's UI and
        ``Model.query_models`` see (archive, tags, uri, the task's list) changes first and the truth
        last. Either way a failed follow-up leaves the model looking no more loadable than it is.
        """
        items: dict[str, MetaValue] = {"state": state.value}
        if error is not None:
            items["error"] = str(error)
        what = f"marking model {record.id} ({record.filename!r}) {state.value}"
        if state.loadable:
            self._transport.write_metadata(record.id, items, what)
            model = self._tasks.show(with_metadata(model, items), state, record.stream)
            if not record.state.loadable:
                self._tasks.attach(model, record.filename)
        else:
            model = self._tasks.show(model, state, record.stream)
            if record.state.loadable:
                self._tasks.detach(model, record.filename)
            self._transport.write_metadata(record.id, items, what)
            model = with_metadata(model, items)
        return self._transport.record(model)

    def set_state(
        self, record_id: str, state: RecordState, *, expected: Sequence[RecordState], error: str | None = None
    ) -> Record:
        state = RecordState(state)
        model = self._transport.fetch(record_id)
        record = self._transport.record(model)
        check_transition(record, state, expected)
        return self._move(model, record, state, error)

    def supersede(self, record_id: str, *, sha256: str, size: int, replaces: str | None) -> None:
        """Note the staged digest on the pending record, then evict ``replaces``; both are checked first.

        ClearML has no transaction: both models are read (one request) and checked before anything
        is written, then the digest is written, then the eviction (see :meth:`_move`).
        """
        replaced = [] if replaces is None else [replaces]
        models = self._transport.fetch_many([record_id, *replaced], missing_ok=replaced)
        record = self._transport.record(models[record_id])
        if record.state is not RecordState.PENDING:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, no longer pending: its save cannot commit",
                record_id=record_id,
            )
        old = self._transport.record(models[replaces]) if replaces in models else None
        if replaces is not None and old is None:
            # Deleted by another client (the web UI's delete): nothing to evict, the slot is reused.
            log.warning(
                "ClearML registry %s: record %s, which record %s replaces in its slot, no longer exists "
                "(deleted in ClearML's web UI?): the slot is reused",
                self._transport.uri,
                replaces,
                record_id,
            )
        if old is not None and old.state not in LOADABLE:
            raise RegistryError(
                f"record {old.id}, which record {record_id} replaces in its slot, is {old.state.value}, no longer "
                "live: another writer changed the slot",
                record_id=old.id,
            )
        self._transport.write_metadata(
            record_id, {"sha256": sha256, "size": int(size)}, f"noting the staged digest of model {record_id}"
        )
        if old is not None:
            self._move(models[old.id], old, RecordState.EVICTED)
