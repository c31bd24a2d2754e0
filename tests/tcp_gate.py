"""A TCP forwarder to a server that a test can close: a real network outage for one client.

The worker (tests/worker.py) talks to the MLflow tracking server through a ``Gate``; its
``registry`` fault closes the gate while ``torch.save`` runs, so the commit-point write meets
a server that does not answer (connections reset, new ones closed at once), as when the
tracking server stops. ``open()`` lets traffic through again.

Examples:
    ``gate = Gate("127.0.0.1", 5000); MLflowRegistry(gate.uri); gate.close(); ...; gate.open()``
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["Gate"]


class Gate:
    """Forwards ``127.0.0.1:<port>`` to ``host:port`` while open; resets everything while closed."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._open = True
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self.uri = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._server.accept()
            if not self._open:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            # Forwarded as it comes: with Nagle's algorithm on, a request written in two pieces
            # waited for the peer's delayed ACK (40 ms) at each hop: 60 ms per MLflow call, 8x slower.
            for conn in (client, upstream):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    def close(self) -> None:
        """From now on the server does not answer: open connections are reset, new ones closed."""
        self._open = False
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            _reset(conn)

    @property
    def is_open(self) -> bool:
        """Whether traffic goes through."""
        return self._open

    def open(self) -> None:
        """Traffic goes through again."""
        self._open = True


def _reset(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
