"""S3 failures surface as clear errors naming bucket, key and fix, and never lose the last good object."""

from __future__ import annotations

import hashlib
import io
import socket
import threading
import time
import uuid

import pytest

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.storage import open_storage

boto3 = pytest.importorskip("boto3")

from tracker_saver.storage.s3 import S3Storage  # noqa: E402  (needs boto3)

MiB = 1024 * 1024
WRONG_SECRET = "wr0ng-s3cret-never-shown-Pq7Zx"


def _texts(exc: BaseException) -> str:
    """str and repr of an exception and of everything chained to it."""
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out += [str(exc), repr(exc)]
        exc = exc.__cause__ or exc.__context__
    return "\n".join(out)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _uploads(client, bucket: str, prefix: str) -> list[dict]:
    return client.list_multipart_uploads(Bucket=bucket, Prefix=prefix + "/").get("Uploads", [])


def _fail_mid_upload(store, ceph_s3, action, parts: int = 3) -> BaseException:
    """Run ``action`` in a thread; stop radosgw once ``parts`` parts of its upload are stored.

    Every further part is held until the gateway is down, so the upload is certain to be in the
    middle (not done, not yet begun) when radosgw goes away. The gateway is running again
    afterwards. Returns the one exception ``action`` raised.
    """
    parts_done, gateway_down = threading.Event(), threading.Event()
    count = [0]

    def after_part(http_response, **_):
        if http_response is not None and http_response.status_code < 300:
            count[0] += 1
            if count[0] >= parts:
                parts_done.set()

    def before_part(**_):
        if parts_done.is_set():
            gateway_down.wait(60)

    events = store._client.meta.events
    events.register("after-call.s3.UploadPart", after_part)
    events.register("before-send.s3.UploadPart", before_part)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run)
    with ceph_s3.gateway_stopped():
        worker.start()
        assert parts_done.wait(60), f"the upload never got {parts} parts up"
        ceph_s3.stop_rgw()
        gateway_down.set()
        worker.join(90)
        assert not worker.is_alive(), "the upload hung after the gateway went away"
    assert len(failure) == 1, failure
    return failure[0]


# ------------------------------------------------------------------ credentials


@pytest.mark.ceph
def test_a_wrong_secret_is_refused_at_check_with_the_fix(s3_output_uri, ceph_s3) -> None:
    store = S3Storage(
        s3_output_uri,
        endpoint_url=ceph_s3.endpoint_url,
        aws_access_key_id=ceph_s3.access_key,
        aws_secret_access_key=WRONG_SECRET,
    )
    with pytest.raises(
        ConfigError,
        match=r"credentials were refused by http://127\.0\.0\.1:\d+ \(SignatureDoesNotMatch\): "
        r"check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile",
    ) as caught:
        store.check()
    assert store.uri in str(caught.value)
    assert WRONG_SECRET not in _texts(caught.value)


