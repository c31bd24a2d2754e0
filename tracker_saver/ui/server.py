"""Run the UI with uvicorn: loopback by default; any other address gets a Host allow-list and a warning."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Sequence

import uvicorn

from tracker_saver import models
from tracker_saver.core.errors import ConfigError
from tracker_saver.registry import Registry
from tracker_saver.ui.app import create_app

__all__ = ["LOOPBACK_HOSTS", "SHUTDOWN_GRACE_S", "host_names", "is_loopback", "serve"]

#: The ``Host`` headers a loopback server answers: a page on another name (DNS rebinding) gets 400.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Addresses that bind every interface of the machine.
_WILDCARDS = ("0.0.0.0", "::", "")
#: Seconds a stopping server (Ctrl+C, SIGTERM) lets requests in flight finish before it cancels
#: them: an answer takes milliseconds, and a download to a slow or stalled client must not keep
#: the server up (uvicorn alone waits for it for ever). A cancelled download frees its place.
SHUTDOWN_GRACE_S = 2


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine.

    Examples:
        >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
        (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_names(host: str, allow: Sequence[str] = ()) -> list[str]:
    """The names a server bound to ``host`` answers in ``Host`` headers: the names it was bound to, and ``allow``.

    Loopback: its loopback names. An address of every interface (``0.0.0.0``, ``::``): the loopback
    names, the machine's host name and fully qualified name, and the addresses they resolve to.
    Any other address or name: itself. A page that a rebinding DNS name points here sends its own
    name, which is none of them.

    Examples:
        >>> host_names("127.0.0.1"), host_names("10.0.0.5", ["models.team.example"])
        (['127.0.0.1', 'localhost', '::1'], ['10.0.0.5', 'models.team.example'])
    """
    name = host.strip("[]").lower()
    if is_loopback(name):
        names = list(LOOPBACK_HOSTS)
    elif name in _WILDCARDS:
        machine = {socket.gethostname(), socket.getfqdn()}
        addresses = set()
        for each in machine:
            with contextlib.suppress(OSError):
                addresses |= {str(info[4][0]) for info in socket.getaddrinfo(each, None)}
        names = [*LOOPBACK_HOSTS, *sorted(machine | addresses)]
    else:
        names = [name]
    return list(dict.fromkeys([*names, *(a.strip("[]").lower() for a in allow)]))


def page_url(host: str, port: int) -> str:
    """The address to open for a server bound to ``host:port`` (an IPv6 address in brackets).

    Examples:
        >>> page_url("127.0.0.1", 8765), page_url("::1", 8765)
        ('http://127.0.0.1:8765/', 'http://[::1]:8765/')
    """
    name = host.strip("[]")
    return f"http://[{name}]:{port}/" if ":" in name else f"http://{name}:{port}/"


class _Server(uvicorn.Server):
    """uvicorn's server, which says on stderr where it listens, once it does, and how to stop it."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # returns once listening (it exits on a busy port)
        port = self.servers[0].sockets[0].getsockname()[1] if self.servers else self.config.port
        print(
            f"tracker-saver UI at {page_url(self.config.host, port)} (press Ctrl+C to stop it)",
            file=sys.stderr,
            flush=True,
        )


def serve(
    registry: str | os.PathLike[str] | Registry | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    allow_hosts: Sequence[str] = (),
) -> None:
    """Serve the UI over ``registry`` until interrupted (Ctrl+C, SIGTERM); once it listens, stderr says its URL.

    A stop lets requests in flight finish for :data:`SHUTDOWN_GRACE_S` seconds, then cancels them
    (a download to a stalled client among them), so the server always exits.

    The UI has no authentication: anyone who can reach ``host:port`` can rename, tag, pin and
    download every record. Keep the default loopback address and reach it from elsewhere
    through an SSH tunnel (``ssh -L 8765:127.0.0.1:8765 HOST``), or put it behind a reverse proxy
    that authenticates (docs/security.md, "The web UI"). Whatever the address, the server answers
    only the names in :func:`host_names` and refuses cross-site writes and downloads
    (:mod:`tracker_saver.ui.guard`).

    Args:
        registry: which registry to show (default as in :func:`tracker_saver.registry.open_registry`);
            it must exist.
        host: the address to bind; anything but loopback prints a warning.
        port: the TCP port.
        allow_hosts: more names to answer, e.g. the name a reverse proxy forwards in ``Host``.

    Raises:
        RegistryError: there is no registry at that path.
        ConfigError: ``port`` is not a TCP port.

    Examples:
        ``serve("runs/registry.db")`` then open http://127.0.0.1:8765/
    """
    if not 1 <= port <= 65535:
        raise ConfigError(f"port {port} is not a TCP port: use 1..65535 (8765 by default)")
    models.count_models(registry=registry)  # a missing registry fails now, naming its path, not on the first request
    loopback = is_loopback(host)
    if not loopback:
        print(
            f"WARNING: the tracker-saver UI has no authentication and listens on {host}:{port}: anyone who can "
            "reach it can rename, tag, pin and download every record. Bind to 127.0.0.1 and use an SSH tunnel "
            f"(ssh -L {port}:127.0.0.1:{port} HOST) unless this network is trusted.",
            file=sys.stderr,
        )
    app = create_app(registry, allowed_hosts=host_names(host, allow_hosts))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    server = _Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl+C is how it stops: uvicorn shuts down, then re-raises it
        server.run()
