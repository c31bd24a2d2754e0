"""Pins made at once and pins next to other streams: never one object for two records, never another's slot.

Issue 51, cases 1 and 8. The races run in real processes (forked from the tests' fork server, so
each is a new process with its own SQLite connection) that wait at a barrier file and then call
the CLI's ``models pin`` / ``models alias`` at the same moment.
"""

from __future__ import annotations

import io
import json
import os
import select
from pathlib import Path
from typing import Any

import pytest
from ignite.engine import Events
from ignite.handlers import Checkpoint

from tests import forkserver
from tests.helpers import Target, attach, model, process_env, process_spec, trainer_engine
from tracker_saver import (
    RecordState,
    StreamOwnedError,
    TrackerSaver,
    find_models,
    get_model,
    load_checkpoint,
    pin_model,
    unpin_model,
)
from tracker_saver.cli.main import main
from tracker_saver.core.records import UploadInfo
from tracker_saver.registry.shared import shared_registry

#: A process that waits at the barrier (:func:`_at_once`), then runs the CLI with its arguments (``--json``).
_CLI_AT_ONCE = """
import os, sys
from pathlib import Path
from tracker_saver.cli.main import main
folder, me, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
os.write(ready := os.open(folder / "ready", os.O_WRONLY), b"x")
os.close(ready)
os.close(os.open(folder / "go", os.O_RDONLY))  # returns once the parent opens it: every process at once
sys.exit(main([*argv, "--json"]))
"""
#: The same with ``pin_model`` on a tracker's registry (a process config, as ``tests.helpers.process_spec`` makes).
_PIN_AT_ONCE = """
import json, os, sys
from pathlib import Path
from tests.helpers import spec_registry
from tracker_saver import pin_model
folder, me, config = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
registry = spec_registry(config)
os.write(ready := os.open(folder / "ready", os.O_WRONLY), b"x")
os.close(ready)
os.close(os.open(folder / "go", os.O_RDONLY))  # returns once the parent opens it: every process at once
print(json.dumps({"id": pin_model(config["record"], registry=registry).id}))
"""


def _at_once(folder: Path, code: str, arguments: list[list[str]]) -> list[dict[str, object]]:
    """Run ``code`` once per argument list, each in its own process, all released together; their JSON outputs."""
    folder.mkdir()
    os.mkfifo(folder / "ready")
    os.mkfifo(folder / "go")
    procs = []
    for i, args in enumerate(arguments):
        out = open(folder / f"out-{i}", "w+")  # noqa: SIM115 (closed below, once the process is done)
        proc = forkserver.spawn("-c", [code, str(folder), str(i), *args], env=process_env(), stdout=out, stderr=out)
        procs.append((proc, out))
    # Each process writes one byte to the FIFO "ready", then blocks opening "go" until a writer opens
    # it: we read the bytes of all (a blocking read: our own write end keeps it from reading EOF), then
    # open "go" and keep it open until they are done, so they leave the barrier together.
    ready = os.open(folder / "ready", os.O_RDWR)
    arrived = 0
    while arrived < len(arguments):
        assert select.select([ready], [], [], 60)[0], "a process never reached the barrier"
        arrived += len(os.read(ready, len(arguments)))
    go = os.open(folder / "go", os.O_WRONLY)
    results = []
    try:
        for proc, out in procs:
            code = proc.wait(60)
            out.seek(0)
            text = out.read()
            out.close()
            assert code == 0, text
            results.append(json.loads(text))
    finally:
        os.close(go)
        os.close(ready)
    return results


def _trained(target: Target, epochs: int) -> list[str]:
    """Ids of the live records of one stream after ``epochs`` saves that all stay (n_saved=epochs)."""
    saver = target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=epochs)
    trainer.run([0], max_epochs=epochs)
    saver.close()
    return [r.id for r in find_models(project="p", states=["live"], registry=target.registry)]


def _intact(target: Target, record_id: str) -> None:
    record = get_model(record_id, registry=target.registry)
    assert target.storage().digest(record.key) == (record.size, record.sha256)
    load_checkpoint(record_id, {"model": model()}, registry=target.registry)


def _sqlite_pins_race(target: Target, tmp_path: Path, *, processes: int, rounds: int) -> None:
    """``processes`` CLI processes pin one record at once, ``rounds`` times (a record of its own each): each
    round makes one pin, which all of them get; unpinning one leaves every other record loadable."""
    sources = _trained(target, rounds)
    for n, source in enumerate(sources):
        command = ["models", "pin", source, "--registry", target.registry]
        made = _at_once(tmp_path / f"round{n}", _CLI_AT_ONCE, [command] * processes)
        assert len({str(pin["id"]) for pin in made}) == 1, made  # each process got the same pin
    pins = find_models(project="p", states=["pinned"], registry=target.registry)
    assert sorted(str(p.metadata["pinned_from"]) for p in pins) == sorted(sources)  # one pin per record
    assert len({p.key for p in pins}) == len(pins)
    objects = [o.key for o in target.storage().list("p/r/+pinned/")]
    assert sorted(objects) == sorted(p.key for p in pins)  # the copies that lost were deleted
    unpin_model(pins[0].id, registry=target.registry)
    for record_id in [*sources, *(p.id for p in pins[1:])]:
        _intact(target, record_id)


