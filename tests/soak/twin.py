"""What the registry must hold after each kill: Ignite's own ``Checkpoint`` and DESIGN's slot rules, replayed.

The twin follows the training process's events. At every ``EPOCH_COMPLETED`` it runs two real
Ignite ``Checkpoint`` handlers (same ``n_saved``, score function, prefix and step transform as
the process, a recording save handler): the ``remove``/``save`` calls they make are the calls the
process's handlers must make next. Which live record each save replaces follows DESIGN's slot
rules ("Slots across restarts"): the one Ignite removed; else an *inherited* record (live, not kept
by this process's Ignite: the same filename first, then the oldest); else a new slot.

A save is *completed* when its handler returned, or its commit point passed (post-upload callback
reached: start-up must promote it). A save the process died in before the registry's stage
returned is rolled back (its slot's previous record must be loadable again). In between the
commit point may or may not have passed: the registry's verdict after start-up recovery is taken,
and the truth check proves it against the bytes.

At a restart the process's ``Checkpoint`` starts as the restore mode says:

* ``resume``: the resume helper's ``_saved``: the live records sorted by priority (ties in
  creation order), the last ``n_saved``; every live record is adopted;
* ``fresh``/``scratch``: empty; the live records are inherited and replaced oldest first.

It starts from the newest live record of the ``checkpoint`` stream (``resume``, ``fresh``) or
from epoch 0 (``scratch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ignite.engine import Engine
from ignite.handlers import Checkpoint
from ignite.handlers.checkpoint import BaseSaveHandler

from tests.soak.plan import N_SAVED, STREAMS, score_of

__all__ = ["Entry", "InFlight", "StreamTwin", "Twin"]


@dataclass(frozen=True)
class Entry:
    """A checkpoint the twin expects to be loadable: filename, Ignite's priority, creation order."""

    filename: str
    priority: float
    order: int
    iteration: int


@dataclass
class InFlight:
    """The save the process was in when it died (the events it printed for it)."""

    stream: str
    entry: Entry
    replaces: Entry | None
    superseded: bool = False
    committed: bool = False
    error: str | None = None


class StreamTwin:
    """One stream: the checkpoints that must be loadable, and the slot allocator's view of Ignite."""

    def __init__(self, name: str, n_saved: int) -> None:
        self.name, self.n_saved = name, n_saved
        self.live: list[Entry] = []  # creation order
        self.kept: set[str] = set()  # filenames this process's Ignite keeps
        self.removed: list[str] = []  # removed by Ignite, still live, oldest first

    def restart(self, restore: str) -> list[tuple[float, str]]:
        """A new process: the ``_saved`` its ``Checkpoint`` starts with."""
        self.removed = []
        if restore != "resume":
            self.kept = set()
            return []
        items = sorted(self.live, key=lambda e: e.priority)[-self.n_saved :]  # stable: ties keep order
        self.kept = {e.filename for e in items}
        return [(e.priority, e.filename) for e in items]

    def remove(self, filename: str) -> None:
        """Ignite's ``remove``: the next save of this stream replaces that record's slot."""
        self.kept.discard(filename)
        if any(e.filename == filename for e in self.live) and filename not in self.removed:
            self.removed.append(filename)

    def choose(self, filename: str, ignite_saved: list[str]) -> Entry | None:
        """The live checkpoint the save of ``filename`` replaces (``None``: a new slot)."""
        self.kept.update(f for f in ignite_saved if f != filename)  # the checkpointer entry
        by_name = {e.filename: e for e in self.live}
        while self.removed:
            name = self.removed.pop(0)
            if name in by_name:
                return by_name[name]
        inherited = [e for e in self.live if e.filename not in self.kept]
        if inherited:
            return min(inherited, key=lambda e: (e.filename != filename, e.order))
        return None

    def commit(self, entry: Entry, replaces: Entry | None) -> None:
        """The save of ``entry`` completed: it replaced ``replaces`` and Ignite keeps it."""
        if replaces is not None and replaces in self.live:
            self.live.remove(replaces)
        self.live.append(entry)
        self.kept.add(entry.filename)


class _Recorder(BaseSaveHandler):  # type: ignore[misc]
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, checkpoint: Any, filename: str, metadata: Any = None) -> None:
        self.calls.append(("save", filename, (metadata or {}).get("priority")))

    def remove(self, filename: str) -> None:
        self.calls.append(("remove", filename, None))


class _Stub:
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Any) -> None:
        pass


