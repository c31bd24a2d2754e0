"""The fault-injection soak, short: 30 SIGKILLs per back end, no violation, every crash point reached.

Each test runs ``tests.soak`` (a real Ignite training in forked processes, killed at random
moments and at every step of DESIGN's path, restarted by the resume helper or a fresh
``Checkpoint``, checked on storage and registry directly). The full run is
``python -m tests.soak --backend B --kills 500`` (``docs/fault-injection.md``).
``TRACKER_SAVER_SOAK_KILLS`` and ``TRACKER_SAVER_SOAK_SEED`` change the size and the seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.soak.driver import Stats, run_soak
from tests.soak.plan import GATEWAY, targeted_points
from tests.soak.trainer import MUTANTS

KILLS = int(os.environ.get("TRACKER_SAVER_SOAK_KILLS", "30"))
SEED = int(os.environ.get("TRACKER_SAVER_SOAK_SEED", "2024"))


def _soak(backend: str, tmp_path: Path, **kwargs: object) -> tuple[Stats, list[str]]:
    lines: list[str] = []
    stats = run_soak(backend, KILLS, SEED, workdir=str(tmp_path / "soak"), log=lines.append, **kwargs)  # type: ignore[arg-type]
    print(stats.summary())
    return stats, lines


def _assert_clean(stats: Stats, lines: list[str], backend: str) -> None:
    log = "\n".join(lines[-40:])
    assert stats.kills == KILLS, log
    assert stats.violations == [], "\n".join(stats.violations)
    assert stats.missed == [], f"crash points never reached: {stats.missed}\n{log}"
    unreached = set(targeted_points(backend)) - set(stats.points)
    assert not unreached, f"targeted points never hit: {sorted(unreached)}\n{log}"
    assert stats.kinds["random"] >= KILLS // 3 and stats.saves > KILLS, stats.to_json()


def test_the_soak_on_a_local_folder_and_sqlite_finds_no_violation(tmp_path: Path) -> None:
    stats, lines = _soak("local", tmp_path)
    _assert_clean(stats, lines, "local")


@pytest.mark.ceph
def test_the_soak_on_ceph_rgw_and_sqlite_finds_no_violation(ceph_s3, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    stats, lines = _soak("s3", tmp_path, ceph=ceph_s3)
    _assert_clean(stats, lines, "s3")
    # The gateway is stopped mid-upload only when no other pytest session uses it.
    stops = sum(stats.points[p] for p in GATEWAY)
    if stops == 0:
        message = f"the gateway was never stopped mid-upload: {dict(stats.gateway)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    assert sum(stats.gateway[o] for o in ("completed", "failed loudly")) == stops, stats.gateway


@pytest.mark.clearml
def test_the_soak_on_the_clearml_standin_finds_no_violation(tmp_path: Path) -> None:
    pytest.importorskip(
        "clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
    )
    stats, lines = _soak("clearml", tmp_path)
    _assert_clean(stats, lines, "clearml")


@pytest.mark.mlflow
def test_the_soak_on_a_real_mlflow_server_finds_no_violation(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="MLflow tests need mlflow: pip install -e '.[mlflow]' -c constraints.txt")
    stats, lines = _soak("mlflow", tmp_path)
    _assert_clean(stats, lines, "mlflow")


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_soak_catches_a_saver_with_a_deliberate_bug(mutant: str, tmp_path: Path) -> None:
    """The harness can fail: each deliberate bug of ``MUTANTS`` shows up as violations.

    20 kills hold 10 targeted ones: every crash point of the local back end once.
    """
    lines: list[str] = []
    stats = run_soak(
        "local", 20, SEED, workdir=str(tmp_path / "soak"), log=lines.append, mutant=mutant, point_timeout=5
    )
    assert stats.violations, f"{mutant} ({MUTANTS[mutant]}) went unnoticed:\n" + "\n".join(lines)