@pytest.mark.parametrize("processes", [2, 4])
def test_processes_that_pin_one_record_at_once_get_one_pin_whose_unpin_leaves_every_record_loadable(
    local_target: Target, tmp_path: Path, processes: int
) -> None:
    _sqlite_pins_race(local_target, tmp_path, processes=processes, rounds=2)


@pytest.mark.ceph
def test_processes_that_pin_one_record_at_once_on_ceph_get_one_pin(s3_output_uri: str, tmp_path: Path) -> None:
    target = Target(output_uri=s3_output_uri, registry=str(tmp_path / "registry.db"))
    _sqlite_pins_race(target, tmp_path, processes=2, rounds=1)


def test_processes_that_alias_one_slot_record_at_once_make_one_pinned_copy(
    local_target: Target, tmp_path: Path
) -> None:
    (source,) = _trained(local_target, 1)
    command = ["models", "alias", source, "production", "--registry", local_target.registry]
    _at_once(tmp_path / "aliases", _CLI_AT_ONCE, [command] * 3)
    (pin,) = find_models(project="p", states=["pinned"], registry=local_target.registry)
    assert pin.aliases == ("production",) and str(pin.metadata["pinned_from"]) == source
    assert [o.key for o in local_target.storage().list("p/r/+pinned/")] == [pin.key]


def _tracker_pins_race(target: Target, tmp_path: Path) -> None:
    """Two processes pin one record at once on a tracker without transactions: one pin or several, never one
    object for two records; unpinning one leaves the others and the record loadable."""
    (source,) = _trained(target, 1)
    config = json.dumps({**process_spec(target, run="r"), "record": source})
    made = _at_once(tmp_path / "pins", _PIN_AT_ONCE, [[config]] * 2)
    pins = find_models(project="p", states=["pinned"], registry=target.registry)
    assert {str(pin["id"]) for pin in made} == {p.id for p in pins}
    assert len({p.key for p in pins}) == len(pins)  # every pin names bytes of its own
    assert sorted(o.key for o in target.storage().list("p/r/+pinned/")) == sorted(p.key for p in pins)
    unpin_model(pins[0].id, registry=target.registry)
    for record_id in [source, *(p.id for p in pins[1:])]:
        _intact(target, record_id)


@pytest.mark.mlflow
def test_processes_that_pin_one_record_at_once_on_mlflow_never_share_an_object(
    mlflow_registry: Any, tmp_path: Path
) -> None:
    _tracker_pins_race(Target(output_uri=str(tmp_path / "output"), registry=mlflow_registry), tmp_path)


@pytest.mark.clearml
def test_processes_that_pin_one_record_at_once_on_clearml_never_share_an_object(
    clearml_server: Any, clearml_project: str, tmp_path: Path
) -> None:
    _tracker_pins_race(Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}"), tmp_path)


@pytest.mark.clearml
def test_two_alias_moves_at_once_on_clearml_never_leave_the_alias_on_no_record(
    clearml_standin: Any, clearml_project: str, tmp_path: Path
) -> None:
    """ClearML has no transaction: each move tags its record, then untags the others. Two moves at once
    (every request 250 ms, so they interleave) each untagged the other's record too, leaving the alias on none."""
    target = Target(output_uri=str(tmp_path / "output"), registry=f"clearml:{clearml_project}")
    second, third = (pin_model(r, registry=target.registry) for r in _trained(target, 2))
    command = ["models", "alias", "{}", "production", "--registry", target.registry]
    clearml_standin.latency = 0.25
    try:
        _at_once(tmp_path / "moves", _CLI_AT_ONCE, [[c.format(r.id) for c in command] for r in (second, third)])
    finally:
        clearml_standin.latency = 0.0
    holders = [r.id for r in find_models(project="p", states=["pinned"], registry=target.registry) if r.aliases]
    assert holders and set(holders) <= {second.id, third.id}, holders


