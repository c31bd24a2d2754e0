"""The one text rule for names, tags and metadata, and the one escape for every terminal writer; pure.

Every name, project, run, prefix, score name, tag, alias, metadata key and string metadata value
that reaches the project, from any door (the saver, the API, the CLI, the UI), passes
:func:`check_text` before anything is written. Text is refused when it holds:

- a character that is not valid Unicode: a lone surrogate, which is how Python decodes bytes that
  are not UTF-8 (``$'bad\\xffbyte'`` on a command line); no registry can store it;
- a C0 or C1 control character (NUL, ESC, CR, LF, TAB, DEL, U+0080–U+009F): ESC and CR rewrite
  what a terminal shows (move the cursor, retitle the window, plant an OSC 8 link), and NUL ends
  a C string. A string metadata value may hold TAB and LF (a note, indented JSON): the one
  exception, and :func:`escape` shows them as ``\\t`` and ``\\n``;
- a bidirectional control (U+202A–U+202E, U+2066–U+2069), which reorders how the text around it
  is shown, so ``gpj.exe`` can read as ``exe.jpg``;
- a line or paragraph separator (U+2028, U+2029), which breaks a line as LF does;
- an invisible space (U+200B ZERO WIDTH SPACE, U+2060 WORD JOINER, U+FEFF ZERO WIDTH NO-BREAK
  SPACE), which makes two different names look the same.

The joiners U+200C and U+200D stay: emoji sequences and several scripts need them, and they
cannot move a cursor or reorder text.

Text written by another writer (a tracker's own UI, a script with its SDK, another program on
the SQLite file) may break the rule: it is still shown, through :func:`escape`, which every
terminal writer (tables, ``models show``, fsck, error lines) uses.

Examples:
    >>> check_text("tag", "candidate 🧑\\u200d🔬")
    'candidate 🧑\\u200d🔬'
    >>> escape("best\\x1b]8;;http://evil.example/\\x1b\\\\")
    'best\\\\x1b]8;;http://evil.example/\\\\x1b\\\\'
"""

from __future__ import annotations

import re

from tracker_saver.core.errors import ConfigError

__all__ = ["METADATA_VALUE_ALLOWS", "check_filters", "check_text", "escape", "first_refused"]

#: Every character the rule refuses, in one class: C0, DEL and C1 controls, surrogates, line and
#: paragraph separators, bidirectional controls, invisible spaces.
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b\u2060\ufeff]")
#: What a string metadata value may hold beyond the rule: TAB and LF.
METADATA_VALUE_ALLOWS = "\t\n"
#: Names of the C0 controls people meet, for messages.
_CONTROL_NAMES = {0x00: "NUL", 0x09: "TAB", 0x0A: "LF", 0x0D: "CR", 0x1B: "ESC", 0x7F: "DEL"}


def first_refused(text: str, allow: str = "") -> int | None:
    """The index of the first character of ``text`` the rule refuses (``allow`` excepted), else ``None``.

    Examples:
        >>> first_refused("ok"), first_refused("a\\x1bb"), first_refused("a\\nb", allow="\\n")
        (None, 1, None)
    """
    for match in _REFUSED.finditer(text):
        if match.group() not in allow:
            return match.start()
    return None


def _what(char: str) -> str:
    """What ``char`` is, and why the rule refuses it."""
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return "a lone surrogate: the text is not valid UTF-8 (bytes Python could not decode)"
    if code == 0:
        return "a NUL, which no file name or C string can hold"
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return "a control character, which can rewrite what a terminal shows"
    if code in (0x2028, 0x2029):
        return "a line separator, which breaks the line where the text is shown"
    if 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
        return "a bidirectional control, which reorders how the text around it is shown"
    return "an invisible space, which makes the text look like other text"


def _shown(text: str) -> str:
    """``text`` as a message quotes it: ``repr`` (every refused character escaped), at most 80 characters."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


def check_text(field: str, text: object, *, allow: str = "") -> str:
    """Return ``text`` if the text rule allows it (``allow``: characters also allowed), else raise.

    Raises:
        ConfigError: naming ``field``, the text and the offending character (both escaped), and the fix.

    Examples:
        >>> check_text("project", "resnet (lr=0.1) [v2]: #3")
        'resnet (lr=0.1) [v2]: #3'
        >>> check_text("tag", "ok\\x1b[1A")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: tag 'ok\\x1b[1A' holds U+001B (ESC) at character 3, a control character, ...
    """
    if not isinstance(text, str):
        raise ConfigError(f"{field} {text!r} is not text: pass a string")
    at = first_refused(text, allow)
    if at is None:
        return text
    code = ord(text[at])
    label = f"U+{code:04X}" + (f" ({_CONTROL_NAMES[code]})" if code in _CONTROL_NAMES else "")
    fix = "pass it as UTF-8 text" if 0xD800 <= code <= 0xDFFF else "remove it"
    raise ConfigError(
        f"{field} {_shown(text)} holds {label} at character {at + 1}, {_what(text[at])}: {fix} "
        "(names, tags and metadata follow one text rule: docs/security.md)"
    )


def check_filters(**filters: object) -> None:
    """Check each text filter of a query a user gave (``project=``, ``run=`` …); ``None`` and numbers pass.

    A filter is text that must match a record's: the same rule, so a filter that no valid record
    can match (and no registry can even bind, for a lone surrogate) is the one clear error.

    Examples:
        >>> check_filters(project="mnist", run=None, limit=3)
        >>> check_filters(stream="best\\udcff")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: the stream filter 'best\\udcff' holds U+DCFF at character 5, ...
    """
    for field, value in filters.items():
        if isinstance(value, str):
            check_text(f"the {field.replace('_', ' ')} filter", value)


#: The escapes people read at a glance; every other refused character is ``\\xNN`` or ``\\uNNNN``.
_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape(text: object, allow: str = "") -> str:
    """``text`` safe for a terminal: every character the rule refuses shown as ``\\xNN`` or ``\\uNNNN``.

    The one escape of every terminal writer: nothing it returns can move a cursor, retitle a
    window, plant a link, reorder a line or fail to encode (a lone surrogate becomes ``\\udcff``).
    ``allow`` keeps characters a field may hold as they are (TAB and LF of a metadata value in
    the UI's JSON, which no terminal prints).

    Examples:
        >>> escape("a\\x1b[1A\\rb"), escape("bad\\udcffbyte"), escape("\\u202eexe.jpg"), escape(3)
        ('a\\\\x1b[1A\\\\rb', 'bad\\\\udcffbyte', '\\\\u202eexe.jpg', '3')
        >>> escape("a\\nb\\x1b", allow="\\t\\n")
        'a\\nb\\\\x1b'
    """
    text = text if isinstance(text, str) else str(text)
    return _REFUSED.sub(lambda match: match.group() if match.group() in allow else _escaped(match), text)
