"""A checkpoint's life after its save, one module each: keep, archive, prune, events, webhook, gates.

``keep``: aliases that keep what they name; ``archive``: the archive and footprint of a run's
streams (``keep_every``); the others are issue 46's part B (history, events, promotion gates).
"""
