"""The ordered pre- and post-upload callback chain a saver runs around every write."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from tracker_saver.core.errors import CallbackError, ConfigError, ConfigTypeError, TrackerSaverError
from tracker_saver.core.records import TIMING_KEYS, UploadInfo

__all__ = ["CallbackChain", "PostUploadCallback", "PreUploadCallback"]


class PreUploadCallback(Protocol):
    """Called before a checkpoint is written; returns the (possibly changed) info, or None to skip."""

    def __call__(self, info: UploadInfo) -> UploadInfo | None: ...


class PostUploadCallback(Protocol):
    """Called after the bytes are complete, before the record is committed live."""

    def __call__(self, info: UploadInfo) -> None: ...


def _listed(what: str, callbacks: object) -> list[Any]:
    """``callbacks`` as a list: ``None`` is none (as Ignite's optional arguments); one callable is an error."""
    if callbacks is None:
        return []
    if callable(callbacks) or isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Iterable):
        raise ConfigTypeError(
            f"{what}={callbacks!r} is not a list of callbacks: pass a list, {what}=[callback], or None for none"
        )
    return list(callbacks)


def _label(callback: Callable[..., object]) -> str:
    return getattr(callback, "__qualname__", None) or type(callback).__qualname__


class CallbackChain:
    """Pre- and post-upload callbacks, run in the order they were added.

    A pre-upload callback may change the ``UploadInfo`` (metadata, tags, name) or return
    ``None`` to skip the upload. Any exception a callback raises reaches the training process
    as ``CallbackError`` with the cause chained: unlike ClearML's binding, nothing is swallowed.

    Note:
        In async mode callbacks run on the upload worker thread, in Ignite's call order.

    Examples:
        >>> chain = CallbackChain()
        >>> chain.add_pre(lambda info: (info.tags.append("baseline"), info)[1])
        >>> chain.run_pre(UploadInfo("p", "r", "checkpoint", "checkpoint_1.pt")).tags
        ['baseline']
    """

    def __init__(
        self, pre: Iterable[PreUploadCallback] | None = None, post: Iterable[PostUploadCallback] | None = None
    ) -> None:
        self._pre: list[PreUploadCallback] = []
        self._post: list[PostUploadCallback] = []
        for callback in _listed("pre_upload", pre):
            self.add_pre(callback)
        for callback in _listed("post_upload", post):
            self.add_post(callback)

    def add_pre(self, callback: PreUploadCallback) -> None:
        """Add a pre-upload callback."""
        if not callable(callback):
            raise ConfigTypeError(f"pre-upload callback {callback!r} is not callable")
        self._pre.append(callback)

    def add_post(self, callback: PostUploadCallback) -> None:
        """Add a post-upload callback."""
        if not callable(callback):
            raise ConfigTypeError(f"post-upload callback {callback!r} is not callable")
        self._post.append(callback)

    def run_pre(self, info: UploadInfo) -> UploadInfo | None:
        """Run the pre-upload chain; ``None`` as soon as a callback skips.

        Raises:
            CallbackError: a callback raised, returned something else than an ``UploadInfo``
                or ``None``, changed a field the slot allocator owns (``UploadInfo.READ_ONLY``), or
                set a metadata key the saver reserves (``TIMING_KEYS``).
        """
        owned = {name: getattr(info, name) for name in UploadInfo.READ_ONLY}
        current: UploadInfo | None = info
        for callback in self._pre:
            try:
                current = callback(current)  # type: ignore[arg-type]
            except TrackerSaverError:
                raise
            except Exception as exc:
                raise CallbackError(
                    f"pre-upload callback {_label(callback)} raised on {info.filename!r}: {exc!r}"
                ) from exc
            if current is None:
                return None
            if not isinstance(current, UploadInfo):
                raise CallbackError(
                    f"pre-upload callback {_label(callback)} returned {type(current).__name__}: "
                    "return the UploadInfo it was given (changed or not), or None to skip"
                )
            changed = sorted(name for name, value in owned.items() if getattr(current, name) != value)
            if changed:
                raise CallbackError(
                    f"pre-upload callback {_label(callback)} changed {', '.join(changed)} of {owned['filename']!r}: "
                    "those belong to the slot allocator and keep a stream within its slots; a callback may "
                    "change name, metadata and tags, or return None to skip"
                )
            forged = sorted(key for key in current.metadata if key in TIMING_KEYS)
            if forged:
                raise CallbackError(
                    f"pre-upload callback {_label(callback)} set metadata {', '.join(forged)} of "
                    f"{owned['filename']!r}: the saver records there what each save cost "
                    "(tracker_saver.core.timings); give your key another name"
                )
        if current is not None:
            current.check_labels()  # the text rule, before anything is written
        return current

    def run_post(self, info: UploadInfo) -> None:
        """Run the post-upload chain.

        Raises:
            CallbackError: a callback raised, or left a name, tags or metadata that cannot be
                recorded (``UploadInfo.check_labels``); those are then put back as they were, so
                the record still becomes live with what the pre-upload chain gave it.
        """
        kept = (info.name, list(info.tags), dict(info.metadata))
        for callback in self._post:
            try:
                callback(info)
            except TrackerSaverError:
                raise
            except Exception as exc:
                raise CallbackError(
                    f"post-upload callback {_label(callback)} raised on {info.filename!r}: {exc!r}"
                ) from exc
        try:
            info.check_labels()
        except ConfigError as exc:
            info.name, info.tags, info.metadata = kept
            raise CallbackError(f"a post-upload callback left {exc}; the record keeps its earlier labels") from exc
