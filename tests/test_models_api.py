"""The public model functions: find, count, resolve, rename, tag, download, history; fast to import."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, SCORES, Target, attach, model, trainer_engine
from tracker_saver import (
    ConfigError,
    IntegrityError,
    RecordNotFoundError,
    RegistryError,
    add_tags,
    count_models,
    download_model,
    find_models,
    open_registry,
    remove_tags,
    rename_model,
    resolve_model,
    slot_history,
)
from tracker_saver.core.records import MAX_NAME_LENGTH
from tracker_saver.registry.shared import shared_registry
from tracker_saver.registry.sqlite import SQLiteRegistry


@pytest.fixture
def trained(local_target: Target) -> Target:
    """Run ``r``: best_model (n_saved=2, scores) and model (n_saved=1) for 4 epochs."""
    saver = local_target.saver()
    trainer = trainer_engine(model())
    attach(trainer, saver, {"model": model()}, n_saved=1)
    attach(trainer, saver, {"model": model()}, n_saved=2, prefix="best", scores=SCORES)
    trainer.run([0], max_epochs=4)
    saver.close()
    return local_target


def test_importing_models_and_the_package_pulls_neither_torch_nor_ignite() -> None:
    code = (
        "import sys, tracker_saver, tracker_saver.models, tracker_saver.registry.sqlite;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ignite', 'boto3', 'clearml'));"
        "assert not bad, bad;"
        "from tracker_saver import TrackerSaver, resume;"
        "assert 'torch' in sys.modules and TrackerSaver.__name__ == 'TrackerSaver'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_find_models_filters_by_filename_name_tag_alias_and_pages(trained: Target) -> None:
    reg = trained.registry
    everything = find_models(project="p", order_by="created_at", registry=reg)
    assert len(everything) == count_models(project="p", registry=reg) == 8
    page = find_models(project="p", order_by="created_at", offset=2, limit=3, registry=reg)
    assert [r.id for r in page] == [r.id for r in everything[2:5]]
    best = find_models(stream="best_model", live=True, registry=reg)
    assert [r.global_step for r in best] == [2, 4]
    target = best[0]
    assert [r.id for r in find_models(filename=target.filename, registry=reg)] == [target.id]
    rename_model(target.id, "keeper", registry=reg)
    assert [r.id for r in find_models(name="keeper", registry=reg)] == [target.id]
    assert add_tags(target.id, ["candidate", "reviewed"], registry=reg).tags == ("candidate", "reviewed")
    assert remove_tags(target.id, ["candidate"], registry=reg).tags == ("reviewed",)
    assert [r.id for r in find_models(tag="reviewed", registry=reg)] == [target.id]
    assert count_models(tag="candidate", registry=reg) == 0
    by_alias = find_models(project="p", run="r", alias="best", registry=reg)
    assert [(r.stream, r.global_step) for r in by_alias] == [("best_model", 4)]  # no scores, no best
    latest = find_models(project="p", run="r", alias="latest", order_by="stream", registry=reg)
    assert [(r.stream, r.global_step) for r in latest] == [("best_model", 4), ("model", 4)]
    assert count_models(alias="latest", registry=reg) == 2
    assert [r.stream for r in find_models(where=["state=live", "stream!=model"], registry=reg)] == ["best_model"] * 2
    assert count_models(where="name=keeper", registry=reg) == 1


def test_resolve_model_reads_ids_streams_and_aliases(trained: Target) -> None:
    reg = trained.registry
    latest = find_models(stream="best_model", alias="latest", registry=reg)[0]
    assert resolve_model(latest.id, registry=reg).id == latest.id
    assert resolve_model(int(latest.id), registry=reg).id == latest.id
    assert resolve_model("p/r/best_model", registry=reg).id == latest.id
    assert resolve_model("p/r/best_model@latest", registry=reg).id == latest.id
    for bad, message in (
        ("p/r/model@best", "no record is p/r/model@best"),
        ("p/r/nothing", "no record is p/r/nothing"),
        ("p/r/best_model@", "is not PROJECT/RUN/STREAM@ALIAS"),
        ("999", "record 999 does not exist"),
    ):
        with pytest.raises(RecordNotFoundError, match=message):
            resolve_model(bad, registry=reg)


def test_rename_refuses_empty_long_and_control_character_names(trained: Target) -> None:
    record = find_models(registry=trained.registry)[0]
    for bad, message in (
        ("  ", "is empty"),
        ("x" * (MAX_NAME_LENGTH + 1), f"is {MAX_NAME_LENGTH + 1} characters long: give a name of at most 255"),
        ("a\nb", r"holds U\+000A \(LF\) at character 2, a control character"),
        ("tab\there", r"holds U\+0009 \(TAB\) at character 4, a control character"),
    ):
        with pytest.raises(ConfigError, match=message):
            rename_model(record.id, bad, registry=trained.registry)
    assert rename_model(record.id, "x" * MAX_NAME_LENGTH, registry=trained.registry).name == "x" * MAX_NAME_LENGTH


def test_bad_where_values_and_negative_limits_are_config_errors(trained: Target) -> None:
    reg = trained.registry
    with pytest.raises(ConfigError, match="'abc' is not a number: give a number"):
        find_models(where="score>abc", registry=reg)
    with pytest.raises(ConfigError, match="'name' is text"):
        find_models(where="name>3", registry=reg)
    with pytest.raises(ConfigError, match="limit must be a non-negative integer, got -1"):
        find_models(limit=-1, registry=reg)
    with pytest.raises(ConfigError, match="offset must be a non-negative integer, got -2"):
        find_models(offset=-2, registry=reg)
    with pytest.raises(ConfigError, match="'zombie' is not a valid RecordState"):
        find_models(states=["zombie"], registry=reg)
    assert find_models(limit=0, registry=reg) == []


def test_readers_never_create_a_registry(tmp_path: Path) -> None:
    missing = tmp_path / "typo" / "registry.db"
    for call in (
        lambda: find_models(registry=str(missing)),
        lambda: count_models(registry=str(missing)),
        lambda: resolve_model("1", registry=str(missing)),
        lambda: open_registry(str(missing), create=False),
        lambda: shared_registry(str(missing), create=False),
    ):
        # Worded for the Python caller: the registry= argument, not the command line's --registry.
        with pytest.raises(
            RegistryError, match=f"no registry at {missing}: check the path, or pass registry= the file"
        ):
            call()
    assert not missing.parent.exists()
    assert open_registry(str(missing)).uri.endswith("registry.db")  # writers still create it


def test_download_verifies_while_streaming_and_leaves_nothing_half_written(trained: Target, tmp_path: Path) -> None:
    reg = trained.registry
    record = resolve_model("p/r/best_model@best", registry=reg)
    folder = tmp_path / "downloads"
    folder.mkdir()
    path = download_model("p/r/best_model@best", folder, registry=reg)
    assert path == folder / record.name and path.stat().st_size == record.size
    with pytest.raises(ConfigError, match=r"its folder '.*/new' does not exist; create it first"):
        download_model(record, tmp_path / "new" / "model.pt", registry=reg)  # as cp: a typo makes no folders
    assert not (tmp_path / "new").exists()
    as_file = download_model(record, tmp_path / "model.pt", registry=reg)
    assert as_file.read_bytes() == path.read_bytes()
    trained.storage().put_stream(record.key, io.BytesIO(b"x" * record.size))  # same size, other bytes
    with pytest.raises(IntegrityError, match="nothing was written"):
        download_model(record, tmp_path / "bad.pt", registry=reg)
    assert not (tmp_path / "bad.pt").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []
    evicted = find_models(states=["evicted"], registry=reg)[0]
    with pytest.raises(RegistryError, match="is evicted"):
        download_model(evicted, tmp_path / "old.pt", registry=reg)


def test_slot_history_lists_every_record_of_the_slot_oldest_first(trained: Target) -> None:
    reg = trained.registry
    records = find_models(stream="model", registry=reg)
    history = slot_history(records[-1], registry=reg)
    assert [r.id for r in history] == [r.id for r in records]  # n_saved=1: one slot
    assert {r.slot for r in history} == {0}


def _bulk_registry(path: Path, n: int, streams: int) -> None:
    """``n`` live/evicted records over ``streams`` streams, with score, step and a tag, inserted directly."""
    SQLiteRegistry(path).close()
    conn = sqlite3.connect(path)
    now = time.time()
    rows, meta, tags = [], [], []
    for i in range(1, n + 1):
        stream = f"s{i % streams}"
        state = "live" if i > n - 2 * streams else "evicted"
        key = f"p/r/{stream}.slot{i % 2}.pt"
        rows.append((i, "p", "r", stream, f"{stream}_{i}.pt", f"{stream}_{i}.pt", state, i % 2, key,
                     f"file:///o/{key}", "0" * 64, 10, now + i, now + i, "file:///o"))  # fmt: skip
        meta += [(i, "score", "float", (i % 97) / 97, repr((i % 97) / 97)), (i, "global_step", "int", i, str(i))]
        tags.append((i, f"t{i % 3}"))
    conn.executemany("INSERT INTO records (id, project, run, stream, filename, name, state, slot, key, uri,"
                     " sha256, size, created_at, updated_at, output_uri) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)  # fmt: skip
    conn.executemany("INSERT INTO metadata VALUES (?, ?, ?, ?, ?)", meta)
    conn.executemany("INSERT INTO tags VALUES (?, ?)", tags)
    conn.commit()
    conn.close()


def test_every_record_gets_its_tags_past_500_rows(tmp_path: Path) -> None:
    path = tmp_path / "bulk.db"
    _bulk_registry(path, 1200, 10)
    records = find_models(registry=str(path))
    assert len(records) == 1200
    assert all(r.tags == (f"t{int(r.id) % 3}",) for r in records)
    assert sum("latest" in r.aliases for r in records) == sum("best" in r.aliases for r in records) == 10


def test_find_models_on_ten_thousand_records_pages_sorts_and_counts_them_all(tmp_path: Path) -> None:
    """Right answers at scale; how long they take is benchmarks/bench_cli.py's (``models list`` on 10k records)."""
    path = tmp_path / "big.db"
    _bulk_registry(path, 10_000, 100)
    reg = str(path)
    newest = find_models(limit=50, order_by="-created_at", registry=reg)
    assert [int(r.id) for r in newest] == list(range(10_000, 9_950, -1))
    scores = sorted(((i % 97) / 97 for i in range(1, 10_001)), reverse=True)
    assert [r.score for r in find_models(limit=50, order_by="-score", registry=reg)] == scores[:50]
    best = find_models(alias="best", registry=reg)
    assert len(best) == 100 and all("best" in r.aliases for r in best)  # one per stream
    assert len(find_models(registry=reg)) == 10_000
    assert count_models(where="score>0.5", registry=reg) == sum(score > 0.5 for score in scores)
