"""How counts read in messages and tables: ``1 stream``, ``2 streams``, ``1 byte``; pure.

Examples:
    >>> f"{plural(1, 'stream')} checked, {plural(3, 'object')}"
    '1 stream checked, 3 objects'
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural (``many``, else ``noun + "s"``) unless ``count`` is 1.

    Examples:
        >>> plural(1, "byte"), plural(0, "problem"), plural(2, "process", "processes")
        ('1 byte', '0 problems', '2 processes')
    """
    return f"{count} {noun if count == 1 else many or noun + 's'}"
