"""The vocabulary every layer uses: errors, records, naming, queries, clocks; no storage or registry I/O."""

__all__: list[str] = []