@dataclass
class Twin:
    """The whole run: both streams, Ignite's twins for the running process, the save in flight."""

    seed: int
    streams: dict[str, StreamTwin] = field(default_factory=dict)
    order: int = 0
    inflight: InFlight | None = None
    completed: set[str] = field(default_factory=set)  # streams with a completed save
    _expected: list[tuple[str, str, str, Any, list[str]]] = field(default_factory=list)
    _handlers: dict[str, tuple[Checkpoint, _Recorder]] = field(default_factory=dict)
    _engine: Engine = field(default_factory=lambda: Engine(lambda engine, batch: None))
    _iteration: int = 0

    def __post_init__(self) -> None:
        self.streams = {name: StreamTwin(name, n) for name, n in N_SAVED.items()}

    def restart(self, restore: str) -> int:
        """A new process restores as ``restore`` says; returns the iteration it must start at."""
        self._expected.clear()
        self.inflight = None
        seed = self.seed
        self._handlers = {}
        for name, stream in self.streams.items():
            recorder = _Recorder()
            to_save = {"model": _Stub(), "trainer": _Stub()}
            if name == "best_checkpoint":
                handler = Checkpoint(
                    to_save, recorder, filename_prefix="best", n_saved=stream.n_saved, score_name="acc",
                    score_function=lambda e: score_of(seed, e.state.epoch),
                    global_step_transform=lambda e, _: e.state.epoch,
                )  # fmt: skip
            else:
                handler = Checkpoint(to_save, recorder, n_saved=stream.n_saved)
            handler.load_state_dict({"_saved": stream.restart(restore)})
            self._handlers[name] = (handler, recorder)
        last = self.streams["checkpoint"].live
        if restore == "scratch" or not last:
            return 0
        return max(last, key=lambda e: e.order).iteration

    def epoch(self, epoch: int, iteration: int) -> str | None:
        """``EPOCH_COMPLETED``: run Ignite's twins; their calls are what the process must do next."""
        problem = None
        if self._expected:
            problem = f"epoch {epoch} began while Ignite's twin still expected {self._describe(self._expected[0])}"
            self._expected.clear()
        self._engine.state.epoch, self._engine.state.iteration = epoch, iteration
        self._iteration = iteration
        for name in STREAMS:
            handler, recorder = self._handlers[name]
            recorder.calls.clear()
            handler(self._engine)
            saved = [f for _, f in handler._saved]
            self._expected += [(name, kind, f, priority, saved) for kind, f, priority in recorder.calls]
        return problem

    @staticmethod
    def _describe(call: tuple[str, str, str, Any, list[str]]) -> str:
        return f"{call[1]}({call[2]!r})"

    def event(self, event: dict[str, Any]) -> str | None:
        """Apply one event of the process; returns a problem when it contradicts Ignite's twin."""
        kind = event.get("ev")
        if kind in ("remove", "save"):
            if not self._expected:
                return f"the process called {kind}({event['f']!r}) where Ignite's twin calls nothing"
            stream, want, filename, priority, saved = self._expected.pop(0)
            if (want, filename) != (kind, event["f"]):
                self._expected.clear()
                return f"the process called {kind}({event['f']!r}) where Ignite's twin calls {want}({filename!r})"
            twin = self.streams[stream]
            if kind == "remove":
                twin.remove(filename)
            else:
                self.order += 1
                entry = Entry(filename, priority, self.order, self._iteration)
                self.inflight = InFlight(stream, entry, twin.choose(filename, saved))
        elif self.inflight is not None:
            if kind == "superseded":
                self.inflight.superseded = True
            elif kind == "committed":
                self.inflight.committed = True
            elif kind == "error":
                self.inflight.error = str(event.get("error"))
            elif kind == "done":
                self._complete(self.inflight)
                self.inflight = None
        return None

    def _complete(self, inflight: InFlight) -> None:
        self.streams[inflight.stream].commit(inflight.entry, inflight.replaces)
        self.completed.add(inflight.stream)

    def end(self) -> InFlight | None:
        """The process is gone: settle the save it died in; return it when only the registry can tell."""
        inflight, self.inflight = self.inflight, None
        self._expected.clear()
        if inflight is None or not inflight.superseded:
            return None  # no save, or it died before the commit point: rolled back
        if inflight.committed:
            self._complete(inflight)  # the commit point passed: start-up must promote it
            return None
        return inflight

    def resolve(self, inflight: InFlight, committed: bool) -> None:
        """The registry's verdict on a save that died between its stage and its post-upload callback."""
        if committed:
            self._complete(inflight)

    def expected(self) -> dict[str, list[str]]:
        """Per stream, the filenames that must be loadable, oldest first."""
        return {name: [e.filename for e in s.live] for name, s in self.streams.items()}
