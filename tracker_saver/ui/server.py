"""Run the UI with uvicorn: loopback by default, a warning on stderr for any other address."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys

import uvicorn

from tracker_saver import models
from tracker_saver.core.errors import ConfigError
from tracker_saver.registry import Registry
from tracker_saver.ui.app import create_app

__all__ = ["is_loopback", "serve"]

#: The ``Host`` headers a loopback server answers: a page on another name (DNS rebinding) gets 400.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


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
        print(f"tracker-saver UI at {page_url(self.config.host, port)} (press Ctrl+C to stop it)", file=sys.stderr,
              flush=True)  # fmt: skip


def serve(registry: str | os.PathLike[str] | Registry | None = None, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the UI over ``registry`` until interrupted (Ctrl+C); once it listens, stderr says its URL.

    The UI has no authentication: anyone who can reach ``host:port`` can rename, tag, pin and
    download every record. Keep the default loopback address and reach it from elsewhere
    through an SSH tunnel (``ssh -L 8765:127.0.0.1:8765 HOST``).

    Args:
        registry: which registry to show (default as in :func:`tracker_saver.registry.open_registry`);
            it must exist.
        host: the address to bind; anything but loopback prints a warning.
        port: the TCP port.

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
    app = create_app(registry, allowed_hosts=LOOPBACK_HOSTS if loopback else None)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl+C is how it stops: uvicorn shuts down, then re-raises it
        server.run()
