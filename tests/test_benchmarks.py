"""The benchmarks still run: a tiny smoke run of each, no timing asserted.

bench_outages counts a save that blocked past ``timeout`` + a margin as a "hang" and exits 1 for
it: a measurement of a loaded machine, which these tests leave to the benchmark. They assert what
does not depend on the clock: no lie, no extra object, no silent outage, a later save succeeded
after each; exit status 2 (a save that never returned at all) still fails.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import forkserver

ROOT = Path(__file__).resolve().parent.parent
#: The variants the goals compare (torch.save and DiskSaver, plain calls, are left to the benchmark's own
#: runs). Measured in the benchmark's own process (``--in-process``): a fresh interpreter each, as the
#: benchmark's real runs take, cost 2.5 s of CPU a variant here, for a peak RSS the test does not check.
LOCAL_VARIANTS = [
    "torch.save+fsync",
    "torch.save+fsync overwrite",
    "torch.save+fsync replace",
    "sync-local",
    "async-local",
]


def _bench(
    script: str, args: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/SCRIPT ARGS``, forked from the tests' fork server (torch imported once, not
    once per benchmark: 2 s of CPU each); its own process, environment, folder, argv and exit status."""
    env = dict(os.environ) if env is None else env
    return forkserver.run(str(ROOT / "benchmarks" / script), args, env=env, cwd=cwd, timeout=timeout)


