#!/usr/bin/env bash
# Debian packages for the set-up, waiting for another apt-get or dpkg to finish instead of failing.
#
#   scripts/apt.sh install [OPTION...] PKG...
#                                   install the packages that are missing (apt-get update first);
#                                   options such as --no-install-recommends go to apt-get install
#   scripts/apt.sh get ARGS...      apt-get ARGS, waiting while another process holds apt's locks
#
# apt-get fails at once (exit 100, "Could not get lock /var/lib/dpkg/lock-frontend") while an
# unattended upgrade or another shell holds the lock (`apt-get update` ignores DPkg::Lock::Timeout).
# So every call tries again every 2 s, up to APT_LOCK_WAIT seconds (default 900), and says so.
set -Eeuo pipefail

APT_LOCK_WAIT=${APT_LOCK_WAIT:-900}

log() { printf '%s\n' "apt.sh: $*" >&2; }

apt_get() {
    local sudo=() err deadline=$((SECONDS + APT_LOCK_WAIT)) said=0 status
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    err=$(mktemp)
    # No RETURN trap: it would stay set after this function and fire in its caller, where the
    # local $err is gone (set -u then fails the whole set-up on a fresh machine).
    while true; do
        status=0
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" \
            </dev/null 2>"$err" || status=$?
        if [[ $status == 0 ]] || ! grep -qE "Could not get lock|Unable to acquire the dpkg frontend lock|Unable to lock" "$err"; then
            cat "$err" >&2
            rm -f "$err"
            return "$status"
        fi
        if ((SECONDS >= deadline)); then
            cat "$err" >&2
            log "gave up after ${APT_LOCK_WAIT} s: another apt-get or dpkg still holds its lock (see above); wait for it to finish, or raise APT_LOCK_WAIT"
            rm -f "$err"
            return "$status"
        fi
        if [[ $said == 0 ]]; then
            log "waiting for another apt-get or dpkg to finish: $(grep -m1 -E "lock" "$err" | sed 's/^E: //') (up to ${APT_LOCK_WAIT} s)"
            said=1
        fi
        sleep 2
    done
}

install() {
    local options=() missing=() pkg
    for pkg in "$@"; do
        [[ $pkg == -* ]] && { options+=("$pkg"); continue; }
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    log "installing ${missing[*]}"
    apt_get update -qq
    apt_get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
}

case "${1:-}" in
    install) shift; install "$@" ;;
    get) shift; apt_get "$@" ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
