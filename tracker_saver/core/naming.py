"""Parse Ignite's checkpoint filenames into typed metadata and build safe slot and log keys; pure.

Ignite's default ``filename_pattern`` is ``{filename_prefix}_{name}_{global_step}_{score_name}={score}.{ext}``,
where each part is present only when it applies. Ignite passes the save handler
``basename``, ``score_name`` and ``priority`` (the exact score, or the global step when there is
no score function), so the filename only has to tell the global step:

* with a ``score_name``: ``score`` is ``priority`` (exact, not the 4-digit string), and a number
  before ``_{score_name}=`` is the global step;
* without one: two numbers are ``global_step`` and ``score``; one number with a decimal point
  (or ``nan``/``inf``) is a score, one integer is a global step. (A score function that returns
  ints and has no ``score_name`` is therefore recorded as a step: give it a ``score_name``.)
* a custom ``filename_pattern`` that does not start with the basename, or does not parse: no
  ``global_step``; ``score`` is ``priority`` when there is a ``score_name``.

A NaN score is recorded as absent; ``±inf`` is kept exactly (see ``records.clean_metadata``).

Project, run and stream names may hold any characters people type (``resnet (lr=0.1) [v2]: #3``):
records keep them as typed, and keys use :func:`key_segment`, a safe slug that is the name
itself when it is already safe. The key's extension is fixed per stream (:func:`key_ext`), so a
custom ``filename_pattern`` can never make a stream's keys vary from save to save.
"""

from __future__ import annotations

import hashlib
import math
import os
import posixpath
import re
import unicodedata
from functools import lru_cache
from numbers import Number
from pathlib import PurePath
from typing import Any, NamedTuple

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.records import MetaValue
from tracker_saver.core.text import check_text

__all__ = [
    "KEY_EXTENSIONS",
    "LEGACY_PIN_FOLDER",
    "PIN_FOLDER",
    "SlotKey",
    "check_key",
    "check_name",
    "check_segment",
    "fallback_basename",
    "key_ext",
    "key_path",
    "key_problem",
    "key_segment",
    "log_key",
    "logs_prefix",
    "may_be_slot_key",
    "parse_filename",
    "parse_slot_key",
    "pinned_key",
    "run_prefix",
    "safe_filename",
    "slot_key",
    "split_basename",
    "stream_path",
]

_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9 ._=+-]{0,199}")
_KEY = re.compile(r"[A-Za-z0-9 ._=+/-]{1,1000}")
_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?(\d+\.\d*|\d*\.\d+|nan|inf)")


def check_segment(what: str, value: str) -> str:
    """Return ``value`` if it is safe as one path segment of a storage key, else raise.

    Examples:
        >>> check_segment("project", "mnist")
        'mnist'
    """
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value) or value.endswith((" ", ".")):
        raise ConfigError(
            f"{what} {value!r} cannot be part of a storage key: use 1-200 letters, digits, "
            "spaces or . _ - = + (no '/', no leading '.', no '..')"
        )
    return value


def check_name(what: str, value: object) -> str:
    """Return ``value`` if it can name a project, run or stream, else raise.

    A name is a non-empty string of at most 1000 characters that the text rule allows
    (:func:`tracker_saver.core.text.check_text`: no NUL or other control character).

    Examples:
        >>> check_name("run", "resnet (lr=0.1) [v2]: run #3, final")
        'resnet (lr=0.1) [v2]: run #3, final'
    """
    if not isinstance(value, str) or not value.strip() or len(value) > 1000:
        raise ConfigError(
            f"{what} {value!r} is not a usable name: pass a non-empty string of at most 1000 characters, without NUL"
        )
    return check_text(what, value)


def key_segment(name: str) -> str:
    """One key segment for ``name``: the name itself when it is safe, else a slug plus a short hash.

    The hash keeps two names that slug alike (``a b`` and ``a-b``) apart.

    Examples:
        >>> key_segment("resnet-lr0.1")
        'resnet-lr0.1'
        >>> key_segment("resnet (lr=0.1) [v2]: run #3")
        'resnet-lr=0.1-v2-run-3-af7c261d'
    """
    if _SEGMENT.fullmatch(name) and not name.endswith((" ", ".")):
        return name
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^A-Za-z0-9._=+-]+", "-", ascii_name).strip("-. ")[:80].rstrip("-. ")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug.lstrip('.=+-')}-{digest}" if slug.lstrip(".=+-") else f"x-{digest}"


