#!/usr/bin/env bash
# Throwaway single-node Ceph RADOS Gateway (S3) on 127.0.0.1 for the test suite.
#
#   scripts/ceph-s3.sh install    install the Ceph packages (Debian/Ubuntu, needs root)
#   scripts/ceph-s3.sh start      start mon + osd + radosgw, create the S3 user, print env
#   scripts/ceph-s3.sh stop       stop all daemons, remove the state dir and the tests' lock files
#   scripts/ceph-s3.sh env        print the `export` lines the tests need
#   scripts/ceph-s3.sh running    exit 0 if this state dir's gateway is up and answering
#   scripts/ceph-s3.sh stop-rgw   stop only radosgw (tests kill the gateway mid-upload)
#   scripts/ceph-s3.sh start-rgw  start only radosgw again (mon and osd must be running)
#
# Typical use:  eval "$(scripts/ceph-s3.sh start)"; pytest; scripts/ceph-s3.sh stop
#
# Environment:
#   CEPH_S3_DIR         state dir (default /tmp/tracker-saver-ceph); wiped by start and stop
#   CEPH_S3_PORT        S3 port on 127.0.0.1 (default 7480)
#   CEPH_S3_ACCESS_KEY  S3 access key (default tracker-saver-test)
#   CEPH_S3_SECRET_KEY  S3 secret key (default tracker-saver-test-secret)
#   CEPH_S3_KEEP=1      make stop leave the state dir (logs) in place
#   CEPH_S3_OBJECTSTORE the OSD's object store: memstore (default: objects in RAM, the cheapest for
#                       the tests) or bluestore (on a sparse file on disk, as docs/performance.md measured)
#
# Only stdout carries the `export` lines; progress and errors go to stderr, so
# `eval "$(... start)"` is safe. The configuration and the start/stop sequence
# follow measurements on Debian 12 / Ceph 16.2 (Pacific), see shared/notes/ceph-rgw.md.
set -Eeuo pipefail
# set -e exits without a word; say where, so a CI log shows what went wrong.
trap 'log "unexpected failure (status $?) at line $LINENO: $BASH_COMMAND"' ERR

DIR=${CEPH_S3_DIR:-/tmp/tracker-saver-ceph}
PORT=${CEPH_S3_PORT:-7480}
OBJECTSTORE=${CEPH_S3_OBJECTSTORE:-memstore}
ACCESS_KEY=${CEPH_S3_ACCESS_KEY:-tracker-saver-test}
SECRET_KEY=${CEPH_S3_SECRET_KEY:-tracker-saver-test-secret}

# The mon address is fixed: only one cluster from this script can run at a time.
MON_HOST='[v2:127.0.0.1:3300,v1:127.0.0.1:6789]'
# A file in the state dir that marks it as ours, so that a mistyped CEPH_S3_DIR
# (say, $HOME) is never wiped.
MARKER=.tracker-saver-ceph
# Whole-start budget. Measured 5-8 s from nothing to answering HTTP.
START_TIMEOUT=50
# Every `ceph` CLI call gets both: without them a missing mon means a hang.
CEPH_TIMEOUT=(timeout 20)
CEPH_CONNECT=(--connect-timeout 10)

# Ceph names each daemon "<type>.<id>"; pid files and logs use these names.
MON_NAME=mon.a
OSD_NAME=osd.0
RGW_NAME=client.rgw.a

log() { printf '%s\n' "ceph-s3: $*" >&2; }

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# Seconds since the epoch with a fraction, for timing and deadlines.
now() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
past_deadline() { awk -v d="$1" -v n="$(now)" 'BEGIN { exit !(n > d) }'; }

# The paths are computed after DIR is made absolute (see resolve_dir).
set_paths() {
    CONF=$DIR/ceph.conf
    RUN=$DIR/run
    LOGDIR=$DIR/log
    DATA=$DIR/data
}

