"""What users change on a ClearML record: its name, tags and aliases (``alias:<name>`` tags); pinned records.

ClearML has no transaction: each change reads the model and writes what changes, in an order
that never leaves an alias naming nothing, or a pinned model that looks loadable before its
metadata says ``pinned``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tracker_saver.core.errors import ConfigError, RecordNotFoundError, RegistryError
from tracker_saver.core.records import MetaValue, Record, RecordState, UploadInfo, check_alias, check_display_name
from tracker_saver.integrations.clearml.codec import (
    ALIAS_TAG_PREFIX,
    MIN_NAME,
    check_metadata,
    check_tags,
)
from tracker_saver.integrations.clearml.tasks import ClearMLTasks
from tracker_saver.integrations.clearml.transport import ClearMLTransport
from tracker_saver.registry.base import Labels, RecordStore

__all__ = ["ClearMLLabels"]


class ClearMLLabels(Labels):
    """A ClearML registry's names, tags, aliases and pinned records.

    Args:
        transport: the registry's transport, through which every request goes.
        tasks: the registry's tasks, which create a pinned record's model and show its state.
        records: the registry's records, which read a record back with its derived aliases.

    Examples:
        Needs a ClearML server (``tests/test_clearml_*.py`` run these against the stand-in)::

            transport = ClearMLTransport()
            tasks = ClearMLTasks(transport, None, framework="PyTorch")
            labels = ClearMLLabels(transport, tasks, ClearMLRecords(transport, tasks, print))
            labels.add_tags("4f1c...", ["baseline"]).tags   # ('baseline',)
    """

    def __init__(self, transport: ClearMLTransport, tasks: ClearMLTasks, records: RecordStore) -> None:
        self._transport = transport
        self._tasks = tasks
        self._records = records

    def rename(self, record_id: str, name: str) -> Record:
        check_display_name(record_id, name)
        model = self._transport.fetch(record_id)
        if len(name.strip()) < MIN_NAME:
            raise ConfigError(
                f"new name {name!r} for record {record_id} is too short for a ClearML model "
                f"(at least {MIN_NAME} characters): give a longer name"
            )
        self._transport.send(
            self._transport.services().models.EditRequest(model=record_id, name=name),
            f"renaming model {record_id}",
            record_id=record_id,
        )
        return self._transport.record({**model, "name": name.strip()})

    def add_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        new = check_tags(tags, f"record {record_id}")
        model = self._transport.fetch(record_id)
        merged = sorted({*(model.get("tags") or []), *new})
        if merged != sorted(model.get("tags") or []):
            self._edit_tags(model, merged, f"tagging model {record_id}")
        return self._transport.record({**model, "tags": merged})

    def remove_tags(self, record_id: str, tags: Iterable[str]) -> Record:
        gone = set(check_tags(tags, f"record {record_id}"))
        model = self._transport.fetch(record_id)
        kept = sorted(t for t in model.get("tags") or [] if t not in gone)
        if kept != sorted(model.get("tags") or []):
            self._edit_tags(model, kept, f"untagging model {record_id}")
        return self._transport.record({**model, "tags": kept})

    def _alias_holders(self, project_id: str, alias: str) -> list[dict[str, Any]]:
        data = self._transport.send(
            self._transport.services().models.GetAllRequest(
                project=[project_id], tags=[ALIAS_TAG_PREFIX + alias], only_fields=["id", "tags"]
            ),
            f"looking up alias {alias!r}",
        )
        return [m for m in data.get("models") or [] if ALIAS_TAG_PREFIX + alias in (m.get("tags") or [])]

    def _edit_tags(self, model: dict[str, Any], tags: list[str], what: str) -> None:
        edit = self._transport.services().models.EditRequest(model=model["id"], tags=sorted(set(tags)))
        self._transport.send(edit, what, record_id=str(model["id"]))

    def set_alias(self, record_id: str, alias: str) -> Record:
        """Tag the model ``alias:<alias>`` and untag every other model of its project that had it before.

        ClearML has no transaction: the holders are read first, the new holder is tagged, then
        only those earlier holders are untagged. So the alias always names a record: a move never
        untags a model that another move tagged meanwhile (two moves at once used to untag each
        other's, leaving the alias on none); two at once may leave it on both, until the next move
        or unalias. Then the record is read back, derived aliases included.
        """
        check_alias(alias)
        model = self._transport.fetch(record_id)
        record = self._transport.record(model)
        if not record.state.loadable:
            raise RegistryError(
                f"record {record_id} is {record.state.value}: an alias names a loadable record (live, revived or "
                "pinned); pick a live record (tracker-saver models list --live)",
                record_id=record_id,
            )
        tag = ALIAS_TAG_PREFIX + alias
        before = self._alias_holders(str(model.get("project") or ""), alias)
        tags = [*(model.get("tags") or []), tag]
        self._edit_tags(model, tags, f"setting alias {alias!r} on model {record_id}")
        for other in before:
            if str(other["id"]) != record_id:
                rest = [t for t in other.get("tags") or [] if t != tag]
                self._edit_tags(other, rest, f"moving alias {alias!r} off model {other['id']}")
        return self._records.get(record_id)

    def remove_alias(self, project: str, alias: str) -> None:
        project_id = self._transport.project_id(project, create=False)
        holders = self._alias_holders(project_id, alias) if project_id is not None else []
        if not holders:
            raise RecordNotFoundError(
                f"project {project!r} has no alias {alias!r} in {self._transport.uri}: see `tracker-saver models list "
                f"--project {project}` for its aliases"
            )
        for model in holders:
            rest = [t for t in model.get("tags") or [] if t != ALIAS_TAG_PREFIX + alias]
            self._edit_tags(model, rest, f"removing alias {alias!r} from model {model['id']}")

    def create_pinned(
        self, info: UploadInfo, *, uri: str, sha256: str, size: int, fingerprint: str | None = None, once: bool = False
    ) -> Record:
        """Create the model archived (as a pending one), write its metadata with state ``pinned``
        (the commit point), then show it: a failure in between leaves nothing that looks loadable.

        ``once`` is not checked: with no transaction, two pins made at once are two models, each
        naming its own bytes (a fresh key per pin, :mod:`tracker_saver.save.keep`), and ``keep_copy``
        looked for an earlier pin before copying.
        """
        metadata = check_metadata(info.metadata, f"record {info.filename!r}")
        tags = check_tags(info.tags, f"record {info.filename!r}")
        extra: dict[str, MetaValue] = {"sha256": sha256, "size": int(size), "state": RecordState.PINNED.value}
        if fingerprint is not None:
            extra["fingerprint"] = fingerprint
        model = self._tasks.create_model(info, uri=uri, metadata=metadata, tags=tags, extra=extra, kind="pinned model")
        return self._transport.record(self._tasks.show(model, RecordState.PINNED, info.stream))

    def delete_pinned(self, record_id: str, *, unless_aliased: bool = False) -> bool:
        """Delete the pinned model; with ``unless_aliased``, one whose tags hold an alias stays (checked just
        before: no transaction)."""
        record = self._transport.record(self._transport.fetch(record_id))
        if record.state is not RecordState.PINNED:
            raise RegistryError(
                f"record {record_id} is {record.state.value}, not pinned: only a pinned record can be deleted "
                "(slot records stay as history)",
                record_id=record_id,
            )
        if unless_aliased and record.aliases:
            return False
        delete = self._transport.services().models.DeleteRequest(model=record_id, force=True)
        self._transport.send(delete, f"deleting pinned model {record_id}", record_id=record_id)
        return True

    def user_aliases(self, record: Record) -> tuple[str, ...]:
        # One request, not get's two: user aliases are the model's own alias: tags (no derived ones to add).
        return self._transport.record(self._transport.fetch(record.id)).aliases
