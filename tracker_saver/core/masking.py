"""Copies of third-party exceptions with every secret masked, so no traceback prints one.

A library's exception chained as ``__cause__`` is printed whole by every traceback, and
botocore's and ClearML's messages carry the URLs they were given, ``user:password@`` included.
The error boundaries of the S3 storage and the ClearML registry chain a masked copy instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

from tracker_saver.core.errors import TrackerSaverError

__all__ = ["MaskedError", "has_userinfo", "masked", "raise_masked", "redact_url", "strip_userinfo"]

#: ``scheme://user:password@`` in any text: the userinfo part, up to the host.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@\"'<>]*@")


def strip_userinfo(text: str) -> str:
    """``text`` without the ``user:password@`` of any URL in it.

    Examples:
        >>> strip_userinfo('Could not connect to "http://u:pw@127.0.0.1:7480/b/k"')
        'Could not connect to "http://127.0.0.1:7480/b/k"'
    """
    return _USERINFO.sub(r"\1", text)


def has_userinfo(url: str) -> bool:
    """Whether ``url`` has a ``user:password@`` part.

    Examples:
        >>> has_userinfo("http://key:secret@127.0.0.1:7480"), has_userinfo("http://127.0.0.1:7480")
        (True, False)
    """
    parts = urlsplit(url)
    return parts.username is not None or parts.password is not None


def redact_url(url: str) -> str:
    """``url`` without a ``user:password@`` part (endpoints must never leak credentials).

    Examples:
        >>> redact_url("http://key:secret@127.0.0.1:7480/")
        'http://127.0.0.1:7480/'
    """
    if not has_userinfo(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class MaskedError(Exception):
    """Stands in, as a chained cause, for a third-party exception that could not be copied masked.

    Its message is the original's type and masked message: ``botocore.exceptions.X: ...``.
    """

    def __init__(self, original: type[BaseException], message: str) -> None:
        super().__init__(f"{original.__module__}.{original.__qualname__}: {message}")
        self.original = f"{original.__module__}.{original.__qualname__}"


def _masked_value(value: Any, clean: Callable[[str], str], memo: dict[int, BaseException]) -> Any:
    """``value`` with every string cleaned, through dicts, lists, tuples and exceptions."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, BaseException):
        return masked(value, clean, memo)
    if isinstance(value, dict):
        return {k: _masked_value(v, clean, memo) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_masked_value(v, clean, memo) for v in value)
    return value


def masked(
    exc: BaseException, clean: Callable[[str], str], memo: dict[int, BaseException] | None = None
) -> BaseException:
    """A copy of ``exc``, and of its whole chain, whose every text went through ``clean``.

    The copy is rebuilt from ``exc``'s own pickling recipe (so it keeps its type:
    ``except botocore.exceptions.ClientError`` still works on a cause) with every string in its
    arguments and attributes cleaned. If that fails, or the copy still shows something
    ``clean`` would change, a :class:`MaskedError` with the original type's name stands in.
    The copy keeps ``exc``'s traceback: code locations, which show no values.

    Examples:
        >>> copy = masked(ValueError("http://u:pw@host/x"), strip_userinfo)
        >>> type(copy).__name__, str(copy)
        ('ValueError', 'http://host/x')
    """
    memo = {} if memo is None else memo
    if id(exc) in memo:
        return memo[id(exc)]
    copy: BaseException
    try:
        recipe: Any = exc.__reduce_ex__(4)
        rebuild, args = recipe[0], recipe[1]
        state = recipe[2] if len(recipe) > 2 else None
        copy = rebuild(*_masked_value(args, clean, memo))
        if isinstance(state, dict) and state:
            copy.__dict__.update(_masked_value(state, clean, memo))
        shown = [str(copy), repr(copy), repr(vars(copy))]
        if not isinstance(copy, BaseException) or any(clean(text) != text for text in shown):
            raise TypeError("the copy still shows a secret")
    except Exception:
        try:
            text = str(exc)
        except Exception:
            text = "(its message could not be read)"
        copy = MaskedError(type(exc), clean(text))
    memo[id(exc)] = copy
    copy.__traceback__ = exc.__traceback__
    copy.__cause__ = masked(exc.__cause__, clean, memo) if exc.__cause__ is not None else None
    copy.__context__ = masked(exc.__context__, clean, memo) if exc.__context__ is not None else None
    copy.__suppress_context__ = exc.__suppress_context__
    return copy


def raise_masked(error: TrackerSaverError, cause: BaseException, clean: Callable[[str], str]) -> NoReturn:
    """``raise error from masked(cause)``, with not even ``__context__`` holding the raw ``cause``.

    Call it while ``cause`` is being handled. Python makes the exception being handled the
    ``__context__`` of whatever is raised: raising the masked copy first, and ``error`` while
    handling it, leaves the raw exception in neither ``__cause__`` nor ``__context__``.
    """
    copy = masked(cause, clean)
    context, traceback = copy.__context__, copy.__traceback__
    try:
        raise copy
    except BaseException:
        copy.__context__, copy.__traceback__ = context, traceback  # what raising it just replaced
        raise error from copy