def test_bench_save_runs_every_requested_local_variant(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    args = ["--sizes", "4", "--rounds", "1", "--measure", "1", "--pause", "0.1", "--in-process"]
    args += ["--variants", *LOCAL_VARIANTS, "--tmpdir", str(tmp_path)]
    proc = _bench("bench_save.py", args, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = report["results"]["4"]
    assert sorted(rows) == sorted(LOCAL_VARIANTS)
    for variant, row in rows.items():
        # async variants are "n/a (not built)" until TrackerSaver takes async_upload
        assert "blocked_s" in row or row.get("status") == "n/a (not built)", (variant, row)
        assert "error" not in row, (variant, row["error"])
        assert row.get("sys_s", 0) >= 0 and ("sys_s" in row) == ("blocked_s" in row), (variant, row)
    steps = rows["sync-local"]["steps_s"]  # where a save's time went, step by step
    assert list(steps) == ["open", "pending", "serialize", "finish", "hash", "supersede", "commit", "live", "view"]
    goals = rows["sync-local"]["goals"]
    assert rows["sync-local"]["first_s"] > 0
    assert {"reused<=1.1x torch.save+fsync overwrite", "reused<=1.1x torch.save+fsync replace"} <= set(goals)


CLEARML_OUTAGES = "clearml-stopped,clearml-hanging,clearml-500,clearml-503"
OUTAGE_SUMMARY = r"outages=(\d+) hangs=\d+ lies=0 extra_objects=0 max_block_s=\d+\.\d"
#: bench_outages's status when a save never returned, even after the service came back.
NEVER_RETURNED = 2


def _found(summary: str, stderr: str) -> str:
    """The summary, and what bench_outages found, with the records and objects of that moment."""
    found = [line for line in stderr.splitlines() if re.search(r"LIE|EXTRA OBJECT|HANG|  record |  objects", line)]
    return "\n".join([summary, *found])


@pytest.mark.clearml
def test_bench_outages_clearml_kinds_neither_hang_nor_lie_nor_leave_objects(tmp_path: Path) -> None:
    pytest.importorskip(
        "clearml", reason="ClearML tests need clearml: pip install 'clearml>=1.16,<3' (the clearml extra)"
    )
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    args = ["--outages", "4", "--kinds", CLEARML_OUTAGES, "--workdir", str(tmp_path)]
    proc = _bench("bench_outages.py", args, env=env, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    summary = lines[-1]
    assert re.fullmatch(OUTAGE_SUMMARY, summary) and summary.startswith("outages=4 "), _found(summary, proc.stderr)
    assert proc.returncode != NEVER_RETURNED, proc.stderr[-3000:]
    report = json.loads(lines[-2])
    assert report["totals"]["count"] == 4 and report["totals"]["silent"] == 0, report["totals"]
    assert all(o["recovered"] for o in report["outages_detail"]), report["outages_detail"]  # a later save succeeded
    assert {(r["kind"], r["mode"]) for r in report["rows"]} == {
        ("clearml-stopped", "sync"),
        ("clearml-hanging", "async"),
        ("clearml-500", "sync"),
        ("clearml-503", "async"),
    }


@pytest.mark.clearml
def test_bench_clearml_requests_validates_each_kind_both_ways_and_times_saves_both_ways(tmp_path: Path) -> None:
    done = forkserver.run(
        str(ROOT / "benchmarks" / "bench_clearml_requests.py"), ["--repeats", "3", "--saves", "3"],
        env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    kinds = ["models.get_all", "models.create", "models.edit", "models.add_or_update_metadata"]
    assert list(result["validate_us"]) == kinds
    assert all(sorted(row) == ["ours", "sdk"] for row in result["validate_us"].values())
    assert sorted(result["save_cpu_ms"]) == ["ours", "sdk"]
    assert [line.split()[0] for line in lines[1:5]] == kinds and lines[5].startswith("CPU per save (ms)")


@pytest.mark.ceph
def test_bench_outages_rgw_kinds_neither_hang_nor_lie_nor_leave_objects(ceph_s3, tmp_path: Path, capsys) -> None:
    """In this process: stopping the gateway needs this session's own lock, held alone (conftest_ceph)."""
    pytest.importorskip("boto3")
    spec = importlib.util.spec_from_file_location("bench_outages", ROOT / "benchmarks" / "bench_outages.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    spec.loader.exec_module(bench)
    # The lock waits for the Ceph tests running in other workers (the Ceph soak takes 100 s); new ones
    # queue behind it. 10 s skipped the outages in ci31, once the order of the tests changed.
    argv = ["--outages", "2", "--kinds", "rgw-stopped,rgw-frozen", "--lock-wait", "300", "--workdir", str(tmp_path)]
    status = bench.main(argv, ceph=ceph_s3)
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    report = json.loads(lines[-2])
    if report["totals"]["skipped"]:  # a failure in CI (tests/conftest_ci.py)
        pytest.skip("another pytest session uses the Ceph gateway: it was not stopped")
    summary = lines[-1]
    assert re.fullmatch(OUTAGE_SUMMARY, summary) and summary.startswith("outages=2 "), _found(summary, captured.err)
    assert status != NEVER_RETURNED and report["totals"]["silent"] == 0, lines[-2]
    assert all(o["recovered"] for o in report["outages_detail"]), report["outages_detail"]
    assert {(r["kind"], r["mode"]) for r in report["rows"]} == {("rgw-stopped", "sync"), ("rgw-frozen", "async")}


@pytest.mark.ceph
def test_bench_drag_measures_every_saver_side_by_side_and_the_s3_ones_with_the_gateways_cpu(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    """One run for the local savers and the S3 ones (their own run cost 8.5 s of CPU, the same local rows)."""
    # nice 0: as the gateway runs already; CPU 0 for the run only (put back afterwards, checked below)
    before = _gateway_affinities()
    report = _drag(tmp_path, {**os.environ, **s3_env}, "--server-nice", "0", "--server-cpu", "0")
    after = _gateway_affinities()
    assert before and {t: after[t] for t in after.keys() & before} == {t: before[t] for t in after.keys() & before}
    rows = report["results"]["4"]
    assert list(rows) == ["torch.save+fsync", "thread", "fork", "ours", "thread-s3", "ours-s3"]
    assert rows["torch.save+fsync"]["lost_x"] == pytest.approx(1.0, abs=0.05)
    for variant, row in rows.items():
        assert row["blocked_s"] > 0 and row["lost_s"] >= row["blocked_s"], (variant, row)
    for variant in ("thread-s3", "ours-s3"):  # 4 MiB went through the gateway, which used CPU for it
        assert rows[variant]["server_cpu_s"] > 0, rows
    assert report["server_nice"] == 0 and report["server_cpu"] == 0


def _gateway_affinities() -> dict[int, set[int]]:
    """The CPUs each thread of the gateway's daemons may run on (a thread that ended meanwhile is left out)."""
    found = {}
    for tid in _bench_drag().server_threads():
        with contextlib.suppress(OSError):
            found[tid] = os.sched_getaffinity(tid)
    return found


def _drag(tmp_path: Path, env: dict[str, str], *extra: str) -> dict:
    """bench_drag at 4 MiB, one round, 0.05 s of steps before each save (0.2 cost 0.5 s more of CPU); its JSON line."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_drag.py"), "--sizes", "4", "--rounds", "1"]
    cmd += ["--before", "0.05", "--tmpdir", str(tmp_path), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert "loadavg" in lines[0], lines[0]
    return json.loads(lines[-1])


def _bench_drag():
    spec = importlib.util.spec_from_file_location("bench_drag", ROOT / "benchmarks" / "bench_drag.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up there
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports bench_save, as when run as a script
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench


def test_bench_drag_goals_compare_ours_with_its_own_plain_thread_and_the_load() -> None:
    """Quiet: lost <= 0.25x; busy: lost <= the plain thread's; always blocked <= 0.05x, drag <= the thread's."""
    misses = _bench_drag().misses

    def row(lost_s: float, lost_x: float, blocked_x: float, drag: float) -> dict[str, float]:
        return {"lost_s": lost_s, "lost_x": lost_x, "blocked_x": blocked_x, "drag_pct": drag}

    rows = {
        "thread": row(0.5, 0.6, 0.2, 30.0),
        "ours": row(0.4, 0.3, 0.04, 10.0),
        "thread-s3": row(0.5, 0.6, 0.2, 40.0),
        "ours-s3": row(0.6, 0.7, 0.06, 45.0),
    }
    assert misses("ours", rows, busy=False) == ["lost>0.25x"]
    assert misses("ours", rows, busy=True) == []
    assert misses("ours-s3", rows, busy=True) == ["lost>thread", "blocked>0.05x", "drag>thread"]


def test_bench_prune_deletes_what_the_rule_names_and_reports_the_file_sizes(tmp_path: Path) -> None:
    args = ["--records", "200", "--keep-last", "10", "--older-than-days", "0.01", "--tmpdir", str(tmp_path)]
    proc = _bench("bench_prune.py", args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # 4 streams of 50 saves: 2 live and 48 evicted each; the newest 10 evicted of each stay
    assert (report["deleted"], report["records_left"], report["events_left"]) == (152, 48, 48)
    assert report["bytes_after_vacuumed"] < report["bytes_before_vacuumed"]


def test_bench_archive_times_each_mode_with_and_without_the_archive(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}  # local only: no bucket made
    args = ["--size-mib", "1", "--saves", "2", "--repeats", "1", "--tmpdir", str(tmp_path)]
    proc = _bench("bench_archive.py", args, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # it exits 1 when an archive entry is missing
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(report["results"]) == ["local"] and sorted(report["results"]["local"]) == ["async", "sync"]
    for row in report["results"]["local"].values():
        assert row["done_archive_s"] > 0 and row["cost_per_keep_s"] == row["done_archive_s"] - row["done_s"]
    assert "cost/keep" in proc.stdout and list(tmp_path.iterdir()) == []


def test_bench_scale_prints_every_figure_with_its_goal_and_the_queries_match_what_the_fill_wrote(
    tmp_path: Path,
) -> None:
    proc = _bench("bench_scale.py", ["--records", "800", "--repeats", "1", "--keep", str(tmp_path)], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *table, last = proc.stdout.strip().splitlines()
    report = json.loads(last)
    assert report["benchmark"] == "scale" and [row["records"] for row in report["rows"]] == [800]
    row = report["rows"][0]
    assert row["matches"] == {  # the fill is deterministic: 4 runs of 2 streams, 100 saves each
        "val_acc>0.9 by -val_acc": 192,
        "global_step>=1000 by global_step": 777,
        "optimizer=sgd by -val_acc": 200,
        "optimizer=sgd (by created_at)": 200,
        "lr<0.001 by -created_at": 200,
        "git_commit=<one run> by -val_acc": 200,
    }
    goals = {line.split("  ")[0]: line.split()[-1] for line in table if line.startswith(("query", "fsck", "models"))}
    assert goals == {**{f"query {label} ms": "50" for label in row["matches"]}, "fsck s": "2",
                     "models list, first page s": "1"}  # fmt: skip
    assert row["fsck_s"] > 0 and row["models_list_first_page_s"] > 0 and set(row["save_call_ms"]) == {
        "pending", "supersede", "live"}  # fmt: skip


@pytest.mark.mlflow
def test_bench_mlflow_scale_counts_a_saves_calls_by_endpoint_and_finds_the_same_records_pushed_down(
    mlflow_server: str, tmp_path: Path
) -> None:
    # --in-process: the filter and the saves in the benchmark's process (a fresh interpreter each, as its
    # real runs take, cost 3 s of CPU each here); the first page stays a fresh CLI process, what it times.
    args = ["--scale", "--uri", mlflow_server, "--records", "8", "--repeats", "1", "--saves", "2", "--in-process"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = _bench("bench_mlflow.py", args, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])["results"]["this"]
    assert row["found"] == 4  # score 1.0: the second step of each of the 4 streams (2 runs, 2 streams)
    assert row["calls"] == sum(row["by_endpoint"].values()) > 0
    assert row["by_endpoint"]["POST /api/2.0/mlflow/logged-models"] == 1  # each save creates its model
    assert "PATCH /api/2.0/mlflow/logged-models/{id}/tags" in row["by_endpoint"]  # ids counted as one endpoint
    assert 0 < row["registry_s"] <= row["save_s"] and row["first_page_s"] <= row["list_s"]
    assert "calls a steady save, this: " in proc.stdout
