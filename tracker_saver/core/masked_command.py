"""A command line with the value of every secret-looking option masked, before a shared registry records it.

A training script's ``argv`` becomes every record's ``command`` metadata
(:func:`tracker_saver.save.lineage.lineage`), and a registry is shared: so a password, a token or a
signed URL in ``argv`` must never reach it. :func:`mask_command` masks, with ``***``:

- the value of an option whose name looks secret (:func:`secret_name`): ``--password PW`` (also a
  value that starts with ``-``: ``--password -Xy9``), ``--password=PW``, ``-api-key K``;
- ``-p VALUE`` and ``-pVALUE``: mysql's and sshpass's password. A short option is ambiguous (``-p``
  is also many tools' port); a port lost from a record costs less than a password kept in one;
- ``NAME=VALUE`` anywhere in an argument (``DB_PASSWORD=pw``, Hydra's ``db.password=pw``, ``"token=t lr=0.1"``)
  and ``Name: value`` as a whole argument (``"Authorization: Bearer t"``);
- in a URL, its ``user:password@`` and every secret-looking query or fragment parameter
  (``sig=``, ``token=``, ``access_token=``, ``X-Amz-Signature=``, ``key=``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from urllib.parse import unquote

__all__ = ["MASK", "mask_command", "secret_name"]

#: What replaces a secret in a recorded command line.
MASK = "***"
#: Stands for :data:`MASK` while quoting: shlex would quote ``***`` as a shell glob.
_PLACEHOLDER = "__tracker_saver_masked__"

#: Found inside any word of a name, these make it secret: ``--dbpassword``, ``clientSecret``.
_SECRET_PARTS = tuple("passw passphrase secret credential apikey apitoken authtoken accesstoken privatekey".split())
#: As a name's last word, these make it secret (``--api-key``, ``--basic-auth``, ``HF_TOKEN``); elsewhere they
#: do not (``--key-dim``, ``--auth-type``, ``--pass-through``, ``--token-budget``).
_LAST_WORDS = frozenset("key token auth authorization pass pwd pw sig signature sas cookie creds".split())
#: The word before ``key`` or ``token`` that makes it data, not a secret: ``--sort-key``, ``--pad-token``.
_DATA_BEFORE = {
    "key": frozenset(
        "sort metric score label image input output target column group index partition primary cache dict "
        "monitor".split()
    ),
    "token": frozenset("pad bos eos unk mask sep cls start end special".split()),
}
#: A last word that makes a secret-looking name point at a secret, or describe one, without holding
#: it: ``--password-file PATH``, ``--aws-access-key-id ID``, ``--token-ttl 3600``, ``--password-stdin``.
_ABOUT_WORDS = frozenset(
    "file path dir folder env var stdin fd id name type len length size ttl timeout expiry url uri endpoint prompt "
    "command cmd helper store manager provider method scheme version algorithm format mode required policy".split()
)
#: A first word that makes a name a switch, which takes no value: ``--use-auth``, ``--no-password``.
_SWITCH_WORDS = frozenset(
    "use no enable disable with without require allow skip ask prompt show print generate rotate refresh verify "
    "check".split()
)

#: A URL, or the ``NAME=`` of an assignment (the value follows), in free text.
_TEXT = re.compile(r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+)|(?<![\w.+~-])(?P<name>[\w.+~-]+)=")
#: ``Name: value`` as a whole argument: an HTTP header, a YAML line.
_HEADER = re.compile(r"(?P<name>\s*[A-Za-z][\w.-]*\s*:\s*)\S.*", re.DOTALL)
#: A ``name=value`` parameter of a URL's query or fragment.
_PARAMETER = re.compile(r"(?<=[?&#;])(?P<name>[^=&#;?/]+)=[^&#;]*")
#: An option's name as words: at ``-``, ``_``, ``.``, digits and camelCase humps (``apiKey``).
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
#: The next argument is another long option (or ``--``), not a value: ``--auth --lr 0.1``.
_LONG_OPTION = re.compile(r"--([A-Za-z].*)?", re.DOTALL)
_SPACE = re.compile(r"\s")


def _words(name: str) -> list[str]:
    return [word.lower() for word in re.split(r"[^A-Za-z]+", _HUMP.sub(r"\1 \2", name)) if word]


def secret_name(name: str) -> bool:
    """Whether the option, variable or parameter ``name`` holds a secret (its value is masked).

    Its words are found at ``-``, ``_``, ``.``, digits and camelCase humps, so ``--keep-last`` and
    ``--monkey`` never match ``key``.

    Examples:
        >>> [secret_name(n) for n in ("--db-passphrase", "apiKey", "X-Amz-Signature", "HF_TOKEN", "--key")]
        [True, True, True, True, True]
        >>> [secret_name(n) for n in ("--keep-last", "--monkey", "--password-file", "--use-auth", "--max-tokens")]
        [False, False, False, False, False]
    """
    words = _words(name)
    if not words or words[0] in _SWITCH_WORDS or words[-1] in _ABOUT_WORDS:
        return False
    if any(part in word for word in words for part in _SECRET_PARTS):
        return True
    last = words[-1]
    return last in _LAST_WORDS and not (len(words) > 1 and words[-2] in _DATA_BEFORE.get(last, ()))


def _secret_option(name: str) -> bool:
    return name == "-p" or secret_name(name)


def _mask_url(url: str) -> str:
    """``url`` with its userinfo and its secret-looking query and fragment parameters masked."""
    scheme, rest = url.split("://", 1)
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:  # the last @ ends the userinfo: a password may hold one
        authority = f"{_PLACEHOLDER}@{authority.rsplit('@', 1)[1]}"

    def parameter(found: re.Match[str]) -> str:
        return f"{found['name']}={_PLACEHOLDER}" if secret_name(unquote(found["name"])) else found[0]

    return f"{scheme}://{authority}{_PARAMETER.sub(parameter, tail)}"


def _mask_text(text: str) -> str:
    """Free text with every URL masked and the value of every secret ``NAME=VALUE`` (up to a space) masked."""
    out, pos = [], 0
    while (found := _TEXT.search(text, pos)) is not None:
        out.append(text[pos : found.start()])
        pos = found.end()
        if found["url"] is not None:
            out.append(_mask_url(found["url"]))
        elif secret_name(found["name"]):
            out.append(f"{found['name']}={_PLACEHOLDER}")
            space = _SPACE.search(text, pos)
            pos = len(text) if space is None else space.start()
        else:  # the value may hold a URL or another assignment: scanned on
            out.append(found[0])
    out.append(text[pos:])
    return "".join(out)


def _mask_argument(arg: str) -> tuple[str, bool]:
    """One argument masked, and whether the next one is its value (a secret option's)."""
    if arg.startswith("-") and "=" in arg:
        name, value = arg.split("=", 1)
        return (f"{name}={_PLACEHOLDER}" if _secret_option(name) else f"{name}={_mask_text(value)}"), False
    if arg.startswith("-") and len(arg) > 1:
        if _secret_option(arg):
            return arg, True
        if arg.startswith("-p") and not arg.startswith("--"):
            return f"-p{_PLACEHOLDER}", False  # mysql's -pPASSWORD (also -pretrained: ambiguous, masked)
        return _mask_text(arg), False
    header = _HEADER.fullmatch(arg)
    if header is not None and secret_name(header["name"]):
        return f"{header['name']}{_PLACEHOLDER}", False
    return _mask_text(arg), False


def mask_command(argv: Sequence[str]) -> str:
    """``argv`` as one shell-quoted line, with every secret in it replaced by ``***``.

    The value after a secret option is masked even when it starts with ``-`` (``--password -Xy9``),
    unless it is another long option or ``--`` (``--auth --lr 0.1``); after ``-p`` only when it does
    not start with ``-`` (mysql's bare ``-p`` asks for the password).

    Examples:
        >>> mask_command(["train.py", "--password", "-Xy9s3", "--db-passphrase", "pw", "--lr", "0.1"])
        'train.py --password *** --db-passphrase *** --lr 0.1'
        >>> mask_command(["train.py", "--data", "https://me:pw@h.example/d?sv=1&sig=abc", "DB_TOKEN=t"])
        "train.py --data 'https://***@h.example/d?sv=1&sig=***' DB_TOKEN=***"
    """
    out: list[str] = []
    value_of: str | None = None  # the secret option whose value the next argument is
    for arg in argv:
        if value_of is not None and not _LONG_OPTION.fullmatch(arg) and not (value_of == "-p" and arg[:1] == "-"):
            out.append(_PLACEHOLDER)
            value_of = None
            continue
        masked, takes_value = _mask_argument(arg)
        out.append(masked)
        value_of = arg if takes_value else None
    return shlex.join(out).replace(_PLACEHOLDER, MASK)
