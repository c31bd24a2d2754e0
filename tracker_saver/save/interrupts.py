"""An interrupt stays an interrupt: the Ctrl-C or ``sys.exit`` that a library turned into its own error.

``torch.save`` writes through a Python ``write`` the C++ zip writer calls. A ``KeyboardInterrupt``
raised there (Python runs the SIGINT handler at the next bytecode, which is often inside that
``write``) unwinds into ``torch.save``'s ``with`` block, whose exit writes the zip's end and raises
``RuntimeError('... unexpected pos ...')``, the interrupt only as its ``__context__``. Python keeps
no "interrupt pending" flag a caller could read afterwards (the handler already ran), so the chain
is the one place left to see it: the save reads it there instead of installing a signal handler
of its own, which would change the process's Ctrl-C for everyone.
"""

from __future__ import annotations

__all__ = ["interrupt_behind"]


def interrupt_behind(exc: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or ``SystemExit`` in ``exc``'s cause or context chain, or ``None``.

    Examples:
        >>> try:
        ...     try:
        ...         raise KeyboardInterrupt
        ...     finally:
        ...         raise RuntimeError("unexpected pos")
        ... except RuntimeError as error:
        ...     type(interrupt_behind(error)).__name__
        'KeyboardInterrupt'
        >>> interrupt_behind(ValueError("bad")) is None
        True
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (KeyboardInterrupt, SystemExit)):
            return current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
    return None