resolve_dir() {
    [[ -n $DIR ]] || { log "CEPH_S3_DIR is empty"; exit 2; }
    # Daemons are matched by the conf path on their command line, and they
    # chdir to /, so the path must be absolute.
    [[ $DIR == /* ]] || DIR=$PWD/$DIR
    DIR=${DIR%/}
    [[ -n $DIR ]] || { log "refusing to use / as CEPH_S3_DIR"; exit 2; }
    set_paths
}

ceph_cli() { "${CEPH_TIMEOUT[@]}" ceph -c "$CONF" "${CEPH_CONNECT[@]}" "$@"; }

print_env() {
    printf 'export %s=%q\n' \
        AWS_ENDPOINT_URL "http://127.0.0.1:$PORT" \
        AWS_ACCESS_KEY_ID "$ACCESS_KEY" \
        AWS_SECRET_ACCESS_KEY "$SECRET_KEY" \
        AWS_DEFAULT_REGION us-east-1 \
        TRACKER_SAVER_CEPH 1
}

# ---------------------------------------------------------------- processes

# Succeeds if PID is a live (not zombie) process that is daemon BIN started
# with our ceph.conf. This guards against PID reuse and against signalling a
# daemon of another cluster. A zombie has an empty cmdline, so it fails too:
# exited daemons linger as zombies for ~2 s here and count as stopped.
is_our_daemon() {
    local pid=$1 bin=$2 state argv0
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    state=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
    [[ -n $state && $state != Z && $state != X ]] || return 1
    # argv[0] must be the daemon itself (not e.g. the `timeout` wrapping it),
    # and one argument must be exactly our conf path.
    argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || return 1
    [[ ${argv0##*/} == "$bin" ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -Fxq -- "$CONF"
}

# PIDs of daemon BIN (named NAME) of this cluster: the one in its pid file,
# plus any found by scanning /proc. The scan covers a pid file that is gone
# (state dir deleted under running daemons) or stale (left by a SIGKILL).
daemon_pids() {
    local bin=$1 name=$2 pid pidfile=$RUN/$2.pid
    # `if` rather than `&&`: a failed test as the last command would make the
    # whole pipeline fail, and set -e would end the script silently.
    {
        if [[ -f $pidfile ]]; then
            pid=$(tr -dc '0-9' <"$pidfile" || true)
            if is_our_daemon "$pid" "$bin"; then echo "$pid"; fi
        fi
        for pid in $(pgrep -x -- "$bin" || true); do
            if is_our_daemon "$pid" "$bin"; then echo "$pid"; fi
        done
    } | sort -un
}

# SIGTERM, wait up to 5 s, then SIGKILL; always remove the pid file.
stop_daemon() {
    local bin=$1 name=$2 pids pid i
    pids=$(daemon_pids "$bin" "$name")
    if [[ -n $pids ]]; then
        log "stopping $name (pid ${pids//$'\n'/ })"
        for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
        for ((i = 0; i < 50; i++)); do
            pids=$(for pid in $pids; do if is_our_daemon "$pid" "$bin"; then echo "$pid"; fi; done)
            [[ -z $pids ]] && break
            sleep 0.1
        done
        for pid in $pids; do
            log "$name (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    rm -f "$RUN/$name.pid"
}

# The order matters: rgw first (it talks to the osd), then osd, then mon.
stop_all_daemons() {
    stop_daemon radosgw "$RGW_NAME"
    stop_daemon ceph-osd "$OSD_NAME"
    stop_daemon ceph-mon "$MON_NAME"
}

# HTTP status code of GET / on our port, or 000 if nothing answers.
http_code() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$PORT/" || true
}

rgw_answers() {
    local code
    code=$(http_code)
    [[ $code != 000 ]]
}

# ---------------------------------------------------------------- failures

# Print the tail of a daemon's log, stop what was started and exit. The state
# dir is kept so that the full logs can be read; the next start wipes it.
fail() {
    local name=$1
    shift
    log "ERROR: $*"
    local f
    for f in "$LOGDIR/$name.log" "$LOGDIR/$name.stdout"; do
        if [[ -s $f ]]; then
            log "---- last 40 lines of $f ----"
            tail -n 40 "$f" >&2
            log "---- end of $f ----"
        fi
    done
    stop_all_daemons
    log "state dir kept for inspection: $DIR (removed by the next start or stop)"
    exit 1
}

# Poll every 0.1 s until the command succeeds. Fails fast if daemon BIN/NAME
# has died, and gives up at the start deadline.
wait_until() {
    local what=$1 bin=$2 name=$3
    shift 3
    until "$@" >/dev/null 2>&1; do
        [[ -n $(daemon_pids "$bin" "$name") ]] || fail "$name" "$name exited while waiting for $what"
        past_deadline "$DEADLINE" && fail "$name" "timed out waiting for $what"
        sleep 0.1
    done
}

# Start a Ceph daemon. It forks into the background itself (and writes its pid
# file); the parent returns once the daemon has initialised. Its stdio goes to
# a file so that it never holds the caller's stdout open: otherwise
# `eval "$(ceph-s3.sh start)"` would wait for the daemon to exit.
launch() {
    local name=$1
    shift
    "$@" </dev/null >>"$LOGDIR/$name.stdout" 2>&1 || fail "$name" "'$*' exited with status $?"
}

# ---------------------------------------------------------------- state dir

# Remove the state dir, but only if it is ours (has the marker) or is empty.
wipe_dir() {
    [[ -e $DIR || -L $DIR ]] || return 0
    if [[ -L $DIR ]]; then
        log "refusing to use $DIR: it is a symlink"
        exit 1
    fi
    if [[ ! -e $DIR/$MARKER && -n $(ls -A "$DIR" 2>/dev/null) ]]; then
        log "refusing to wipe $DIR: it is not empty and was not made by this script"
        exit 1
    fi
    rm -rf -- "$DIR"
}

