"""The ClearML codec is pure: records ↔ model dicts, typed metadata, the state mirror, query pushdown, claims.

No server, no clearml import: these run in every test session.
"""

from __future__ import annotations

import json
import math

import pytest

from tracker_saver.core.claims import Holder
from tracker_saver.core.errors import ConfigError, RecordNotFoundError, UnreadableRecordError
from tracker_saver.core.query import parse_where
from tracker_saver.core.records import RecordState, StreamId, UploadInfo
from tracker_saver.integrations.clearml.codec import (
    STATE_TAGS,
    check_id,
    check_metadata,
    check_tags,
    claim_comment,
    claim_tag,
    decode_value,
    encode_value,
    is_record_model,
    metadata_filters,
    mirror,
    model_record,
    pending_fields,
    pending_model,
    read_claim,
    task_run,
    with_metadata,
)
from tracker_saver.registry.base import Query

INFO = UploadInfo("mnist", "resnet.4f1c", "best_model", "best_model_3_val_acc=0.9000.pt",
                  metadata={"global_step": 3, "score": 0.9, "note": None}, tags=["mine"], slot=1,
                  key="mnist/resnet.4f1c/best_model.slot1.pt", output_uri="file:///out")  # fmt: skip
URI = "file:///out/mnist/resnet.4f1c/best_model.slot1.pt"


def _pending() -> dict:
    fields = pending_fields(INFO, uri=URI, metadata=dict(INFO.metadata), created_at=12.5)
    return with_metadata({**pending_model(INFO, ["mine"]), "id": "m1", "project": "p1", "task": "t1"}, fields)


@pytest.mark.parametrize("value", [None, True, False, 0, -3, 2**40, 0.5, -1e-300, math.inf, -math.inf, "", "x", "-1"])
def test_typed_metadata_values_survive_a_round_trip(value) -> None:
    back = decode_value(encode_value("k", value))
    assert back == value and type(back) is type(value)


def test_values_other_clients_wrote_decode_without_raising() -> None:
    assert decode_value({"type": "int", "value": "twelve"}) == "twelve"
    assert decode_value({"type": "float", "value": "nan"}) is None  # NaN is absent, as in SQLite
    assert decode_value({"type": "bool", "value": "yes"}) is True
    assert decode_value("not an item") is None
    assert decode_value(encode_value("score", math.nan)) is None


def test_a_record_round_trips_through_its_pending_model() -> None:
    record = model_record(_pending(), "mnist")
    assert (record.id, record.project, record.run, record.stream) == ("m1", "mnist", INFO.run, INFO.stream)
    assert (record.filename, record.name, record.slot, record.key) == (INFO.filename, INFO.name, 1, INFO.key)
    assert (record.state, record.uri, record.output_uri, record.created_at) == (RecordState.PENDING, URI,
                                                                                "file:///out", 12.5)  # fmt: skip
    assert record.metadata == {"global_step": 3, "score": 0.9, "note": None, "slot": 1, "created_at": 12.5}
    assert record.tags == ("mine",)  # the managed stream and state tags are not the user's


def test_a_pending_model_looks_unusable_and_its_digest_shows_once_committed() -> None:
    model = _pending()
    assert (model["uri"], model["system_tags"]) == ("", ["archived"])
    assert sorted(model["tags"]) == ["mine", "pending", "stream:best_model"]
    staged = with_metadata(model, {"sha256": "0" * 64, "size": 10})
    assert "sha256" not in model_record(staged, "mnist").metadata  # staged, not committed
    live = model_record(with_metadata(staged, {"state": "live"}), "mnist")
    assert (live.sha256, live.size, live.metadata["size"]) == ("0" * 64, 10, 10)


def test_a_hand_edited_state_is_never_loadable() -> None:
    with pytest.raises(UnreadableRecordError, match="record m1 cannot be read: its metadata 'state' is 'LIVE!'"):
        model_record(with_metadata(_pending(), {"state": "LIVE!"}), "mnist")  # queries skip it, fsck names it
    assert not is_record_model({"id": "x", "metadata": {}}) and is_record_model(_pending())


@pytest.mark.parametrize("state", list(RecordState))
def test_each_state_is_mirrored_by_tags_archive_flag_and_uri(state: RecordState) -> None:
    shown = mirror({**_pending(), "system_tags": ["archived", "other"]}, state, "best_model")
    assert ("archived" in shown["system_tags"]) is (not state.loadable)
    assert "other" in shown["system_tags"]
    assert shown["uri"] == (URI if state.loadable else "")  # ClearML never downloads an evicted slot
    state_tags = [t for t in shown["tags"] if t in STATE_TAGS.values()]
    assert state_tags == ([STATE_TAGS[state]] if state in STATE_TAGS else [])
    assert "stream:best_model" in shown["tags"] and "mine" in shown["tags"]


def test_query_pushdown_leaves_operators_numbers_and_ranges_to_the_client() -> None:
    where = parse_where({"prefix": "best", "tag": ("in", ["a", "b"]), "note": "-1", "score": (">", 0.5),
                         "global_step": 3, "odd.key": "x", "kind": ("!=", "y")})  # fmt: skip
    pushed = metadata_filters(Query(run="r", stream="__$ne", slot=2, states=(RecordState.LIVE,), where=where))
    assert pushed == {
        "metadata.state.value": ["live"],
        "metadata.run.value": ["r"],
        "metadata.slot.value": ["2"],
        "metadata.prefix.value": ["best"],
        "metadata.tag.value": ["a", "b"],
    }
    assert metadata_filters(Query(states=())) is None  # nothing can match: no request
    assert metadata_filters(Query())["metadata.state.value"] == sorted(s.value for s in RecordState)


def test_a_claim_reads_back_its_holder_and_other_comments_are_not_claims() -> None:
    stream = StreamId("file:///out", "mnist", "r", "best_model")
    holder = Holder(token="t", host="h", pid=7, started=1, since=2.0, command="train.py")
    model = {"id": "c1", "comment": claim_comment(stream, holder, 99.0)}
    assert read_claim(model, stream) == (holder, 99.0)
    assert read_claim(model, StreamId("file:///other", "mnist", "r", "best_model")) is None
    assert read_claim({"comment": "tracker_saver checkpoint x"}, stream) is None
    assert read_claim({"comment": json.dumps({"kind": "claim"})}, stream) is None
    assert claim_tag(stream) == claim_tag(StreamId(*json.loads(json.dumps(list(vars(stream).values())))))
    assert claim_tag(stream) != claim_tag(StreamId("file:///out", "mnist", "r", "last"))


def test_reserved_names_are_config_errors_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="tag 'evicted' .* reserved .*choose another tag"):
        check_tags(["ok", "evicted"], "record x")
    with pytest.raises(ConfigError, match="'run' are record fields .*rename them in your callback"):
        check_metadata({"run": "r"}, "record x")
    with pytest.raises(ConfigError, match="weights"):  # a TypeError would make Ignite retry without metadata
        check_metadata({"weights": object()}, "record x")  # type: ignore[dict-item]
    with pytest.raises(RecordNotFoundError, match="is not a ClearML model id"):
        check_id("../etc")


def test_a_run_is_the_task_name_and_id() -> None:
    class Task:
        name, id = "resnet (lr=0.1)", "4f1c"

    assert task_run(Task()) == "resnet (lr=0.1).4f1c"
