"""Webhook secrets off the command line (issue 51, case 6) and a receiver that refuses what it cannot verify.

``tracker-saver events --webhook`` takes its URL and secret from the environment or a file, where
``ps`` does not show them; ``--secret`` and a URL with a token still work, with a warning. The
receiver is ``examples/webhook_receiver.py``'s, on 127.0.0.1 port 0 in a thread, as in
tests/test_webhooks.py; the refusals are sent as raw HTTP, as a forger would send them.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracker_saver import ConfigError
from tracker_saver.cli.main import main
from tracker_saver.core.records import UploadInfo
from tracker_saver.lifecycle.webhooks import Relay, Webhook
from tracker_saver.registry import open_registry
from tracker_saver.registry.sqlite import SQLiteRegistry

SECRET = "whsec_test_never_shown_0123"
TOKEN = "tok_test_never_shown_4567"
_spec = importlib.util.spec_from_file_location(
    "webhook_receiver_secrets", Path(__file__).resolve().parents[1] / "examples" / "webhook_receiver.py"
)
assert _spec is not None and _spec.loader is not None
receiver_example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(receiver_example)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[SQLiteRegistry]:
    reg = open_registry(str(tmp_path / "registry.db"))
    assert isinstance(reg, SQLiteRegistry)
    yield reg
    reg.close()


@pytest.fixture
def receiver() -> Iterator[Any]:
    """The example receiver, verifying with SECRET; ``.got`` holds the events it took."""
    got: list[dict[str, Any]] = []
    server = receiver_example.Receiver(("127.0.0.1", 0), SECRET, got.append)
    server.got = got
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def save(registry: SQLiteRegistry, n: int) -> None:
    """A record made live (one ``record.live`` event), as a save makes it."""
    info = UploadInfo("p", "r", "s", f"s_{n}.pt", slot=0, key="p/r/s.slot0.pt", metadata={"score": n})
    registry.records.make_live(
        registry.records.create_pending(info, uri=f"file:///o/{info.key}").id, sha256="0" * 64, size=1
    )


def deliver(registry: SQLiteRegistry, argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """``events`` with ``argv`` twice, an event saved between: the exit status, stdout and stderr of both."""
    argv = ["events", *argv, "--registry", registry.path]
    first = main(argv)  # the outbox starts here
    save(registry, 0)
    second = main(argv)
    out, err = capsys.readouterr()
    return max(first, second), out, err


# -- the secret and the URL from the environment or a file ----------------------------------------


def test_events_take_the_url_and_secret_from_the_environment_and_print_neither(
    registry, receiver, capsys, monkeypatch
) -> None:
    port = receiver.server_address[1]
    monkeypatch.setenv("TRACKER_SAVER_WEBHOOK_URL", f"http://127.0.0.1:{port}/events?token={TOKEN}")
    monkeypatch.setenv("TRACKER_SAVER_WEBHOOK_SECRET", SECRET)
    status, out, err = deliver(registry, ["--webhook"], capsys)
    assert status == 0 and err == ""
    assert out.splitlines()[-1] == f"sent 1 event to http://127.0.0.1:{port}; 0 events left"
    assert len(receiver.got) == 1  # the receiver verified its signature with SECRET
    assert SECRET not in out and TOKEN not in out


def test_a_secret_file_signs_the_events_and_only_one_others_can_read_gets_a_warning(
    registry, receiver, capsys, tmp_path
) -> None:
    secret_file = tmp_path / "hook.secret"
    secret_file.write_text(SECRET + "\n")  # as `echo "$S" > file` writes it
    secret_file.chmod(0o600)
    url = f"http://127.0.0.1:{receiver.server_address[1]}/events"
    status, out, err = deliver(registry, ["--webhook", url, "--secret-file", str(secret_file)], capsys)
    assert status == 0 and err == "" and len(receiver.got) == 1
    secret_file.chmod(0o644)  # as a container mounts a secret
    assert main(["events", "--webhook", url, "--secret-file", str(secret_file), "--registry", registry.path]) == 0
    err = capsys.readouterr().err
    assert err == (
        f"tracker-saver: warning: --secret-file '{secret_file}' may be read by other users (mode 644): "
        f"chmod 600 {secret_file}, unless a container mounted it so\n"
    )
    assert SECRET not in err


def test_the_secret_and_a_token_on_the_command_line_still_work_with_a_warning_naming_the_safer_forms(
    registry, receiver, capsys
) -> None:
    port = receiver.server_address[1]
    url = f"http://127.0.0.1:{port}/events?token={TOKEN}"
    status, out, err = deliver(registry, ["--webhook", url, "--secret", SECRET], capsys)
    assert status == 0 and len(receiver.got) == 1
    lines = err.splitlines()
    assert lines[:2] == [
        "tracker-saver: warning: --secret shows the webhook secret to every user of this machine (ps) and in shell "
        "history: use --secret-file PATH or $TRACKER_SAVER_WEBHOOK_SECRET",
        f"tracker-saver: warning: the URL given to --webhook (http://127.0.0.1:{port}/…) carries a query or "
        "user:password@, which ps shows to every user of this machine: set $TRACKER_SAVER_WEBHOOK_URL and pass "
        "--webhook alone",
    ]
    assert SECRET not in out + err and TOKEN not in out + err


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot be read (No such file or directory)"),
        (b"", "is empty"),
        (b"\n", "is empty"),
        (b"\xff\xfe", "is not UTF-8 text"),
        (b"x" * (64 * 1024 + 1), "holds more than 65536 bytes"),
    ],
)
def test_a_secret_file_that_holds_no_secret_is_one_clear_line(registry, capsys, tmp_path, content, why) -> None:
    path = tmp_path / "hook.secret"
    if content is not None:
        path.write_bytes(content)
    argv = ["events", "--webhook", "http://127.0.0.1:9/h", "--secret-file", str(path), "--registry", registry.path]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"tracker-saver: error: --secret-file '{path}' {why}{_FIX[why]}\n"


_FIX = {
    "cannot be read (No such file or directory)": ": give a file that holds the webhook secret",
    "is empty": ": write the webhook secret into it (one line)",
    "is not UTF-8 text": ": give a file with the secret as text",
    "holds more than 65536 bytes": ": give a file with the secret alone",
}


def test_a_secret_file_may_be_a_pipe_as_a_shell_makes_it(registry, receiver, capsys, monkeypatch) -> None:
    url = f"http://127.0.0.1:{receiver.server_address[1]}/events"
    monkeypatch.setenv("TRACKER_SAVER_WEBHOOK_SECRET", SECRET)
    assert main(["events", "--webhook", url, "--registry", registry.path]) == 0  # the outbox starts here
    monkeypatch.delenv("TRACKER_SAVER_WEBHOOK_SECRET")
    save(registry, 0)
    read, write = os.pipe()  # what `--secret-file <(pass show hooks/ci)` hands over: /dev/fd/N
    os.write(write, SECRET.encode() + b"\n")
    os.close(write)
    try:
        assert main(["events", "--webhook", url, "--secret-file", f"/dev/fd/{read}", "--registry", registry.path]) == 0
    finally:
        os.close(read)
    assert capsys.readouterr().err == "" and len(receiver.got) == 1


def test_a_secret_given_twice_or_none_at_all_is_refused_with_the_fix(registry, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TRACKER_SAVER_WEBHOOK_SECRET", raising=False)
    monkeypatch.delenv("TRACKER_SAVER_WEBHOOK_URL", raising=False)
    (tmp_path / "s").write_text(SECRET)
    base = ["events", "--registry", registry.path, "--webhook"]
    assert main([*base, "http://127.0.0.1:9/h", "--secret", SECRET, "--secret-file", str(tmp_path / "s")]) == 2
    assert "the webhook secret is given twice: keep --secret-file PATH and drop --secret" in capsys.readouterr().err
    assert main([*base, "http://127.0.0.1:9/h"]) == 2
    assert "set TRACKER_SAVER_WEBHOOK_SECRET or pass --secret-file PATH" in capsys.readouterr().err
    assert main(base) == 2
    assert "or set TRACKER_SAVER_WEBHOOK_URL" in capsys.readouterr().err


def test_a_python_webhook_reads_what_it_is_not_given_from_the_environment(registry, receiver, monkeypatch) -> None:
    port = receiver.server_address[1]
    monkeypatch.setenv("TRACKER_SAVER_WEBHOOK_URL", f"http://127.0.0.1:{port}/events?access_token={TOKEN}")
    monkeypatch.setenv("TRACKER_SAVER_WEBHOOK_SECRET", SECRET)
    hook = Webhook()
    assert repr(hook) == f"Webhook('http://127.0.0.1:{port}')" and hook.secret == SECRET
    assert Webhook(secret="other").secret == "other"  # what is given wins over the environment
    relay = Relay(registry.history, hook)
    save(registry, 0)
    assert relay.pump() == 1 and len(receiver.got) == 1
    monkeypatch.delenv("TRACKER_SAVER_WEBHOOK_SECRET")
    with pytest.raises(ConfigError, match="needs a secret .* set TRACKER_SAVER_WEBHOOK_SECRET"):
        Webhook()


def test_a_webhook_url_with_user_and_password_is_delivered_with_basic_auth_and_shown_without_them(
    registry, receiver
) -> None:
    seen: list[str] = []

    class Handler(receiver_example._Handler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization", ""))
            super().do_POST()

    receiver.RequestHandlerClass = Handler
    hook = Webhook(f"http://hooks:{TOKEN}@127.0.0.1:{receiver.server_address[1]}/events", SECRET)
    relay = Relay(registry.history, hook)
    save(registry, 0)
    assert relay.pump() == 1 and len(receiver.got) == 1  # urllib used to look up "hooks:tok…@127.0.0.1"
    assert seen == ["Basic " + base64.b64encode(f"hooks:{TOKEN}".encode()).decode()]
    assert TOKEN not in repr(hook) + hook.shown


# -- the example receiver refuses what it cannot verify, by its headers ---------------------------


def raw_post(port: int, signature: bytes, content_length: bytes, body: bytes = b"") -> bytes:
    """One POST as raw bytes (a header value may hold any byte); the whole answer ('' if the connection dropped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /events HTTP/1.1\r\nHost: 127.0.0.1\r\nTracker-Saver-Signature: "
            + signature
            + b"\r\nContent-Length: "
            + content_length
            + b"\r\n\r\n"
            + body
        )
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:  # the server waits for a body it was promised: no answer
            pass
        return answer