@pytest.mark.ceph
@pytest.mark.parametrize("operation", ["put_stream", "put_file", "writer", "get", "stat", "list", "delete"])
def test_a_wrong_secret_from_the_environment_never_shows_in_any_error(
    operation, s3_output_uri, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    store = open_storage(s3_output_uri)
    (tmp_path / "f").write_bytes(b"x")
    run = {
        "put_stream": lambda: store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x")),
        "put_file": lambda: store.put_file("p/r/s.slot0.pt", tmp_path / "f"),
        "get": lambda: store.get("p/r/s.slot0.pt"),
        "stat": lambda: store.stat("p/r/s.slot0.pt"),
        "list": lambda: store.list(),
        "delete": lambda: store.delete("p/r/s.slot0.pt"),
    }
    if operation == "writer":
        with pytest.raises(StorageError) as caught:
            with store.writer("p/r/s.slot0.pt") as f:
                f.write(b"x")
    else:
        with pytest.raises(StorageError) as caught:
            run[operation]()
    assert "SignatureDoesNotMatch" in str(caught.value) or "HTTP 403" in str(caught.value)
    assert WRONG_SECRET not in _texts(caught.value)
    assert WRONG_SECRET not in repr(store)


@pytest.mark.ceph
def test_an_unknown_access_key_is_named_as_such(s3_output_uri, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "no-such-access-key")
    with pytest.raises(ConfigError, match=r"credentials were refused .*\(InvalidAccessKeyId\)"):
        open_storage(s3_output_uri).check()


def test_no_credentials_at_all_is_a_clear_error(monkeypatch, tmp_path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = open_storage("s3://bucket/p", endpoint_url=f"http://127.0.0.1:{_free_port()}")
    with pytest.raises(
        ConfigError, match="no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile"
    ):
        store.check()


# ------------------------------------------------------------------ bucket and permissions


@pytest.mark.ceph
def test_a_missing_bucket_is_named_with_the_fix(s3_env, ceph_s3) -> None:
    bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    store = open_storage(f"s3://{bucket}/team")
    fix = (
        f"bucket '{bucket}' does not exist at endpoint {ceph_s3.endpoint_url}: "
        f"create it \\(aws s3 mb s3://{bucket}\\) or fix output_uri"
    )
    with pytest.raises(ConfigError, match=fix):
        store.check()
    with pytest.raises(
        StorageError, match=rf"uploading to s3://{bucket}/team/p/r/s\.slot0\.pt failed: {fix}"
    ) as caught:
        store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
    assert caught.value.key == "p/r/s.slot0.pt"


@pytest.mark.ceph
def test_credentials_without_permission_get_access_denied_naming_the_permission(s3_output_uri, ceph_s3) -> None:
    access, secret = ceph_s3.create_user(f"stranger-{uuid.uuid4().hex[:6]}")
    store = S3Storage(
        s3_output_uri, endpoint_url=ceph_s3.endpoint_url, aws_access_key_id=access, aws_secret_access_key=secret
    )
    denied = r"access denied by .* \(AccessDenied on PutObject\): grant the credentials s3:PutObject on s3://"
    with pytest.raises(ConfigError, match=denied) as caught:
        store.check()
    assert secret not in _texts(caught.value)


@pytest.mark.ceph
def test_write_access_without_delete_passes_check_and_hides_the_probe(s3_output_uri, s3_bucket, ceph_s3) -> None:
    import json

    # DESIGN: slots are overwritten, never deleted, so "put + get" must be enough.
    uid = f"writer-{uuid.uuid4().hex[:6]}"
    access, secret = ceph_s3.create_user(uid)
    prefix = s3_output_uri.split("/", 3)[3]
    admin = ceph_s3.client()
    admin.put_bucket_policy(
        Bucket=s3_bucket,
        Policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": [f"arn:aws:iam:::user/{uid}"]},
                        "Action": ["s3:PutObject", "s3:GetObject"],
                        "Resource": [f"arn:aws:s3:::{s3_bucket}/{prefix}/*"],
                    }
                ],
            }
        ),
    )
    try:
        writer = S3Storage(
            s3_output_uri, endpoint_url=ceph_s3.endpoint_url, aws_access_key_id=access, aws_secret_access_key=secret
        )
        writer.check()  # the probe stays: delete was refused, and that is fine
        writer.put_stream("p/r/s.slot0.pt", io.BytesIO(b"v1"))
        writer.put_stream("p/r/s.slot0.pt", io.BytesIO(b"v2"))  # overwrite is all a slot needs
        assert writer.stat("p/r/s.slot0.pt").size == 2
        with pytest.raises(
            StorageError, match=r"AccessDenied on DeleteObject\): grant the credentials s3:DeleteObject"
        ):
            writer.delete("p/r/s.slot0.pt")
    finally:
        admin.delete_bucket_policy(Bucket=s3_bucket)
    assert [s.key for s in open_storage(s3_output_uri).list()] == ["p/r/s.slot0.pt"]


# ------------------------------------------------------------------ the endpoint


