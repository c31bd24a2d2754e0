"""A checkpoint's life after its save, one job per module, between the registry and the saver.

``pins`` (copies kept outside the slots), ``schedule`` and ``archive`` (``keep_every``'s keeps),
``aliases`` (aliases that keep what they name), ``gates`` (promotion gates), ``retention`` (what
a prune deletes), ``events`` (following a registry's events), ``webhooks`` (delivering them,
signed) and ``after_save`` (what the saver runs after each save). What must share a transaction
with a change stays in the registry, behind :class:`~tracker_saver.registry.events.HistoryLog`.
"""

__all__: list[str] = []