make_dir() {
    # Private: it holds the S3 secret in the logs and a 20 GiB (sparse) block file.
    # Only the state dir itself needs mode 700 (wipe_dir removed any old one).
    # shellcheck disable=SC2174
    mkdir -p -m 700 "$DIR"
    touch "$DIR/$MARKER"
    mkdir -p "$RUN" "$LOGDIR" "$DATA/$MON_NAME" "$DATA/$OSD_NAME" "$DATA/$RGW_NAME"
}

# Each setting below was needed in measurements; see the comments.
write_conf() {
    local fsid=$1
    cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon initial members = a
mon host = $MON_HOST
public network = 127.0.0.1/32
# A throwaway local cluster: no cephx, no keyrings.
auth cluster required = none
auth service required = none
auth client required = none
keyring = /dev/null
# Everything lives in the state dir; \$name is expanded by Ceph (mon.a, osd.0, ...).
run dir = $RUN
pid file = $RUN/\$name.pid
admin socket = $RUN/\$name.asok
log file = $LOGDIR/\$name.log
mon data = $DATA/\$name
osd data = $DATA/\$name
rgw data = $DATA/\$name
# memstore keeps objects in RAM: for the test suite's workload (tests/test_storage_s3.py and
# test_invariants_s3.py) the daemons spent 8.9 s of CPU against 11.5 s with bluestore, and the gateway
# answers after ~4 s instead of ~8 s; the OSD held 133 MB after it. Its size is a ceiling, not an
# allocation. Bluestore (a sparse file on disk, as a real cluster) is what docs/performance.md measured.
osd objectstore = $OBJECTSTORE
memstore device bytes = 4294967296
bluestore block create = true
bluestore block size = 21474836480
# One OSD: single-replica pools, placement across OSDs rather than hosts.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
# Default 1 s: the gateway then takes ~9 s to come up instead of ~1 s.
paxos propose interval = 0.1
# Defaults reclaim overwritten/deleted data only after 2 h; this makes it ~6 s.
rgw gc obj min wait = 0
rgw gc processor period = 10

[$RGW_NAME]
# Without tcp_nodelay every GET/LIST takes ~45 ms instead of ~4 ms.
rgw frontends = beast endpoint=127.0.0.1:$PORT tcp_nodelay=1
# Without it radosgw loops on "get_initial_auth_request returned -13" for 300 s.
ms mon client mode = crc
EOF
}

# ---------------------------------------------------------------- steps

start_mon() {
    local fsid=$1
    log "starting $MON_NAME"
    timeout 20 monmaptool --create --fsid "$fsid" --addv a "$MON_HOST" "$DIR/monmap" \
        >>"$LOGDIR/$MON_NAME.stdout" 2>&1 || fail "$MON_NAME" "monmaptool failed"
    launch "$MON_NAME" timeout 20 ceph-mon -c "$CONF" -i a --mkfs --monmap "$DIR/monmap"
    launch "$MON_NAME" timeout 20 ceph-mon -c "$CONF" -i a
    wait_until "the monitor" ceph-mon "$MON_NAME" ceph_cli mon stat
}

osd_is_up() { ceph_cli osd dump -f json | grep -Eq '"up": ?1[,}]'; }

start_osd() {
    local uuid id
    uuid=$(uuidgen)
    log "starting $OSD_NAME"
    id=$(ceph_cli osd new "$uuid" 2>>"$LOGDIR/$OSD_NAME.stdout") || fail "$MON_NAME" "'ceph osd new' failed"
    [[ $id == 0 ]] || fail "$MON_NAME" "'ceph osd new' returned id '$id', expected 0"
    # --mkfs creates the 20 GiB sparse block file; the data dir must exist (ENOENT otherwise).
    launch "$OSD_NAME" timeout 30 ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$uuid"
    launch "$OSD_NAME" timeout 30 ceph-osd -c "$CONF" -i 0
    wait_until "the OSD to be up" ceph-osd "$OSD_NAME" osd_is_up
}

start_rgw() {
    if rgw_answers; then
        fail "$RGW_NAME" "something else already answers on 127.0.0.1:$PORT (set CEPH_S3_PORT)"
    fi
    log "starting $RGW_NAME on 127.0.0.1:$PORT"
    # The parent blocks until the gateway has reached the cluster; bound it.
    launch "$RGW_NAME" timeout 60 radosgw -c "$CONF" -n "$RGW_NAME"
    wait_until "the gateway to answer HTTP" radosgw "$RGW_NAME" rgw_answers
}

