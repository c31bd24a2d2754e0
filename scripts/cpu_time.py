"""Run a command; print its wall time and the CPU of it and of every process it started, the Ceph daemons' included.

``scripts/dev.sh test`` runs itself under this (Python's standard library only: it runs before the venv exists)::

    python3 scripts/cpu_time.py --label "test command" -- bash scripts/dev.sh test ...

How it counts, so that nothing escapes and nothing counts twice:

* It is the command's *subreaper* (``PR_SET_CHILD_SUBREAPER``): a process whose parent exits
  (a daemon, a server a pytest-xdist worker started and another stopped) is re-parented to it
  instead of to init. It reaps every process that ends under it with ``wait4``, which gives that
  process's CPU with all its own reaped children: their sum is "CPU, user + sys".
* The Ceph daemons (``ceph-mon``, ``ceph-osd``, ``ceph-mgr``, ``radosgw``) are named on a line of
  their own and counted in the budget: the ones it reaps (the command started and stopped them) by
  ``wait4``, and the ones it does not (a gateway the developer started, a radosgw still running at
  the end) from ``/proc``, sampled every 2 s, what each spent while the command ran: the tests'
  requests are what they spend it on.
* A process still running when the command has exited is not waited for: it is named, and what it
  spent so far (from ``/proc``) is added to the figure it belongs to.

It exits with the command's status. The budget line says whether the run kept within
``--budget-wall`` and ``--budget-cpu`` (minutes); it never changes the status: a run is not red by
the clock (README, "Two commands").
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

CEPH = frozenset({"ceph-mon", "ceph-osd", "ceph-mgr", "radosgw"})
PR_SET_CHILD_SUBREAPER = 36
TICK = os.sysconf("SC_CLK_TCK")


def minutes(seconds: float) -> str:
    """``"725.4 s (12 min 05 s)"``.

    Examples:
        >>> minutes(725.4), minutes(59.6)
        ('725.4 s (12 min 05 s)', '59.6 s (1 min 00 s)')
    """
    whole = round(seconds)
    return f"{seconds:.1f} s ({whole // 60} min {whole % 60:02d} s)"


def _stat(pid: int) -> tuple[str, int, float] | None:
    """``(comm, start time in ticks, CPU seconds of it and its reaped children)`` from ``/proc``."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return comm, int(fields[19]), (utime + stime + cutime + cstime) / TICK


class CephWatch:
    """What the Ceph daemons that the command does not reap spend while it runs (a /proc sample every 2 s)."""

    def __init__(self) -> None:
        self.first: dict[tuple[int, int], float] = {}  # (pid, start) -> CPU when first seen
        self.last: dict[tuple[int, int], float] = {}
        self.reaped: set[tuple[int, int]] = set()  # counted exactly, by wait4
        self._stop = threading.Event()
        self.sample(at_start=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def sample(self, at_start: bool = False) -> None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (found := _stat(int(entry))) and found[0] in CEPH:
                key = (int(entry), found[1])
                self.first.setdefault(key, found[2] if at_start else 0.0)
                self.last[key] = found[2]

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            self.sample()

    def stop(self) -> float:
        """Stop sampling; CPU seconds spent by the daemons this process did not reap."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return sum(self.last[k] - self.first[k] for k in self.last if k not in self.reaped)


def run(argv: list[str]) -> tuple[int, float, list[float], float, list[str], dict[str, float]]:
    """Run ``argv``; ``(status, wall s, [user s, sys s], Ceph daemons' CPU s, processes left running,
    the CPU s of the orphans it adopted (a process whose parent exited first: a server a test
    started, a daemon) by name)``."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("cpu_time: not a subreaper: processes whose parent exits are not counted", file=sys.stderr)
    ceph = CephWatch()
    started = time.monotonic()
    child = subprocess.Popen(argv)  # reaped below with wait4, never by Popen
    # Ctrl-C reaches the whole foreground group, the command included: wait for it to finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    status, cpu, ceph_cpu = 1, [0.0, 0.0], 0.0
    orphans: dict[str, float] = {}
    main_done = False
    while True:
        options = os.WEXITED | os.WNOWAIT | (os.WNOHANG if main_done else 0)
        try:
            info = os.waitid(os.P_ALL, 0, options)
        except ChildProcessError:
            break
        if info is None:  # only running processes are left
            break
        found = _stat(info.si_pid)
        _, _, usage = os.wait4(info.si_pid, 0)
        if found and found[0] in CEPH:
            ceph.reaped.add((info.si_pid, found[1]))
            ceph_cpu += usage.ru_utime + usage.ru_stime
        else:
            cpu[0] += usage.ru_utime
            cpu[1] += usage.ru_stime
            if found and info.si_pid != child.pid:
                orphans[found[0]] = orphans.get(found[0], 0.0) + usage.ru_utime + usage.ru_stime
        if info.si_pid == child.pid:
            status = info.si_status if info.si_code == os.CLD_EXITED else 128 + info.si_status
            main_done = True
    wall = time.monotonic() - started
    left = []
    for entry in os.listdir("/proc"):
        found = _stat(int(entry)) if entry.isdigit() else None
        if found and _parent(int(entry)) == os.getpid():
            left.append(f"{entry} {found[0]}")
            if found[0] not in CEPH:
                cpu[0] += found[2]  # /proc does not split what a running process's reaped children spent
    return status, wall, cpu, ceph_cpu + ceph.stop(), left, orphans


def _parent(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(text[text.rindex(")") + 2 :].split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="command", help="what the report calls the command")
    parser.add_argument("--budget-wall", type=float, default=15.0, help="minutes of wall time (default 15)")
    parser.add_argument("--budget-cpu", type=float, default=15.0, help="CPU minutes, user + sys (default 15)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: cpu_time.py [options] -- COMMAND [ARGS]")
    status, wall, cpu, ceph, left, orphans = run(command)
    say = lambda line: print(f"cpu_time: {line}", file=sys.stderr, flush=True)  # noqa: E731
    say(
        f"{args.label}: wall {minutes(wall)}; CPU {minutes(sum(cpu) + ceph)}: user {cpu[0]:.1f} s + sys "
        f"{cpu[1]:.1f} s (it and every process it started) + {ceph:.1f} s (the Ceph daemons)"
    )
    if orphans:  # counted above, outside whatever pytest's own CPU section saw
        top = sorted(orphans.items(), key=lambda item: -item[1])[:6]
        say("of which processes whose parent exited first: " + ", ".join(f"{n} {c:.1f} s" for n, c in top))
    say(f"of which the Ceph daemons (ceph-mon, ceph-osd, radosgw): CPU {minutes(ceph)} while it ran")
    if left:
        say(f"still running after it, not waited for (their CPU so far is counted): {', '.join(left)}")
    total = sum(cpu) + ceph
    within = wall <= args.budget_wall * 60 and total <= args.budget_cpu * 60
    say(
        f"budget {args.budget_wall:g} min wall and {args.budget_cpu:g} CPU-min: wall {minutes(wall)}, CPU {minutes(total)}"
        + (" within it" if within else " OVER IT")
        + f" (on {os.cpu_count()} cores, load average now {os.getloadavg()[0]:.1f})"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