def key_path(name: str) -> str:
    """Key segments for a ``/``-separated name (a ClearML project with subprojects).

    Examples:
        >>> key_path("team/mnist")
        'team/mnist'
    """
    return "/".join(key_segment(part) for part in name.split("/"))


@lru_cache(maxsize=65536)  # every record a query or fsck reads asks it of its key
def check_key(key: str) -> str:
    """Return ``key`` if it stays inside output_uri, else raise.

    A key is relative, ``/``-separated, of ASCII letters, digits, spaces and ``. _ = + -`` only,
    with no empty, ``.`` or ``..`` segment. So no spelling of a parent folder (``%2e%2e``,
    ``\\``, fullwidth dots, a NUL) can reach a filesystem or an S3 key: it is refused, and
    :func:`key_segment` never produces one.

    Examples:
        >>> check_key("mnist/r1/best_model.slot0.pt")
        'mnist/r1/best_model.slot0.pt'
        >>> check_key("../x.pt")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: storage key '../x.pt' would escape output_uri or is not portable: ...
    """
    if isinstance(key, str) and len(key) > 1000:
        raise ConfigError(
            f"storage key {key[:60] + '...'!r} is {len(key)} characters long: at most 1000 fit in every store; "
            "use a shorter (less nested) project, run or stream name"
        )
    if (
        not isinstance(key, str)
        or not _KEY.fullmatch(key)
        or key.startswith("/")
        or posixpath.normpath(key) != key
        or any(part in ("", ".", "..") for part in key.split("/"))
    ):
        raise ConfigError(
            f"storage key {key!r} would escape output_uri or is not portable: keys are relative, "
            "'/'-separated segments of ASCII letters, digits, spaces and . _ = + -, without '', '.' or '..' "
            "(naming.slot_key builds them)"
        )
    return key


#: What a file name we choose may not hold: anything but letters, digits and ``.=-`` (and runs of ``_``).
_UNSAFE_FILE = re.compile(r"[^A-Za-z0-9.=-]+")

#: Extensions a semantic filename may give its stream's keys; any other gives ``.pt``.
KEY_EXTENSIONS = (".pt", ".pth", ".ckpt", ".bin", ".tar")


def key_ext(filename: str) -> str:
    """The extension of a stream's keys: the filename's when it is a checkpoint extension, else ``.pt``.

    A custom ``filename_pattern`` without ``{ext}`` (``"{name}_{score}"``) gives names whose
    "extension" is the score: the key must not follow it.

    Examples:
        >>> key_ext("best_model_3_val_acc=0.5.pt"), key_ext("model_0.1000"), key_ext("net.ckpt")
        ('.pt', '.pt', '.ckpt')
    """
    ext = posixpath.splitext(filename)[1].lower()
    return ext if ext in KEY_EXTENSIONS else ".pt"


def slot_key(project: str, run: str, stream: str, slot: int, ext: str) -> str:
    """The storage key of a slot: ``<project>/<run>/<stream>.slot<k><ext>``, names slugged.

    Examples:
        >>> slot_key("mnist", "resnet-lr0.1", "best_model", 1, ".pt")
        'mnist/resnet-lr0.1/best_model.slot1.pt'
    """
    if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
        raise ConfigError(f"slot must be a non-negative int, got {slot!r}")
    if ext not in KEY_EXTENSIONS:
        raise ConfigError(f"extension {ext!r} is not one of {', '.join(KEY_EXTENSIONS)}")
    return check_key(f"{key_path(project)}/{key_segment(run)}/{key_segment(stream)}.slot{slot}{ext}")


class SlotKey(NamedTuple):
    """A slot key read back: the stream's path (``<project>/<run>/<stream>``, slugged), the slot, the extension."""

    stream_path: str
    slot: int
    ext: str