create_user() {
    log "creating S3 user with access key $ACCESS_KEY"
    # radosgw-admin is not the python `ceph` CLI: it has no --connect-timeout.
    timeout 20 radosgw-admin -c "$CONF" user create --uid=tracker-saver \
        --display-name=tracker-saver --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" \
        </dev/null >/dev/null 2>>"$LOGDIR/radosgw-admin.log" ||
        fail radosgw-admin "radosgw-admin user create failed"
}

# Succeeds if this dir's gateway is running and answering on the port.
our_rgw_is_up() {
    [[ -f $CONF && -n $(daemon_pids radosgw "$RGW_NAME") ]] && rgw_answers
}

# `running`: exit 0 if it is up; else say so in one line and exit 1 (an answer, not a failure).
cmd_running() {
    our_rgw_is_up && exit 0
    log "no gateway of $DIR answers on 127.0.0.1:$PORT: start one with scripts/ceph-s3.sh start"
    exit 1
}

# Fails unless the named daemon of this cluster is running.
require_running() {
    local bin=$1 name=$2
    [[ -f $CONF && -n $(daemon_pids "$bin" "$name") ]] || {
        log "$name of $DIR is not running; use '$0 start'"
        exit 1
    }
}

# ---------------------------------------------------------------- commands

cmd_install() {
    if command -v radosgw && command -v ceph-mon && command -v ceph-osd &&
        command -v curl && command -v uuidgen; then
        log "ceph packages already installed"
        return 0
    fi >/dev/null
    log "installing ceph packages"
    bash "$(dirname "${BASH_SOURCE[0]}")/apt.sh" install --no-install-recommends \
        ceph-mon ceph-osd radosgw curl uuid-runtime >&2
}

check_tools() {
    local tool
    for tool in ceph ceph-mon ceph-osd radosgw radosgw-admin monmaptool curl uuidgen; do
        command -v "$tool" >/dev/null || {
            log "$tool not found; run '$0 install' first"
            exit 1
        }
    done
}

cmd_start() {
    check_tools
    if our_rgw_is_up; then
        log "already running from $DIR"
        print_env
        return 0
    fi
    local t0 fsid
    t0=$(now)
    DEADLINE=$(awk -v t="$t0" -v s="$START_TIMEOUT" 'BEGIN { printf "%.3f", t + s }')
    # Unix socket paths are limited to 107 bytes; the admin sockets live in run/.
    if ((${#RUN} + ${#RGW_NAME} + 6 > 107)); then
        log "CEPH_S3_DIR is too long for the admin socket paths; use a shorter one"
        exit 1
    fi
    # A previous run may have been killed: stop its daemons, then start afresh.
    stop_all_daemons
    # Our own gateway is stopped now: anything still answering is someone
    # else's, and radosgw could not bind. Say so before spending 5 s on mon/osd.
    if rgw_answers; then
        log "something else already answers HTTP on 127.0.0.1:$PORT (set CEPH_S3_PORT)"
        exit 1
    fi
    wipe_dir
    make_dir
    fsid=$(uuidgen)
    write_conf "$fsid"
    start_mon "$fsid"
    start_osd
    start_rgw
    create_user
    log "ready on http://127.0.0.1:$PORT after $(elapsed_since "$t0") s (state in $DIR)"
    print_env
}

cmd_stop() {
    stop_all_daemons
    if [[ ${CEPH_S3_KEEP:-} == 1 ]]; then
        log "keeping $DIR (CEPH_S3_KEEP=1)"
    else
        wipe_dir
        # the test sessions' lock files beside it (tests/conftest_ceph.py): nothing is left in /tmp
        rm -f "$DIR.lock" "$DIR.use.lock" "$DIR.gate.lock" "$DIR.started-by-pytest"
    fi
}

cmd_stop_rgw() {
    stop_daemon radosgw "$RGW_NAME"
}

cmd_start_rgw() {
    check_tools
    if our_rgw_is_up; then
        log "gateway already running"
        print_env
        return 0
    fi
    require_running ceph-mon "$MON_NAME"
    require_running ceph-osd "$OSD_NAME"
    local t0
    t0=$(now)
    DEADLINE=$(awk -v t="$t0" -v s="$START_TIMEOUT" 'BEGIN { printf "%.3f", t + s }')
    # A SIGKILLed gateway leaves its pid file behind; stop_daemon clears it.
    stop_daemon radosgw "$RGW_NAME"
    start_rgw
    log "gateway ready after $(elapsed_since "$t0") s"
    print_env
}

main() {
    [[ $# == 1 ]] || usage
    resolve_dir
    case $1 in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    env) print_env ;;
    running) cmd_running ;;
    stop-rgw) cmd_stop_rgw ;;
    start-rgw) cmd_start_rgw ;;
    -h | --help | help) usage ;;
    *) usage ;;
    esac
}

main "$@"
