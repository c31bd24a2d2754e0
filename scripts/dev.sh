#!/usr/bin/env bash
# Set up and run tracker_saver on a fresh Debian 12 machine (as root for the Ceph tests).
#
#   scripts/dev.sh setup          create .venv and install the package with every extra
#   scripts/dev.sh demo           setup, then train the demo CNN and show what was saved
#   scripts/dev.sh test [ARGS]    setup, install and start Ceph RGW, run pytest ARGS, stop Ceph;
#                                 then print what it cost (wall, CPU, the costliest tests)
#   scripts/dev.sh soak [BACKEND…] the race soak's long run (python -m tests.soak --race --long) on
#                                 each back end (default: local mlflow clearml, and s3 as root);
#                                 SEED and OPS change its seed and operations per racer
#
# Without root (no Ceph), run the rest with:  scripts/dev.sh test -m "not ceph"
# (in CI, with CI=true, any test that skips fails instead, a Ceph test that cannot run included).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

log() { printf '%s\n' "dev.sh: $*" >&2; }

setup() {
    if ! "$PYTHON" -m venv --help >/dev/null 2>&1 || ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
        bash scripts/apt.sh install python3-venv python3-pip
    fi
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    # uv installs what pip would (the same 160 pins here) for a fraction of its CPU (pip: about 95 s
    # for a new .venv, byte-compiling included); CI's budget is CPU. uv reads no pip.conf, so it gets
    # pip's find-links (where a machine keeps local wheels, torch's CPU build among them).
    # constraints.txt pins torch to the local CPU wheel (nothing may pull a CUDA build) and uv.
    [ -x "$VENV/bin/uv" ] || "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt uv
    local links=() link
    while read -r link; do links+=(--find-links "$link"); done < <(
        "$VENV/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p" | tr ' ' '\n' | sort -u)
    # No --compile-bytecode: it byte-compiles all 16,700 files of the 160 wheels (61 s of CPU for a new
    # .venv with uv's cache empty, against 13 s without), while a training and the tests import about
    # 4,800 of them. Those are compiled once, on first import (15 s of CPU), below and in the tests,
    # with PYTHONDONTWRITEBYTECODE unset so that the .pyc files are written.
    "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -c constraints.txt "${links[@]}" -e '.[all,test,docs]'
    if [ ! -e "$VENV/.imports-compiled" ]; then
        env -u PYTHONDONTWRITEBYTECODE "$VENV/bin/python" -c '
import importlib, pkgutil, tracker_saver
for module in pkgutil.walk_packages(tracker_saver.__path__, "tracker_saver."):
    importlib.import_module(module.name)
for name in ("torch._dynamo", "ignite.distributed", "ignite.contrib.handlers", "mlflow.server", "xdist", "hypothesis"):
    importlib.import_module(name)
' && touch "$VENV/.imports-compiled"
    fi
}

test_() {
    setup
    local ceph=0
    if [ "$(id -u)" = 0 ]; then
        # One apt.sh run (one package-list update) for what the servers need: Debian's Chromium for the
        # UI's browser tests (never a browser Playwright downloads), PostgreSQL 15 for the MLflow team
        # set-up test, Ceph for the S3 tests. No recommends: headless Chromium needs only a font, and
        # its recommends (Mesa, udev, CUPS tools, a notification daemon) cost 11 s of CPU to install
        # on a new machine (41 s with them, 30 s without, Chromium and Ceph).
        bash scripts/apt.sh install --no-install-recommends chromium fonts-liberation postgresql \
            ceph-mon ceph-osd radosgw curl uuid-runtime
        bash scripts/ceph-s3.sh install
        if bash scripts/ceph-s3.sh running >/dev/null 2>&1; then
            # Someone started it (a developer's shell): use it, and leave it running.
            log "using the Ceph RGW that is already running; it is left running"
            eval "$(bash scripts/ceph-s3.sh env)"
        else
            eval "$(bash scripts/ceph-s3.sh start)"
            ceph=1
            trap 'bash scripts/ceph-s3.sh stop' EXIT
        fi
    else
        log "not root: Ceph RGW cannot be started; run with -m 'not ceph' (CI runs as root)"
    fi
    local status=0
    # The tests' processes write the .pyc files of what they import first (see setup).
    unset PYTHONDONTWRITEBYTECODE
    # 2 pytest-xdist processes, one per core of CI's machine: each pays its own start-up, collection
    # (about 11 s of CPU) and servers, and a third process on 2 cores cost CPU without saving wall
    # time (fresh-clone runs of the same package code: 832 s of CPU and 8 min 21 s with 3 workers,
    # 751 s and 8 min 47 s with 2); -n 0 runs the tests in this process. worksteal: a worker that
    # runs out takes tests queued behind a long one (the default hands each worker a share of the
    # suite up front, and the tests queued behind a 100 s soak waited for it).
    # pytest ends with its CPU section (tests/conftest_cpu.py): the count of tests per marker and
    # the 25 costliest tests by CPU.
    "$VENV/bin/python" -m pytest -n "${WORKERS:-2}" --dist worksteal "$@" || status=$?
    [ "$ceph" = 1 ] && { bash scripts/ceph-s3.sh stop; trap - EXIT; }
    return "$status"
}

soak() {
    setup
    local backends=("$@") status=0 backend
    if [ "${#backends[@]}" = 0 ]; then
        backends=(local mlflow clearml)
        [ "$(id -u)" = 0 ] && backends+=(s3)
    fi
    for backend in "${backends[@]}"; do
        if [ "$backend" = s3 ] && [ -z "${TRACKER_SAVER_CEPH:-}" ]; then
            bash scripts/ceph-s3.sh install
            bash scripts/ceph-s3.sh running >/dev/null 2>&1 || { log "start Ceph RGW first: eval \"\$(bash scripts/ceph-s3.sh start)\""; return 2; }
            eval "$(bash scripts/ceph-s3.sh env)"
        fi
        "$VENV/bin/python" -m tests.soak --race --long --backend "$backend" --seed "${SEED:-1}" \
            ${OPS:+--ops "$OPS"} || status=$?
    done
    return "$status"
}

case "${1:-}" in
    setup) setup ;;
    # torch writes its compile cache (/tmp/torchinductor_<user>) when it imports torch._dynamo: keep it in the venv.
    demo) setup; shift; TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/$VENV/torchinductor} "$VENV/bin/tracker-saver" demo "$@" ;;
    soak) shift; soak "$@" ;;
    matrix) shift; setup; exec "$VENV/bin/python" scripts/matrix.py "$@" ;;  # docs/compatibility.md's matrix
    test)
        shift
        # The whole command, set-up included, under scripts/cpu_time.py: at the end it prints the wall
        # time, the CPU time of this command and every process it started (user + sys), the Ceph
        # daemons included, and whether that kept within 15 minutes wall and 15 CPU-minutes.
        if [ -z "${DEV_SH_MEASURED:-}" ]; then
            DEV_SH_MEASURED=1 exec "$PYTHON" scripts/cpu_time.py --label "scripts/dev.sh test" -- bash scripts/dev.sh test "$@"
        fi
        test_ "$@" ;;
    *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
