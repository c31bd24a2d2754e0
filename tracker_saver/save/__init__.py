"""The path of one checkpoint and what runs it: Ignite's calls, the pipeline, slots, recovery, async saves."""

__all__: list[str] = []
