"""The crash points of DESIGN's path, the run's shape, the kill plan a seed draws, and the race soak's
operations per process (:func:`race_plan`); pure.

A crash point is armed in the training process by ``TRACKER_SAVER_SOAK_CRASH=<point>:<n>``: the
process kills itself (SIGKILL) the ``n``-th time it passes ``<point>`` after training starts.
``gateway:<n>`` holds the ``n``-th S3 part upload until the driver has stopped the gateway.
``request:<endpoint>:<n>`` is carried out by the ClearML stand-in: it kills the process right
after it applied the ``n``-th request to ``<endpoint>``, before answering it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "BACKENDS",
    "CLEARML_REQUESTS",
    "GATEWAY",
    "Kill",
    "N_SAVED",
    "OPS",
    "POINTS",
    "ALIASES",
    "Op",
    "RESTORES",
    "STREAMS",
    "make_plan",
    "parse_crash",
    "race_plan",
    "score_of",
    "short_kills",
    "targeted_points",
]

BACKENDS = ("local", "s3", "clearml", "mlflow")

#: The two streams of the soak's training and their ``n_saved``.
N_SAVED = {"best_checkpoint": 2, "checkpoint": 1}
STREAMS = tuple(N_SAVED)

#: Targeted crash points in the order a save passes them (DESIGN, "The path of one checkpoint").
POINTS: dict[str, str] = {
    "remove:after": "Ignite's remove returned; the save has not begun",
    "create:before": "pre-upload callbacks ran; no pending record yet (before serialize)",
    "create:after": "the pending record exists; not a byte written",
    "pickle:mid": "inside torch.save's pickling, before its bytes reach the staged write",
    "write:mid": "half of the checkpoint's bytes are in the staged write (temp file / multipart parts)",
    "upload:mid": "S3 only: a part of the multipart upload is stored, the upload is not complete",
    "supersede:before": "every byte staged (temp file fsynced / parts uploaded); before the registry's stage",
    "supersede:after": "digest noted and the slot's previous record evicted; before the storage commit point",
    "commit:after": "the storage commit point passed (rename / CompleteMultipartUpload); record pending",
    "register:before": "post-upload callbacks ran; before the record becomes live",
    "register:after": "the record is live; the save returns next",
}

#: ClearML requests the stand-in kills the process after (the registry's writes, in any step).
CLEARML_REQUESTS = ("models.create", "models.add_or_update_metadata", "models.edit")

#: S3 gateway faults: radosgw stopped while the ``n``-th part upload is held, then started again
#: after 0-5 s (the save may retry and complete), or only once the save has raised (an outage).
GATEWAY = ("gateway-restart", "gateway-outage")

#: How the process after a kill restores: the resume helper; a fresh ``Checkpoint`` with the
#: model and trainer loaded from the newest last checkpoint; a fresh one from scratch (epoch 0).
RESTORES = ("resume", "fresh", "resume", "scratch")


def score_of(seed: int, epoch: int) -> float:
    """The validation score of ``epoch``: the same in every process (a rerun epoch scores the same).

    A slow upward trend plus noise keeps the best stream saving; one epoch in 50 scores ``inf``
    (DESIGN: an infinite priority must survive a resume as Ignite keeps it).

    Examples:
        >>> score_of(1, 3) == score_of(1, 3)
        True
    """
    rng = random.Random(f"{seed}:{epoch}")
    if rng.random() < 0.02:
        return float("inf")
    return round(0.002 * epoch + rng.uniform(0.0, 0.5), 4)


def targeted_points(backend: str) -> list[str]:
    """Every targeted point a backend can reach (``upload:mid`` is S3's; requests are ClearML's).

    Examples:
        >>> "upload:mid" in targeted_points("local"), "upload:mid" in targeted_points("s3")
        (False, True)
    """
    points = [p for p in POINTS if p != "upload:mid" or backend == "s3"]
    if backend == "clearml":
        points += [f"request:{endpoint}" for endpoint in CLEARML_REQUESTS]
    return points


def parse_crash(spec: str | None) -> tuple[str, int] | None:
    """``"supersede:after:2"`` → ``("supersede:after", 2)``; ``None`` or ``""`` → ``None``.

    Examples:
        >>> parse_crash("supersede:after:2"), parse_crash("gateway:3"), parse_crash(None)
        (('supersede:after', 2), ('gateway', 3), None)
    """
    if not spec:
        return None
    point, _, count = spec.rpartition(":")
    if not point or not count.isdigit() or int(count) < 1:
        raise ValueError(f"crash point {spec!r} is not <point>:<n> with n >= 1, e.g. supersede:after:2")
    return point, int(count)


@dataclass(frozen=True)
class Kill:
    """One kill of the plan and the restart after it.

    Attributes:
        index: 0-based kill number.
        kind: ``random`` (SIGKILL after ``delay`` s of training), ``targeted`` (a crash point)
            or ``gateway`` (S3: radosgw stopped in the middle of an upload, then started again).
        point: the crash point (``targeted``), one of ``GATEWAY`` or ``""``.
        count: kill the ``count``-th time the point is passed.
        delay: seconds of training before a random kill; for ``gateway-restart``, how long the
            gateway stays down before it is started again.
        restore: how the process started after this kill restores (see ``RESTORES``).
    """

    index: int
    kind: str
    point: str
    count: int
    delay: float
    restore: str

    @property
    def label(self) -> str:
        """How a report names the kill: ``random@0.734s``, ``supersede:after:2``, ``gateway:3``."""
        return f"random@{self.delay:.3f}s" if self.kind == "random" else f"{self.point}:{self.count}"

    @property
    def env(self) -> str:
        """The ``TRACKER_SAVER_SOAK_CRASH`` value the process of this kill gets (``""``: none)."""
        if self.kind == "targeted" and not self.point.startswith("request:"):
            return f"{self.point}:{self.count}"
        if self.kind == "gateway":
            return f"gateway:{self.count}"
        return ""


def make_plan(backend: str, kills: int, seed: int, *, max_delay: float, random_every: int = 2) -> list[Kill]:
    """The kills of one run: one in ``random_every`` random in time, the others targeted, round-robin over the points.

    Kill ``i`` is random when ``(i + i // 4) % random_every == 0``, so random and targeted kills
    meet every restore mode (``i % 4``) alike. Each round of targeted kills visits every point once,
    in an order shuffled by the seed. On ``s3`` every 10th kill is a gateway stop instead,
    alternately a short one and an outage.

    Examples:
        >>> plan = make_plan("local", 8, seed=1, max_delay=1.0)
        >>> [k.kind for k in plan].count("random"), [k.restore for k in plan][:4]
        (4, ['resume', 'fresh', 'resume', 'scratch'])
        >>> [k.kind for k in make_plan("local", 6, seed=1, max_delay=1.0, random_every=3)].count("random")
        3
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    rng = random.Random(seed)
    points: list[str] = []
    plan: list[Kill] = []
    for i in range(kills):
        restore = RESTORES[i % len(RESTORES)]
        if backend == "s3" and i % 10 == 9:
            point = GATEWAY[(i // 10) % 2]
            plan.append(Kill(i, "gateway", point, rng.randint(1, 3), rng.uniform(0.0, 5.0), restore))
        elif (i + i // 4) % random_every == 0:
            plan.append(Kill(i, "random", "", 0, rng.uniform(0.0, max_delay), restore))
        else:
            if not points:
                points = targeted_points(backend)
                rng.shuffle(points)
            point = points.pop()
            count = rng.randint(1, 6) if point.startswith("request:") else rng.randint(1, 3)
            plan.append(Kill(i, "targeted", point, count, 0.0, restore))
    return plan


def short_kills(backend: str, random_every: int = 3) -> int:
    """The fewest kills of :func:`make_plan` that still kill at every targeted point once (on ``s3``,
    with both gateway faults): CI's soak, the same property as 500 kills with far fewer restarts.

    Examples:
        >>> short_kills("local"), short_kills("s3"), short_kills("clearml")
        (15, 20, 20)
    """
    kills = 1
    while True:
        plan = make_plan(backend, kills, 0, max_delay=1.0, random_every=random_every)
        points = {k.point for k in plan if k.kind != "random"}
        if points >= set(targeted_points(backend)) | (set(GATEWAY) if backend == "s3" else set()):
            return kills
        kills += 1


#: The race soak's operations on one registry and output_uri, with their weights in a plan: the
#: commands two people (or scripts) may run at once on the same records (DESIGN, "Commands race").
OPS = {
    "get": 3, "pin": 3, "unpin": 2, "alias": 3, "unalias": 1, "rename": 2, "prune": 1, "take-over": 1, "repair": 1,
}  # fmt: skip
#: Few aliases, so that two processes often move the same one.
ALIASES = ("prod", "staging")
#: How an operation is made: the Python API, the CLI's ``main`` in the racer process (argparse and the
#: command's code as a user runs them, without an interpreter's start-up), or a ``python -m tracker_saver``.
VIA = ("api", "cli", "exec")


@dataclass(frozen=True)
class Op:
    """One operation of a racer's plan.

    Attributes:
        index: its place in the racer's plan: it starts ``index`` rounds after every racer's start.
        op: one of ``OPS``.
        via: one of ``VIA``.
        hot: take the oldest loadable record of the best stream (the one every racer takes and the
            training evicts next) rather than one at random.
        alias: the alias it sets, removes or reads (``get`` reads one in three through an alias).
        jitter: seconds after the round's start that it starts.
    """

    index: int
    op: str
    via: str
    hot: bool
    alias: str
    jitter: float


def race_plan(seed: int, racer: int, ops: int, *, exec_every: int = 8, max_jitter: float = 0.003) -> list[Op]:
    """The operations racer ``racer`` makes, drawn from ``seed`` and weighted by ``OPS``.

    Every racer makes its ``i``-th operation in the same round. In half the rounds (drawn from the
    seed alone) they all make the same operation on the hot record with the same alias: two pins, two
    unpins, two alias moves of one record at once, the collisions DESIGN's "Commands race" is about.
    One operation in ``exec_every`` runs through a CLI process of its own (0: none), the rest
    alternately through the API and the CLI's ``main``, so that a round mixes them.

    Examples:
        >>> plan = race_plan(1, 0, 40)
        >>> plan == race_plan(1, 0, 40), plan == race_plan(1, 1, 40), len(plan)
        (True, False, 40)
        >>> sum(a.op == b.op and a.hot for a, b in zip(plan, race_plan(1, 1, 40))) >= 10
        True
        >>> sorted({o.via for o in plan}), {o.via for o in race_plan(1, 0, 40, exec_every=0)} == {"api", "cli"}
        (['api', 'cli', 'exec'], True)
    """
    own = random.Random(f"race:{seed}:{racer}")
    names, weights = list(OPS), list(OPS.values())
    plan = []
    for i in range(ops):
        common = random.Random(f"race:{seed}:round:{i}")
        rng = common if common.random() < 0.5 else own
        op = rng.choices(names, weights)[0]
        # An alias moved to two records at once is its race: half the racers take another record then.
        hot = (op != "alias" or racer % 2 == 0) if rng is common else own.random() < 0.5
        alias = rng.choice(ALIASES)
        if rng is common:  # the same path too, so that they meet within the jitter
            via = VIA[i % 2]
        else:
            via = "exec" if exec_every and (i + racer) % exec_every == exec_every - 1 else VIA[(i + racer) % 2]
        plan.append(Op(i, op, via, hot, alias, own.uniform(0.0, max_jitter)))
    return plan