@pytest.mark.parametrize(
    "v1",
    ["é" * 64, "\u00e9" + "0" * 63, "0" * 63, "G" * 64, "", "0" * 64 + "\u00e9"],
    ids=["non-ASCII", "one non-ASCII", "short", "not hex", "empty", "too long"],
)
def test_the_receiver_answers_400_to_a_malformed_signature_instead_of_dropping_the_connection(receiver, v1) -> None:
    header = f"t={int(time.time())},v1={v1}".encode()
    answer = raw_post(receiver.server_address[1], header, b"2", b"{}")
    assert answer.startswith(b"HTTP/1.0 400 ") and answer.endswith(b"malformed signature header")
    assert receiver.got == []


def test_the_receiver_refuses_a_too_large_body_from_its_headers_without_reading_it(receiver) -> None:
    now = int(time.time())
    signed = receiver_example.signature(SECRET, now, b"{}").encode()
    answer = raw_post(receiver.server_address[1], signed, str(1 << 40).encode())  # 1 TiB promised, none sent
    assert answer.startswith(b"HTTP/1.0 413 ") and answer.endswith(b"body too large")
    old = receiver_example.signature(SECRET, now - 3600, b"{}").encode()
    answer = raw_post(receiver.server_address[1], old, str(1 << 40).encode())
    assert answer.startswith(b"HTTP/1.0 401 ") and answer.endswith(b"signature too old")
    answer = raw_post(receiver.server_address[1], signed, b"-1")
    assert answer.startswith(b"HTTP/1.0 411 ")
    assert receiver.got == []


def test_the_receiver_still_takes_a_signed_event_and_refuses_a_signed_body_that_is_no_event(receiver) -> None:
    now = int(time.time())
    for body, status in ((b'{"id": "evt_1", "type": "t"}', b"200"), (b"[1]", b"400"), (b"{", b"400")):
        answer = raw_post(
            receiver.server_address[1],
            receiver_example.signature(SECRET, now, body).encode(),
            str(len(body)).encode(),
            body,
        )
        assert answer.startswith(b"HTTP/1.0 " + status + b" ")
    assert [e["id"] for e in receiver.got] == ["evt_1"]
