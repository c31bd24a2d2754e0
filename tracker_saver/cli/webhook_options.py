"""The webhook options of ``tracker-saver events``: its URL and secret from the environment or a file, not argv.

A command line is readable by every user of the machine (``ps``, ``/proc/PID/cmdline``) and is kept
in shell histories, so the signing secret, and a URL that carries a token, come from
``$TRACKER_SAVER_WEBHOOK_SECRET`` / ``$TRACKER_SAVER_WEBHOOK_URL`` or ``--secret-file PATH``.
``--secret S`` and a ``--webhook URL`` with a query or ``user:password@`` still work, each with a
warning on stderr that names the safer form. The secret file is read when group or others may read
it too, with a warning: containers mount their secrets 0644 or 0444 (Kubernetes, Docker), where a
refusal, as ssh's for a private key, would leave no way to use one.

Examples:
    >>> import argparse
    >>> parser = argparse.ArgumentParser(); add_webhook_options(parser)
    >>> args = parser.parse_args(["--webhook", "--secret-file", "/run/secrets/hook"])
    >>> args.webhook, args.secret_file
    ('', '/run/secrets/hook')
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.text import escape

if TYPE_CHECKING:
    from tracker_saver.lifecycle.webhooks import Webhook

__all__ = ["MAX_SECRET_BYTES", "add_webhook_options", "read_secret_file", "webhook_of"]

#: The most a secret file may hold: a signing key is a line, not a file of data.
MAX_SECRET_BYTES = 64 * 1024


def add_webhook_options(events: argparse.ArgumentParser) -> None:
    """``--webhook [URL]``, ``--secret-file PATH`` and ``--secret SECRET`` (kept, with a warning)."""
    events.add_argument(
        "--webhook",
        nargs="?",
        const="",
        metavar="URL",
        help="also POST each event, signed, to this URL from its outbox in the registry (new events from the first "
        "time on; without --follow: what is due now, then exit); --webhook alone takes the URL from "
        "$TRACKER_SAVER_WEBHOOK_URL, which ps does not show",
    )
    events.add_argument(
        "--secret-file",
        metavar="PATH",
        help="with --webhook: read the HMAC-SHA256 key from this file (one line); without it and --secret, the key is "
        "$TRACKER_SAVER_WEBHOOK_SECRET",
    )
    events.add_argument(
        "--secret",
        metavar="SECRET",
        help="with --webhook: the key itself, which ps shows to every user of the machine (a warning says so): "
        "prefer --secret-file or $TRACKER_SAVER_WEBHOOK_SECRET",
    )


def read_secret_file(path: str) -> tuple[str, list[str]]:
    """The secret held by the file ``path`` (one line; its line end dropped), and the warnings it earns.

    A pipe reads too (``--secret-file <(pass show hooks/ci)``). A file that group or others may
    read earns a warning that says ``chmod 600``.

    Examples:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".key", delete=False) as f:
        ...     _ = f.write("s3cret\\n")
        >>> os.chmod(f.name, 0o600)
        >>> read_secret_file(f.name)
        ('s3cret', [])
    """
    shown = escape(path)
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            data = file.read(MAX_SECRET_BYTES + 1)
    except (OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate in the path
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(
            f"--secret-file {shown!r} cannot be read ({why}): give a file that holds the webhook secret"
        ) from exc
    if len(data) > MAX_SECRET_BYTES:
        raise ConfigError(
            f"--secret-file {shown!r} holds more than {MAX_SECRET_BYTES} bytes: give a file with the secret alone"
        )
    try:
        secret = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise ConfigError(f"--secret-file {shown!r} is not UTF-8 text: give a file with the secret as text") from None
    if not secret:
        raise ConfigError(f"--secret-file {shown!r} is empty: write the webhook secret into it (one line)")
    warnings = []
    if stat.S_ISREG(mode) and mode & (stat.S_IRGRP | stat.S_IROTH):
        warnings.append(
            f"--secret-file {shown!r} may be read by other users (mode {stat.S_IMODE(mode):o}): "
            f"chmod 600 {shown}, unless a container mounted it so"
        )
    return secret, warnings


def webhook_of(args: argparse.Namespace) -> Webhook:
    """The webhook that ``args`` ask for, its warnings printed to stderr once it is valid.

    The URL: ``--webhook URL``, else ``$TRACKER_SAVER_WEBHOOK_URL``. The secret: ``--secret-file``,
    else ``--secret``, else ``$TRACKER_SAVER_WEBHOOK_SECRET`` (giving both options is an error).
    """
    from tracker_saver.lifecycle.webhooks import Webhook

    if args.secret is not None and args.secret_file is not None:
        raise ConfigError("the webhook secret is given twice: keep --secret-file PATH and drop --secret")
    warnings: list[str] = []
    secret = args.secret or ""
    if args.secret_file is not None:
        secret, warnings = read_secret_file(args.secret_file)
    hook = Webhook(args.webhook or "", secret)  # "": from the environment
    if args.secret is not None:
        warnings.append(
            "--secret shows the webhook secret to every user of this machine (ps) and in shell history: "
            "use --secret-file PATH or $TRACKER_SAVER_WEBHOOK_SECRET"
        )
    if args.webhook and _carries_token(args.webhook):
        warnings.append(
            f"the URL given to --webhook ({hook.shown}/…) carries a query or user:password@, which ps shows to every "
            "user of this machine: set $TRACKER_SAVER_WEBHOOK_URL and pass --webhook alone"
        )
    for warning in warnings:
        print(f"tracker-saver: warning: {escape(warning)}", file=sys.stderr)
    return hook


def _carries_token(url: str) -> bool:
    """Whether ``url`` holds more than a place: a query or a ``user:password@``."""
    parts = urlsplit(url)
    return bool(parts.query) or "@" in parts.netloc
