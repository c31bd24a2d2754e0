"""A checkpoint's life after its save, one job per module: ``keep`` (aliases that keep what they name)."""

__all__: list[str] = []
