"""What follows each save: its archive keep, a wake-up of the webhook relay; at close, the history prune.

``TrackerSaver(keep_every=..., history=Retention(...), webhook=Webhook(url, secret))`` holds one
:class:`AfterSave` (formerly ``Upkeep``; the saver calls it, the lifecycle's modules do
the work). A due save's archive copy (:mod:`tracker_saver.lifecycle.archive`) is made right after the save, before the relay
is woken. The prune runs when the saver closes, on the run's own streams (a run that never
closed is pruned by the next one's close); the webhook's relay is a daemon thread that a save
only wakes: training never waits on it, and a dead webhook never fails a save (its events wait
in the registry's outbox, for this process, ``tracker-saver events --webhook``, or a next saver
with ``Webhook(..., backlog=True)``; a saver's relay otherwise starts from its own start).
History and webhooks need the SQLite registry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tracker_saver.core.errors import ConfigError, RegistryError
from tracker_saver.core.records import Record
from tracker_saver.core.wording import plural
from tracker_saver.lifecycle.archive import Archive
from tracker_saver.lifecycle.retention import Retention
from tracker_saver.lifecycle.webhooks import Relay, Webhook
from tracker_saver.registry import Query, Registry
from tracker_saver.registry.events import history_of
from tracker_saver.storage import Storage

if TYPE_CHECKING:
    from ignite.engine import Engine

__all__ = ["AfterSave"]

log = logging.getLogger(__name__)


class AfterSave:
    """A saver's ``keep_every=``, ``history=``, ``webhook=``: checked at once, started with the registry, ended by close.

    Examples:
        >>> AfterSave(history=1000, webhook=None, archive=None)
        Traceback (most recent call last):
        tracker_saver.core.errors.ConfigError: history=1000: pass a Retention, e.g. history=Retention(keep_last=1000, older_than=30 * 86400), or None
    """

    def __init__(self, *, history: Retention | None, webhook: Webhook | None, archive: Archive | None) -> None:
        if history is not None and not isinstance(history, Retention):
            raise ConfigError(
                f"history={history!r}: pass a Retention, e.g. history=Retention(keep_last=1000, "
                "older_than=30 * 86400), or None"
            )
        if webhook is not None and not isinstance(webhook, Webhook):
            raise ConfigError(f"webhook= takes a Webhook(url, secret), got a {type(webhook).__name__}")
        self.history, self.webhook, self.archive = history, webhook, archive
        self._registry: Registry | None = None
        self._scope = Query()
        self._relay: Relay | None = None

    def open(self, registry: Registry, scope: Query) -> None:
        """Check that the registry keeps history, and start the webhook's relay thread."""
        if self.history is None and self.webhook is None:
            return
        try:
            found = history_of(registry, "TrackerSaver(history=..., webhook=...)")
        except RegistryError as exc:
            raise ConfigError(str(exc)) from None
        self._registry, self._scope = registry, scope
        if self.webhook is not None:
            self._relay = Relay(found, self.webhook)
            if not self.webhook.backlog and (passed := self._relay.pass_backlog()):
                log.info(
                    "webhook %s: %s in its outbox not sent (a saver's webhook sends the events from its start "
                    "on); pass Webhook(..., backlog=True) to send them",
                    self.webhook.shown,
                    plural(passed, "earlier event"),
                )
            self._relay.start()

    def attach(self, engine: Engine) -> None:
        """Count ``keep_every``'s epochs and iterations on ``engine`` (the trainer)."""
        if self.archive is not None:
            self.archive.engine = engine

    def now(self) -> float | None:
        """Where training is, in ``keep_every``'s unit (read at the save's call); ``None`` without an archive.

        Raises:
            ConfigError: ``keep_every`` counts epochs or iterations, and no trainer is attached.
        """
        return self.archive.now() if self.archive is not None else None

    def saved(self, storage: Storage, registry: Registry, live: Record | None, at: float | None) -> None:
        """A save ended (``live``: the record it made live): keep it in the archive if due, then wake the relay.

        Raises:
            StorageError, IntegrityError: the archive copy failed (see :meth:`Archive.keep`); the save stays live.
        """
        try:
            if live is not None and self.archive is not None and at is not None:  # from the object just written
                self.archive.keep(storage, registry, live, at)
        finally:
            if self._relay is not None:
                self._relay.poke()

    def close(self) -> None:
        """Prune the run's history by the rule, then stop the relay (what it did not send stays in the outbox).

        A failed prune is logged, never raised: the checkpoints are saved, and the next close tries again.
        """
        try:
            if self.history is not None and self._registry is not None:
                try:
                    history_of(self._registry, "history=").prune(self._scope, self.history)
                except RegistryError as exc:
                    log.warning("history= prune of %s skipped: %s", self._registry.uri, exc)
        finally:
            if self._relay is not None:
                self._relay.stop(timeout=1.0)  # a request still in flight to a hung receiver: sent again later