#: ``<stream path>.slot<k><ext>``: the stream's path may itself hold ``.slot`` (a stream named ``a.slot1``).
_SLOT_KEY = re.compile(r"(?P<path>.+)\.slot(?P<slot>0|[1-9]\d*)(?P<ext>\.[a-z]+)")


def parse_slot_key(key: str) -> SlotKey | None:
    """What :func:`slot_key` built ``key`` from, or ``None`` when ``key`` is no slot key.

    The one reading of a slot key: the pipeline, recovery and fsck decide by it which stream a
    leftover write or an object belongs to.

    Examples:
        >>> parse_slot_key("mnist/r1/best_model.slot1.pt")
        SlotKey(stream_path='mnist/r1/best_model', slot=1, ext='.pt')
        >>> parse_slot_key("mnist/r1/a.slot1.pt.slot0.ckpt").stream_path, parse_slot_key("mnist/r1/pinned/x.pt")
        ('mnist/r1/a.slot1.pt', None)
    """
    found = _SLOT_KEY.fullmatch(key)
    if found is None or found["ext"] not in KEY_EXTENSIONS:
        return None
    return SlotKey(found["path"], int(found["slot"]), found["ext"])


@lru_cache(maxsize=4096)  # fsck asks it of every record: 100,000 records are 2,000 streams
def stream_path(project: str, run: str, stream: str) -> str:
    """The part every slot key of a stream starts with, up to ``.slot``: ``<project>/<run>/<stream>``.

    Examples:
        >>> stream_path("mnist", "r1", "best_model")
        'mnist/r1/best_model'
    """
    return slot_key(project, run, stream, 0, ".pt").rsplit(".slot", 1)[0]


#: The folder of a run's pins and keeps: a segment that :func:`key_segment` never makes (no slug
#: starts with ``+``), so no project, run, stream or log key can ever name a key under it.
PIN_FOLDER = "+pinned"
#: The folder of pins written by releases before issue 51: still read, loaded and unpinned, never written.
LEGACY_PIN_FOLDER = "pinned"


def pinned_key(project: str, run: str, filename: str, token: str) -> str:
    """The key of one pinned copy: ``<project>/<run>/+pinned/<token>-<filename>``, names slugged.

    ``+pinned`` is a segment no slugged project, run or stream can be (:func:`key_segment` never
    starts one with ``+``), so the key is outside every stream's slot keys and log keys, whatever
    the names; ``token`` is fresh for each pin (random hex), so two pins, made at once by two
    processes, never share a key. Pins that earlier releases wrote at
    ``<project>/<run>/pinned/<filename>`` stay where they are (:func:`key_problem` accepts them).

    Examples:
        >>> pinned_key("mnist", "r1", "best_model_17_val_acc=0.9312.pt", "3f9a2c1b7d4e8f00")
        'mnist/r1/+pinned/3f9a2c1b7d4e8f00-best_model_17_val_acc=0.9312.pt'
        >>> pinned_key("team/vision", "pinned", "best_model.slot0.pt", "ab12") != slot_key(
        ...     "team/vision", "pinned", "best_model", 0, ".pt")
        True
    """
    if not re.fullmatch(r"[0-9a-f]{4,32}", token):
        raise ConfigError(f"pin token {token!r} is not 4-32 lowercase hex digits (secrets.token_hex makes one)")
    return check_key(f"{run_prefix(project, run)}{PIN_FOLDER}/{token}-{key_segment(filename)}")


def may_be_slot_key(key: str) -> bool:
    """Whether ``key`` could be the slot key of some stream: it reads as one and is not under a pin folder.

    A pin key of an earlier release (``<project>/<run>/pinned/<name>``) whose name reads as a slot
    key is the slot key of project ``<project>/<run>``, run ``pinned`` (issue 51): its bytes may be
    another stream's, so an unpin never deletes them.

    Examples:
        >>> may_be_slot_key("team/vision/pinned/best_model.slot0.pt"), may_be_slot_key("p/r/pinned/best_model_3.pt")
        (True, False)
        >>> may_be_slot_key("team/vision/+pinned/ab12-best_model.slot0.pt")
        False
    """
    return parse_slot_key(key) is not None and not any(part.startswith("+") for part in key.split("/"))


