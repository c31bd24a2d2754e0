"""The fault-injection soak, short: every crash point of DESIGN's path once per back end, no violation.

Each test runs ``tests.soak`` (a real Ignite training in forked processes, killed at random
moments and at every step of DESIGN's path, restarted by the resume helper or a fresh
``Checkpoint``, checked on storage and registry directly). CI's plan is the shortest that proves
what the long one does: every targeted crash point is hit once (on S3 both gateway faults too),
one kill in three is random in time, and every restore mode follows kills of both kinds
(:func:`tests.soak.plan.short_kills`: 15 to 20 kills). The full run stays a command of its own,
``python -m tests.soak --backend B --kills 500`` (``docs/fault-injection.md``).
``TRACKER_SAVER_SOAK_KILLS`` and ``TRACKER_SAVER_SOAK_SEED`` change the size and the seed.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from tests.soak.driver import Stats, run_soak
from tests.soak.plan import GATEWAY, make_plan, short_kills, targeted_points
from tests.soak.trainer import MUTANTS

SEED = int(os.environ.get("TRACKER_SAVER_SOAK_SEED", "2024"))
#: One kill in three is random in time (the 500-kill soak: one in two).
RANDOM_EVERY = 3
#: The short run's longest random delay per back end, a third of the long soak's (``Backend.max_delay``):
#: a random kill still lands anywhere in the first saves, where a save is interrupted as well as
#: in the tenth, and the training a random kill waits for is most of a short run's CPU.
MAX_DELAY = {"local": 0.5, "s3": 1.3, "clearml": 1.0, "mlflow": 1.0}


def kills(backend: str) -> int:
    return int(os.environ.get("TRACKER_SAVER_SOAK_KILLS", "0")) or short_kills(backend, RANDOM_EVERY)


def _soak(backend: str, tmp_path: Path, **kwargs: object) -> tuple[Stats, list[str]]:
    lines: list[str] = []
    stats = run_soak(
        backend, kills(backend), SEED, workdir=str(tmp_path / "soak"), log=lines.append, random_every=RANDOM_EVERY,
        max_delay=MAX_DELAY[backend], **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    print(stats.summary())
    return stats, lines


def _assert_clean(stats: Stats, lines: list[str], backend: str) -> None:
    log = "\n".join(lines[-40:])
    plan = make_plan(backend, kills(backend), SEED, max_delay=1.0, random_every=RANDOM_EVERY)
    assert stats.kills == len(plan), log
    assert stats.violations == [], "\n".join(stats.violations)
    assert stats.missed == [], f"crash points never reached: {stats.missed}\n{log}"
    unreached = set(targeted_points(backend)) - set(stats.points)
    assert not unreached, f"targeted points never hit: {sorted(unreached)}\n{log}"
    assert stats.kinds == collections.Counter(k.kind for k in plan), stats.to_json()
    assert stats.saves > stats.kills, stats.to_json()


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
    if stops == 0:  # a failure in CI (tests/conftest_ci.py)
        pytest.skip(f"the gateway was never stopped mid-upload: {dict(stats.gateway)}")
    assert sum(stats.gateway[o] for o in ("completed", "failed loudly")) == stops, stats.gateway


@pytest.mark.clearml
def test_the_soak_on_the_clearml_standin_finds_no_violation(tmp_path: Path) -> None:
    pytest.importorskip(
        "clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
    )
    stats, lines = _soak("clearml", tmp_path)
    _assert_clean(stats, lines, "clearml")


@pytest.mark.mlflow
def test_the_soak_on_a_real_mlflow_server_finds_no_violation(mlflow_server: str, tmp_path: Path) -> None:
    stats, lines = _soak("mlflow", tmp_path, mlflow_uri=mlflow_server)
    _assert_clean(stats, lines, "mlflow")


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_soak_catches_a_saver_with_a_deliberate_bug(mutant: str, tmp_path: Path) -> None:
    """The harness can fail: each deliberate bug of ``MUTANTS`` shows up as violations.

    11 kills: one random, then every crash point of the local back end once (``random_every`` past
    the plan's length makes only the first kill random, so the bug's point comes early, not after
    8 more random kills); the run ends at the first kill that found a violation.
    """
    lines: list[str] = []
    stats = run_soak(
        "local", 11, SEED, workdir=str(tmp_path / "soak"), log=lines.append, mutant=mutant, point_timeout=5,
        until_violation=True, random_every=100, max_delay=MAX_DELAY["local"],
    )  # fmt: skip
    assert stats.violations, f"{mutant} ({MUTANTS[mutant]}) went unnoticed:\n" + "\n".join(lines)
