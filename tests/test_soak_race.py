"""The race soak, short: a training and 4 racers (3 on a tracker) on one registry and output_uri at once,
no violation.

Each test runs :func:`tests.soak.race.run_race`: one training process saves real Ignite
checkpoints while racer processes pin, unpin, alias, unalias, rename, prune, take over, repair and
get the same few records through the API, the CLI's ``main`` and ``python -m tracker_saver``, half of
the rounds all on the same record at once; then footprint, truth, shared pin objects, aliases,
renames and fsck are checked (the module docstring of ``tests.soak.race``). The long run is a
command of its own: ``scripts/dev.sh soak`` (``python -m tests.soak --race --long``).
``TRACKER_SAVER_RACE_OPS`` and ``TRACKER_SAVER_SOAK_SEED`` change the size and the seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.backends import Obj, Row
from tests.soak.check import Snapshot
from tests.soak.race import RaceStats, footprint, run_race, truth

SEED = int(os.environ.get("TRACKER_SAVER_SOAK_SEED", "2024"))
#: Operations per racer: 6 rounds, of which 3 put every racer on the same record at once. With the
#: seed's plan they make 8 of the 9 operations (as 10 rounds did) through the API, the CLI's ``main``
#: and 2 ``python -m tracker_saver`` processes (10 rounds: 4 such interpreters).
OPS = int(os.environ.get("TRACKER_SAVER_RACE_OPS", "6"))


#: On Ceph and on a tracker (ClearML, MLflow) 3 racers, a save every 0.3 s and no ``python -m
#: tracker_saver`` process: there each save uploads 11 MiB (Ceph) or costs several times a SQLite
#: transaction's CPU (a tracker), and a CLI process imports boto3 or the tracker's SDK (about 1.5 s
#: of CPU with MLflow). The long run has them all.
LEAN = {"racers": 3, "exec_every": 0, "step_s": 0.3}


def _race(backend: str, tmp_path: Path, **kwargs: object) -> RaceStats:
    lines: list[str] = []
    options: dict[str, object] = {"racers": 4, "ops": OPS, **kwargs}
    stats = run_race(backend, SEED, workdir=str(tmp_path / "race"), log=lines.append, **options)  # type: ignore[arg-type]
    print(stats.summary())
    return stats


def _assert_clean(stats: RaceStats) -> None:
    assert stats.violations == [], "\n".join(stats.violations)
    assert sum(stats.ops.values()) == stats.racers * OPS, stats.to_json()
    assert stats.outcomes["ok"] > OPS, stats.to_json()  # most operations did something
    assert stats.processes >= 4


def test_the_race_soak_on_a_local_folder_and_sqlite_finds_no_violation(tmp_path: Path) -> None:
    _assert_clean(_race("local", tmp_path))


@pytest.mark.ceph
def test_the_race_soak_on_ceph_rgw_and_sqlite_finds_no_violation(ceph_s3, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    _assert_clean(_race("s3", tmp_path, ceph=ceph_s3, **LEAN))


@pytest.mark.clearml
def test_the_race_soak_on_the_clearml_standin_finds_no_violation(tmp_path: Path) -> None:
    pytest.importorskip(
        "clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
    )
    _assert_clean(_race("clearml", tmp_path, **LEAN))


@pytest.mark.mlflow
def test_the_race_soak_on_a_real_mlflow_server_finds_no_violation(mlflow_server: str, tmp_path: Path) -> None:
    _assert_clean(_race("mlflow", tmp_path, mlflow_uri=mlflow_server, **LEAN))


class _Stored:
    """What the checker reads, made up: a run's records and objects (the checker's own test, no processes)."""

    project, run, output_uri = "soak", "r", "/nowhere"

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def read(self, key: str) -> bytes | None:
        return self.objects.get(key)


def _row(rid: str, state: str, key: str, data: bytes) -> Row:
    import hashlib

    sha = hashlib.sha256(data).hexdigest()
    return Row(
        rid, "best_checkpoint", "best_checkpoint_3_acc=0.5.pt", state, None, key, sha, len(data), float(rid), 0.5
    )


def test_the_race_checker_reports_two_pins_sharing_one_object_and_a_pin_without_bytes() -> None:
    """The harness can fail: two pinned records on one object (issue 51, case 1) and a pinned
    record whose object is gone are violations, as an object no record holds is."""
    stored = _Stored({"soak/r/pinned/a.pt": b"x" * 10, "soak/r/stray.pt": b"y"})
    rows = [
        _row("1", "pinned", "soak/r/pinned/a.pt", b"x" * 10),
        _row("2", "pinned", "soak/r/pinned/a.pt", b"x" * 10),
        _row("3", "pinned", "soak/r/pinned/gone.pt", b"z"),
    ]
    found = truth(stored, rows)  # type: ignore[arg-type]
    assert "truth: records ['1', '2'] share the object 'soak/r/pinned/a.pt'" in found
    assert any(p.startswith("truth: pinned record 3") and p.endswith("has no object") for p in found), found
    objects = [Obj(k, len(v)) for k, v in stored.objects.items()]
    left = footprint(stored, Snapshot(rows, objects, []))  # type: ignore[arg-type]
    assert "footprint: 'soak/r/stray.pt' is no slot object and no record's: left behind" in left
    assert "footprint: best_checkpoint has 0 slot objects, n_saved=2" in left