@lru_cache(maxsize=65536)  # asked of every record of a slot, three times by fsck
def key_problem(project: str, run: str, stream: str, slot: int | None, key: str | None) -> str | None:
    """Why ``key`` is not where a record of this stream (and ``slot``) may keep its object; ``None`` if it is.

    Paths come from the stream, never from a record (DESIGN, "Others write too"): a slot
    record's key is its stream's slot key, a pinned record's (``slot`` ``None``) a pin key
    under its own run's folder: ``<project>/<run>/+pinned/<name>``, or ``<project>/<run>/pinned/<name>``
    for a pin an earlier release made (an upgrade never loses a pin). Anyone who can write records could otherwise point one at any
    file, and a download or an unpin would read or delete it.

    Examples:
        >>> key_problem("p", "r", "best_model", 1, "p/r/best_model.slot1.pt") is None
        True
        >>> key_problem("p", "r", "best_model", None, "p/r/+pinned/9f2c-best_model_3.pt") is None
        True
        >>> key_problem("p", "r", "best_model", None, "p/r/pinned/best_model_3.pt") is None  # an earlier release's
        True
        >>> key_problem("p", "r", "best_model", 1, "id_rsa")
        "key 'id_rsa' is not slot 1's of stream p/r/best_model (p/r/best_model.slot1.<ext>)"
    """
    if key is None:
        return "it has no key"
    path = stream_path(project, run, stream)
    if slot is not None:
        parsed = parse_slot_key(key)
        if parsed is None or (parsed.stream_path, parsed.slot) != (path, slot):
            return f"key {key!r} is not slot {slot}'s of stream {project}/{run}/{stream} ({path}.slot{slot}.<ext>)"
        return None
    prefix = run_prefix(project, run)
    for folder in (f"{prefix}{PIN_FOLDER}/", f"{prefix}{LEGACY_PIN_FOLDER}/"):  # a pin of an earlier release too
        rest = key[len(folder) :] if key.startswith(folder) else ""
        if rest and "/" not in rest:
            return None
    return f"key {key!r} is not a pin key of run {project}/{run} ({prefix}{PIN_FOLDER}/<name>)"


def safe_filename(name: str, ext: str = "") -> str:
    """A local file name for a record's display name: letters, digits and ``._-=`` only, ending in ``ext``.

    Accents are dropped (``é`` is ``e``); every run of other characters (spaces, ``/``, ``:``,
    other scripts, control characters) and of ``_`` becomes one ``_``; leading and trailing dots, dashes and underscores go (no hidden
    file, nothing that reads as an option); the name ends in ``ext``, the checkpoint's extension
    (a name that ends in it, in any letter case, is not given it twice).

    Examples:
        >>> safe_filename("../best model: v2/final.pt")
        'best_model_v2_final.pt'
        >>> safe_filename("quickstart_ the one we ship", ".pt"), safe_filename("runner-up", ".pt")
        ('quickstart_the_one_we_ship.pt', 'runner-up.pt')
        >>> safe_filename("best_model_6_val_acc=0.9500.pt", ".pt"), safe_filename("résnet 模型", ".ckpt")
        ('best_model_6_val_acc=0.9500.pt', 'resnet.ckpt')
    """
    text = _UNSAFE_FILE.sub("_", unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode())
    if ext and text.lower().endswith(ext.lower()):
        text = text[: -len(ext)]
    return (text.strip("._-")[:200] or "checkpoint") + ext


def run_prefix(project: str, run: str) -> str:
    """The folder of a run's slot keys, with a trailing ``/``.

    Examples:
        >>> run_prefix("mnist", "resnet-lr0.1")
        'mnist/resnet-lr0.1/'
    """
    return slot_key(project, run, "x", 0, ".pt").rsplit("/", 1)[0] + "/"


def logs_prefix(project: str, run: str) -> str:
    """The folder of a run's log objects, with a trailing ``/``: beside its slot keys, never among them.

    Examples:
        >>> logs_prefix("mnist", "resnet (lr=0.1)")
        'mnist/resnet-lr=0.1-65aaf658/logs/'
    """
    return run_prefix(check_name("project", project), check_name("run", run)) + "logs/"