@pytest.mark.parametrize("call", ["check", "put_stream", "writer", "get", "stat", "list"])
def test_an_unreachable_endpoint_fails_fast_naming_it(call, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    endpoint = f"http://127.0.0.1:{_free_port()}"
    store = open_storage("s3://bucket/p", endpoint_url=endpoint, max_attempts=2, connect_timeout=1)

    def writer() -> None:
        with store.writer("p/r/s.slot0.pt") as f:
            f.write(b"x")

    run = {
        "check": store.check,
        "put_stream": lambda: store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x")),
        "writer": writer,
        "get": lambda: store.get("p/r/s.slot0.pt"),
        "stat": lambda: store.stat("p/r/s.slot0.pt"),
        "list": lambda: store.list("p/"),
    }
    t0 = time.monotonic()
    expected = ConfigError if call == "check" else StorageError
    fix = rf"cannot reach endpoint {endpoint} \(EndpointConnectionError\): check AWS_ENDPOINT_URL / endpoint_url"
    with pytest.raises(expected, match=fix) as caught:
        run[call]()
    assert time.monotonic() - t0 < 10
    assert "s3://bucket/p" in str(caught.value)
    assert WRONG_SECRET not in _texts(caught.value)


@pytest.mark.ceph
@pytest.mark.parametrize("path", ["put_file", "writer"])
def test_gateway_dying_mid_multipart_upload_keeps_the_previous_object(
    path, s3_output_uri, s3_bucket, ceph_s3, tmp_path
) -> None:
    """radosgw is stopped after a few parts of a 256 MiB upload: the slot's old bytes survive."""
    torch = pytest.importorskip("torch")
    from tracker_saver.save.hashing import HashingWriter

    key = "p/r/model.slot0.pt"
    store = open_storage(
        s3_output_uri,
        multipart_threshold=8 * MiB,
        multipart_chunksize=8 * MiB,
        max_concurrency=4,
        writer_part_size=8 * MiB,
        max_attempts=2,
        connect_timeout=2,
    )
    previous = b"the last good checkpoint " * 40_000
    store.put_stream(key, io.BytesIO(previous))

    def upload() -> None:
        if path == "put_file":
            src = tmp_path / "big.pt"
            src.write_bytes(bytes(range(256)) * (MiB // 256) * 256)  # 256 MiB
            store.put_file(key, src)
        else:  # the saver's path: torch.save -> HashingWriter -> storage.writer
            with store.writer(key) as target:
                torch.save({"w": torch.ones(64 * MiB)}, HashingWriter(target))  # 256 MiB

    error = _fail_mid_upload(store, ceph_s3, upload)
    assert isinstance(error, StorageError), error
    assert f"s3://{s3_bucket}/" in str(error) and key in str(error) and error.key == key
    assert "cannot reach endpoint" in str(error) or "Connection" in str(error)
    assert type(error.__cause__).__module__.startswith(("botocore", "boto3", "urllib3"))

    client = ceph_s3.client()
    # s3transfer tried to abort the upload, but the gateway was down: it is still there ...
    assert len(_uploads(client, s3_bucket, store.prefix)) == 1
    store.check()  # ... until the next call of this storage aborts it
    assert _uploads(client, s3_bucket, store.prefix) == []
    with store.get(key) as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(previous).digest()
    assert [s.key for s in store.list()] == [key]


@pytest.mark.ceph
def test_gateway_dying_mid_upload_during_training_leaves_no_live_record_on_foreign_bytes(
    s3_output_uri, ceph_s3, tmp_path
) -> None:
    """Through a real Checkpoint: epoch 2's 256 MiB save dies mid-multipart; the registry stays true."""
    torch = pytest.importorskip("torch")
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint

    from tracker_saver import RecordState, TrackerSaver, find_models

    saver = TrackerSaver(
        s3_output_uri, project="p", run="r", registry=tmp_path / "r.db",
        storage_options={"max_attempts": 2, "connect_timeout": 2, "max_concurrency": 4},
    )  # fmt: skip
    net = torch.nn.Linear(1024, 64 * 1024, bias=False)  # 256 MiB of weights
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint({"model": net}, saver, n_saved=1))
    trainer.run([0], max_epochs=1)
    (first,) = find_models(project="p", registry=saver.registry)

    error = _fail_mid_upload(saver.storage, ceph_s3, lambda: trainer.run([0], max_epochs=2))
    assert isinstance(error, StorageError), error
    records = find_models(project="p", registry=saver.registry)
    # The upload never reached its commit point: the previous record stays live, and true.
    assert [r.state for r in records] == [RecordState.LIVE, RecordState.FAILED]
    assert [r.id for r in find_models(project="p", live=True, registry=saver.registry)] == [first.id]
    with saver.storage.get(first.key) as f:
        assert hashlib.sha256(f.read()).hexdigest() == first.sha256
    # The multipart upload the outage left (nothing could abort it) goes at the next start-up.
    saver.close()
    again = TrackerSaver(s3_output_uri, project="p", run="r", registry=tmp_path / "r.db")
    assert again.storage.staged() == []
    again.close()