def test_unpinning_one_of_two_pins_that_share_an_object_keeps_it_for_the_other(
    local_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two pins an earlier release's race left at one key (``p/r/pinned/<name>``): the object goes with the last."""
    (source_id,) = _trained(local_target, 1)
    source = get_model(source_id, registry=local_target.registry)
    storage, registry = local_target.storage(), shared_registry(local_target.registry)
    key = f"p/r/pinned/{source.filename}"
    storage.put_stream(key, io.BytesIO(storage.get(source.key).read()))
    info = UploadInfo("p", "r", source.stream, source.filename, metadata={"pinned_from": int(source_id)}, slot=None,
                      key=key, output_uri=source.output_uri)  # fmt: skip
    first, second = (
        registry.labels.create_pinned(info, uri=storage.url(key), sha256=source.sha256 or "", size=source.size or 0)
        for _ in range(2)
    )
    assert main(["models", "unpin", first.id, "--registry", local_target.registry, "--json"]) == 0
    _intact(local_target, second.id)
    assert json.loads(capsys.readouterr().out)["deleted"] is None  # the command says the object stayed
    assert unpin_model(second.id, registry=local_target.registry) is True
    assert storage.stat(key) is None


def _save(output_uri: str, registry: str, project: str, run: str, epochs: int, pattern: str | None = None) -> str:
    """The id of the live record that ``epochs`` epochs of a ``model`` stream leave (n_saved=1)."""
    saver = TrackerSaver(output_uri, project=project, run=run, registry=registry)
    net = model()
    trainer = trainer_engine(net)  # each epoch changes the weights: two runs' checkpoints differ
    kwargs = {"filename_pattern": pattern} if pattern else {}
    handler = Checkpoint({"model": net}, saver, n_saved=1, **kwargs)  # type: ignore[arg-type]
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    trainer.run([0], max_epochs=epochs)
    saver.close()
    (live,) = find_models(project=project, run=run, states=["live"], registry=registry)
    return live.id


def test_a_pin_never_lands_on_the_slot_of_a_stream_whose_project_ends_in_the_run(local_target: Target) -> None:
    """Project ``team/vision`` run ``pinned`` keeps ``team/vision/pinned/model.slot0.pt``, which an earlier
    release's pin key of project ``team`` run ``vision`` (file ``model.slot0.pt``) was too."""
    out, reg = local_target.output_uri, local_target.registry
    victim = _save(out, reg, "team/vision", "pinned", epochs=1)
    assert get_model(victim, registry=reg).key == "team/vision/pinned/model.slot0.pt"
    other = _save(out, reg, "team", "vision", epochs=2, pattern="{name}.slot0.{ext}")
    assert get_model(other, registry=reg).filename == "model.slot0.pt"
    assert get_model(other, registry=reg).sha256 != get_model(victim, registry=reg).sha256
    pinned = pin_model(other, registry=reg)
    _intact(local_target, victim)
    assert pinned.key.startswith("team/vision/+pinned/")
    unpin_model(pinned.id, registry=reg)
    _intact(local_target, victim)
    _intact(local_target, other)


def test_unpinning_an_earlier_releases_pin_that_is_another_streams_slot_leaves_the_slot(local_target: Target) -> None:
    """An earlier release pinned project ``team`` run ``vision``'s ``model.slot0.pt`` at ``team/vision/pinned/…``,
    which is the live slot of project ``team/vision`` run ``pinned``: the unpin deletes the record, not the slot."""
    out, reg = local_target.output_uri, local_target.registry
    victim = get_model(_save(out, reg, "team/vision", "pinned", epochs=1), registry=reg)
    storage, registry = local_target.storage(), shared_registry(reg)
    info = UploadInfo("team", "vision", "model", "model.slot0.pt", metadata={}, slot=None, key=victim.key,
                      output_uri=victim.output_uri)  # fmt: skip
    old_pin = registry.labels.create_pinned(info, uri=storage.url(victim.key or ""), sha256=victim.sha256 or "",
                                     size=victim.size or 0)  # fmt: skip
    unpin_model(old_pin.id, registry=reg)
    _intact(local_target, victim.id)


def test_a_pin_by_a_registry_that_does_not_own_the_stream_is_refused_before_any_byte(
    local_target: Target, tmp_path: Path
) -> None:
    (owner_id,) = _trained(local_target, 1)
    source = get_model(owner_id, registry=local_target.registry)
    # Another registry with a record of the same object: a second person's, who copied the record over.
    other = shared_registry(str(tmp_path / "other.db"))
    info = UploadInfo("p", "r", source.stream, source.filename, metadata={}, slot=source.slot, key=source.key,
                      output_uri=source.output_uri)  # fmt: skip
    copied = other.records.create_pending(info, uri=source.uri or "")
    other.records.make_live(copied.id, sha256=source.sha256 or "", size=source.size or 0)
    with pytest.raises(StreamOwnedError, match="belongs to another registry"):
        pin_model(copied.id, registry=other)
    assert [o.key for o in local_target.storage().list("p/r/")] == [source.key]
    assert find_models(project="p", states=["pinned"], registry=other) == []
    assert get_model(owner_id, registry=local_target.registry).state is RecordState.LIVE