def log_key(project: str, run: str, relative: str | os.PathLike[str]) -> str:
    """The storage key of the log file at ``relative`` (a path under the uploader's ``root``).

    Root's own ``logs/`` folder is the run's ``logs/`` folder: ``logs/train.log`` goes to
    ``<project>/<run>/logs/train.log``, never ``logs/logs/``; any other path goes under it as it is
    (``runs/…``). Each path segment becomes a safe key segment (:func:`key_segment`), so no file
    name can make a key escape output_uri.

    Examples:
        >>> log_key("mnist", "r1", "logs/train.log")
        'mnist/r1/logs/train.log'
        >>> log_key("mnist", "r1", "runs/Jan01/events.out.tfevents.1.host")
        'mnist/r1/logs/runs/Jan01/events.out.tfevents.1.host'
        >>> log_key("mnist", "r1", "../etc/passwd")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: log file '../etc/passwd' is not inside the uploader's root: ...
    """
    parts = PurePath(relative).parts
    if not parts or PurePath(relative).is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(
            f"log file {os.fspath(relative)!r} is not inside the uploader's root: "
            "log files are uploaded by their path relative to root="
        )
    if parts[0] == "logs" and len(parts) > 1:
        parts = parts[1:]
    return check_key(logs_prefix(project, run) + "/".join(key_segment(p) for p in parts))


def split_basename(basename: str) -> tuple[str, str]:
    """Split Ignite's basename ``{prefix}_{name}`` into (prefix, name).

    Ignite joins them with ``_`` and passes only the joined string, so the split is at the
    first ``_`` (``checkpoint`` keeps an empty prefix).

    Examples:
        >>> split_basename("best_model")
        ('best', 'model')
        >>> split_basename("checkpoint")
        ('', 'checkpoint')
    """
    prefix, sep, name = basename.partition("_")
    return (prefix, name) if sep else ("", basename)


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, Number):
        return None
    if isinstance(value, int):
        return value
    as_float = float(value)  # type: ignore[arg-type]
    return None if math.isnan(as_float) else as_float


def fallback_basename(filename: str) -> str:
    """The stream of a save that came without Ignite's metadata: the filename less its extension and step.

    Examples:
        >>> fallback_basename("model_1.pt"), fallback_basename("test.pt"), fallback_basename("a/b_20.ckpt")
        ('model', 'test', 'a/b')
    """
    return re.sub(r"_\d+$", "", posixpath.splitext(filename)[0]) or "checkpoint"


def parse_filename(filename: str, basename: str, score_name: str | None, priority: Any) -> dict[str, MetaValue]:
    """Typed metadata of one checkpoint from Ignite's filename and metadata.

    Examples:
        >>> meta = parse_filename("best_model_17_val_acc=0.9312.pt", "best_model", "val_acc", 0.93121)
        >>> meta["global_step"], meta["score"], meta["score_name"]
        (17, 0.93121, 'val_acc')
        >>> parse_filename("checkpoint_400.pt", "checkpoint", None, 400)["global_step"]
        400
    """
    prefix, name = split_basename(basename)
    stem, ext = posixpath.splitext(filename)
    step: int | None = None
    score: int | float | None = None
    parsed = False
    if stem.startswith(basename):
        rest = stem[len(basename) :]
        if score_name is not None:
            tail = f"_{score_name}="
            cut = rest.rfind(tail)
            if cut >= 0:
                rest = rest[:cut]
        parts = rest[1:].split("_") if rest.startswith("_") else ([] if not rest else None)
        if parts is not None and len(parts) <= 2:
            parsed = True
            if score_name is None and parts and _FLOAT.fullmatch(parts[-1]):
                score = _number(priority)
                parts = parts[:-1]
            if len(parts) == 1 and _INT.fullmatch(parts[0]):
                step = int(parts[0])
            elif parts:
                parsed = False
    if score_name is not None:
        score = _number(priority)
    meta: dict[str, MetaValue] = {
        "prefix": prefix,
        "ignite_name": name,
        "basename": basename,
        "global_step": step,
        "score_name": score_name,
        "score": float(score) if score is not None else None,
        "priority": _number(priority),
        "ext": ext,
    }
    if not parsed:
        meta["filename_pattern"] = "custom"
    return meta
