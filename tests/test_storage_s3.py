"""The S3 storage: the shared contract against a real Ceph RGW, plus what only S3 does."""

from __future__ import annotations

import hashlib
import io
import os
import re
from pathlib import Path

import pytest

from tests.contracts.storage import StorageContract
from tracker_saver.core.errors import ConfigError, StorageError, TrackerSaverError
from tracker_saver.storage import open_storage

boto3 = pytest.importorskip("boto3")

import botocore.exceptions  # noqa: E402

from tracker_saver.core.outage import OutageError  # noqa: E402
from tracker_saver.storage.s3 import KNOWN_OPTIONS, S3Storage  # noqa: E402  (needs boto3)
from tracker_saver.storage.s3 import options as options_mod  # noqa: E402
from tracker_saver.storage.s3 import progress as progress_mod  # noqa: E402
from tracker_saver.storage.s3 import storage as storage_mod  # noqa: E402
from tracker_saver.storage.s3.parts import Segments  # noqa: E402
from tracker_saver.storage.s3.progress import Progress  # noqa: E402
from tracker_saver.storage.s3.uploads import CommitAttempts  # noqa: E402

MiB = 1024 * 1024
SECRET = "s3cr3t-never-shown-Zq81xVb"
TOKEN = "t0ken-never-shown-Hk29aPl"


def _chain(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


# ------------------------------------------------------------------ the contract, on Ceph


@pytest.mark.ceph
class TestS3Storage(StorageContract):
    @pytest.fixture(params=["streamed", "spooled"])
    def storage(self, request, s3_output_uri):
        # The saver's writer streams by default; the spooled writer is the base class's.
        return open_storage(s3_output_uri, stream_writes=request.param == "streamed")


# ------------------------------------------------------------------ configuration (no server)


@pytest.mark.parametrize("uri", ["s3://", "s3:///x", "S3://", "s3:///"])
def test_an_uri_without_bucket_is_refused_with_the_fix(uri, offline_env) -> None:
    with pytest.raises(ConfigError, match=r"has no bucket: use s3://BUCKET/PREFIX"):
        open_storage(uri)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [("s3://ckpts", "s3://ckpts"), ("s3://ckpts/", "s3://ckpts"), ("s3://ckpts/a/b/", "s3://ckpts/a/b")],
)
def test_uri_is_bucket_and_prefix_without_trailing_slash(uri, expected, offline_env) -> None:
    store = open_storage(uri, endpoint_url="http://127.0.0.1:9")
    assert store.uri == expected
    assert store.url("p/r/s.slot0.pt") == expected + "/p/r/s.slot0.pt"


@pytest.mark.parametrize("uri", ["s3://bkt/a/../c", "s3://bkt/a//c", "s3://bkt/./c", "s3://bkt/a\\c"])
def test_an_unsafe_prefix_is_refused(uri, offline_env) -> None:
    with pytest.raises(ConfigError, match="unsafe prefix"):
        open_storage(uri)


def test_credentials_in_the_uri_are_refused_without_echoing_them(offline_env) -> None:
    with pytest.raises(ConfigError, match="must not contain credentials") as caught:
        open_storage(f"s3://AKIAEXAMPLE:{SECRET}@bucket/prefix")
    assert SECRET not in str(caught.value)


def test_an_unknown_option_lists_the_known_ones(offline_env) -> None:
    unknown = r"unknown storage option 'multipart_chunk_size' for s3://b/p: use endpoint_url, "
    with pytest.raises(ConfigError, match=unknown) as caught:
        open_storage("s3://b/p", multipart_chunk_size=8 * MiB)
    assert all(name in str(caught.value) for name in KNOWN_OPTIONS)


@pytest.mark.parametrize(
    ("option", "value", "match"),
    [
        ("multipart_chunksize", 1024, "multipart_chunksize must be an int of at least 5242880"),
        ("multipart_threshold", 0, "multipart_threshold must be an int of at least 1"),
        ("max_concurrency", True, "max_concurrency must be an int"),
        ("max_attempts", 0, "max_attempts must be an int of at least 1"),
        ("retry_mode", "legacy", "retry_mode must be one of 'standard', 'adaptive'"),
        ("addressing_style", "dns", "addressing_style must be one of 'auto', 'path', 'virtual'"),
        ("connect_timeout", -1, "connect_timeout must be a positive number of seconds"),
        ("request_checksum_calculation", "never", "request_checksum_calculation must be one of"),
        ("spool_bytes", -1, "spool_bytes must be an int of at least 0"),
        ("progress", "yes", "progress must be None, True or False"),
        ("endpoint_url", "127.0.0.1:7480", "endpoint_url '127.0.0.1:7480' is not an http"),
    ],
)
def test_a_bad_option_value_names_the_option_and_the_rule(option, value, match, offline_env) -> None:
    with pytest.raises(ConfigError, match=match):
        open_storage("s3://b/p", **{option: value})


def test_credentials_given_by_halves_are_refused_without_echoing_them(offline_env) -> None:
    with pytest.raises(ConfigError, match="go together") as caught:
        S3Storage("s3://b/p", aws_secret_access_key=SECRET)
    assert SECRET not in str(caught.value)


def test_an_unknown_profile_is_a_config_error_naming_it(offline_env) -> None:
    with pytest.raises(ConfigError, match="AWS profile 'no-such-profile' .* is not in ~/.aws/config"):
        S3Storage("s3://b/p", profile="no-such-profile")


def test_credentials_never_appear_in_repr_or_str(offline_env) -> None:
    store = S3Storage(
        "s3://b/p",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIAEXAMPLE",
        aws_secret_access_key=SECRET,
        aws_session_token=TOKEN,
    )
    for text in (repr(store), str(store), repr(vars(store))):
        assert SECRET not in text and TOKEN not in text
    assert repr(store) == "S3Storage('s3://b/p', endpoint_url='http://127.0.0.1:9')"


def test_an_endpoint_with_userinfo_is_shown_without_it(offline_env) -> None:
    store = S3Storage("s3://b/p", endpoint_url=f"http://user:{SECRET}@127.0.0.1:9")
    assert SECRET not in repr(store) and store.endpoint == "http://127.0.0.1:9"


def test_a_custom_endpoint_uses_path_style_and_aws_is_left_to_botocore(offline_env) -> None:
    assert S3Storage("s3://b", endpoint_url="http://ceph.internal:7480")._client.meta.config.s3 == {
        "addressing_style": "path"
    }
    assert not (S3Storage("s3://b", region_name="eu-west-1")._client.meta.config.s3 or {}).get("addressing_style")
    virtual = S3Storage("s3://b", endpoint_url="http://ceph.internal:7480", addressing_style="virtual")
    assert virtual._client.meta.config.s3 == {"addressing_style": "virtual"}


def test_retries_are_botocore_standard_mode_with_max_attempts_from_option_or_env(offline_env, monkeypatch) -> None:
    store = S3Storage("s3://b", endpoint_url="http://127.0.0.1:9", max_attempts=7)
    assert store._client.meta.config.retries == {"mode": "standard", "total_max_attempts": 7}
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    store = S3Storage("s3://b", endpoint_url="http://127.0.0.1:9")
    assert store._client.meta.config.retries == {"mode": "adaptive", "total_max_attempts": 4}


def test_retry_mode_comes_from_the_profile_when_not_given(offline_env, monkeypatch, tmp_path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile ceph]\nretry_mode = adaptive\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    store = S3Storage("s3://b", endpoint_url="http://127.0.0.1:9", profile="ceph")
    assert store._client.meta.config.retries["mode"] == "adaptive"
    store = S3Storage("s3://b", endpoint_url="http://127.0.0.1:9", profile="ceph", retry_mode="standard")
    assert store._client.meta.config.retries["mode"] == "standard"


def test_every_client_loads_the_s3_model_through_the_one_shared_loader(offline_env, monkeypatch) -> None:
    # Guards the two boto3/botocore calls this relies on (boto3.Session(botocore_session=...) and
    # botocore's undocumented Session.register_component): if an upgrade breaks either, every
    # storage would parse the large S3 service model again, and this test fails.
    import botocore.loaders

    spy = botocore.loaders.create_loader()
    real = spy.load_service_model
    loaded: list[tuple[str, str]] = []

    def load_service_model(service_name, type_name, api_version=None):
        loaded.append((service_name, type_name))
        return real(service_name, type_name, api_version)

    spy.load_service_model = load_service_model
    monkeypatch.setattr(options_mod, "_LOADER", spy)
    for _ in range(2):
        S3Storage("s3://b", endpoint_url="http://127.0.0.1:9")
    assert loaded.count(("s3", "service-2")) == 2  # each client asks, the loader's cache answers


def test_known_options_are_the_constructor_keywords_and_all_documented() -> None:
    assert KNOWN_OPTIONS == options_mod.option_names(S3Storage.__init__)
    assert KNOWN_OPTIONS == options_mod.option_names(options_mod.check_options)
    assert KNOWN_OPTIONS[0] == "endpoint_url" and "progress" in KNOWN_OPTIONS and "uri" not in KNOWN_OPTIONS
    docs = (Path(__file__).resolve().parents[1] / "docs" / "s3.md").read_text()
    table = {
        name
        for line in docs.splitlines()
        if line.startswith("| `")
        for name in re.findall(r"`(\w+)`", line.split("|")[1])
    }
    assert set(KNOWN_OPTIONS) <= table


def test_endpoint_comes_from_aws_endpoint_url_unless_given(offline_env, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9001")
    assert S3Storage("s3://b").endpoint == "http://127.0.0.1:9001"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9002")
    assert S3Storage("s3://b").endpoint == "http://127.0.0.1:9002"
    assert S3Storage("s3://b", endpoint_url="http://127.0.0.1:9003").endpoint == "http://127.0.0.1:9003"


# ------------------------------------------------------------------ pieces (no server)


def test_a_part_body_reads_at_most_what_is_asked_and_seeks_back_for_a_retry() -> None:
    # botocore reads a body once to sign it (1 MiB reads), then again to send it (16 KiB reads),
    # and seeks to 0 to retry: every pass must see the same bytes, in order, none copied twice.
    pieces = [memoryview(b"abc"), memoryview(b""), memoryview(b"defghijklmnopq"), memoryview(b"r" * 30)]
    body = Segments(pieces)
    assert len(body) == 47
    got = list(iter(lambda: body.read(10), b""))
    assert [len(g) for g in got] == [3, 10, 4, 10, 10, 10]  # never past a segment, never more than asked
    assert b"".join(bytes(g) for g in got) == b"abcdefghijklmnopq" + b"r" * 30
    assert body.tell() == 47 and body.read(10) == b""
    assert body.seek(0) == 0 and bytes(body.read()) == b"abc"
    assert body.seek(-5, 2) == 42 and bytes(body.read(100)) == b"r" * 5
    assert body.seek(5) == 5 and bytes(body.read(3)) == b"fgh"


def test_progress_bar_only_when_asked_or_on_a_terminal(monkeypatch, capsys) -> None:
    monkeypatch.setattr(progress_mod, "PROGRESS_BYTES", 100)
    quiet = Progress("upload k", 1000, None)  # stderr is captured, not a terminal
    quiet(1000)
    quiet.close()
    assert capsys.readouterr().err == ""
    small = Progress("upload k", 10, True)
    small(10)
    small.close()
    assert capsys.readouterr().err == ""
    shown = Progress("upload k", 1000, True)
    for _ in range(10):
        shown(100)
    shown.close()
    assert "upload k" in capsys.readouterr().err


# ------------------------------------------------------------------ S3 behaviour, on Ceph


@pytest.mark.ceph
def test_endpoint_and_keys_from_the_environment_reach_the_gateway(s3_output_uri, ceph_s3) -> None:
    store = open_storage(s3_output_uri)
    assert store.endpoint == ceph_s3.endpoint_url
    store.check()


@pytest.mark.ceph
def test_an_explicit_endpoint_wins_over_aws_endpoint_url(s3_output_uri, ceph_s3, monkeypatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    store = open_storage(s3_output_uri, endpoint_url=ceph_s3.endpoint_url)
    store.check()
    store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
    assert store.stat("p/r/s.slot0.pt").size == 1


@pytest.mark.ceph
def test_explicit_keys_work_without_any_environment(s3_bucket, ceph_s3, offline_env) -> None:
    store = open_storage(f"s3://{s3_bucket}/explicit", **ceph_s3.storage_options())
    store.check()


@pytest.mark.ceph
@pytest.mark.parametrize("how", ["put_file", "writer"])
def test_a_large_object_goes_up_in_parts_and_leaves_no_multipart_upload(
    how, s3_output_uri, ceph_s3, s3_bucket, tmp_path
) -> None:
    store = open_storage(
        s3_output_uri, multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB, writer_part_size=8 * MiB
    )
    data = os.urandom(20 * MiB)
    if how == "put_file":
        (tmp_path / "ckpt.pt").write_bytes(data)
        store.put_file("p/r/s.slot0.pt", tmp_path / "ckpt.pt")
    else:
        with store.writer("p/r/s.slot0.pt") as f:
            for i in range(0, len(data), 3 * MiB):  # writes that do not line up with parts
                f.write(data[i : i + 3 * MiB])
    client = ceph_s3.client()
    head = client.head_object(Bucket=s3_bucket, Key=f"{store.prefix}/p/r/s.slot0.pt")
    assert head["ETag"].strip('"').endswith("-3")  # 8 + 8 + 4 MiB
    assert head["ContentLength"] == len(data)
    with store.get("p/r/s.slot0.pt") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    assert store.staged() == []
    assert client.list_multipart_uploads(Bucket=s3_bucket, Prefix=store.prefix + "/").get("Uploads", []) == []


@pytest.mark.ceph
def test_a_writer_failing_in_the_middle_of_a_multipart_upload_aborts_it(s3_output_uri, ceph_s3, s3_bucket) -> None:
    store = open_storage(s3_output_uri, writer_part_size=8 * MiB)
    store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"previous"))

    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted):
        with store.writer("p/r/s.slot0.pt") as f:
            f.write(os.urandom(20 * MiB))  # two parts are on their way
            raise Interrupted()
    with store.get("p/r/s.slot0.pt") as f:
        assert f.read() == b"previous"
    assert store.staged() == []
    assert ceph_s3.client().list_multipart_uploads(Bucket=s3_bucket, Prefix=store.prefix + "/").get("Uploads", []) == []


@pytest.mark.ceph
def test_a_checkpoint_through_the_pipeline_writer_keeps_its_sha256(s3_output_uri) -> None:
    torch = pytest.importorskip("torch")
    from tracker_saver.save.hashing import HashingWriter

    store = open_storage(s3_output_uri, writer_part_size=8 * MiB)
    state = {"w": torch.arange(6 * MiB, dtype=torch.float32), "step": 3}
    with store.writer("p/r/model.slot0.pt") as target:
        hashing = HashingWriter(target)
        torch.save(state, hashing)
    assert store.stat("p/r/model.slot0.pt").size == hashing.size
    with store.get("p/r/model.slot0.pt") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == hashing.sha256
    assert torch.equal(torch.load(io.BytesIO(data))["w"], state["w"])


@pytest.mark.ceph
@pytest.mark.parametrize("stable", [True, False], ids=["stable-memory", "copied"])
def test_the_writer_sends_stable_tensor_memory_without_copying_and_bounds_its_copies(
    s3_output_uri, ceph_s3, s3_bucket, stable
) -> None:
    """A checkpoint's CPU storages go up from where they are; other bytes are copied, at most
    ``writer_concurrency + 1`` parts of them at once. Either way the object is torch.save's bytes."""
    import tracemalloc

    torch = pytest.importorskip("torch")
    from tracker_saver.save.hashing import HashingWriter
    from tracker_saver.save.memory import StableMemory

    part, concurrency = 8 * MiB, 2
    store = open_storage(s3_output_uri, writer_part_size=part, writer_concurrency=concurrency)
    state = {f"w{i}": torch.full((5 * MiB // 4,), float(i)) for i in range(8)}  # 40 MiB and headers: 6 parts
    memory = StableMemory.of(state) if stable else None
    tracemalloc.start()
    try:
        with store.writer("p/r/model.slot0.pt", stable=memory) as target:
            hashing = HashingWriter(target, stable=memory)
            torch.save(state, hashing)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if stable:
        assert peak < 2 * MiB, f"{peak / MiB:.1f} MiB copied"
    else:
        assert 2 * part <= peak <= (concurrency + 1) * part + 2 * MiB, f"{peak / MiB:.1f} MiB copied"
    head = ceph_s3.client().head_object(Bucket=s3_bucket, Key=f"{store.prefix}/p/r/model.slot0.pt")
    assert head["ETag"].strip('"').endswith(f"-{-(-hashing.size // part)}")
    reference = io.BytesIO()
    torch.save(state, HashingWriter(reference))  # the same stream layout: not seekable, nameless
    with store.get("p/r/model.slot0.pt") as f:
        data = f.read()
    assert data == reference.getvalue() and hashlib.sha256(data).hexdigest() == hashing.sha256
    loaded = torch.load(io.BytesIO(data))
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert store.staged() == []


@pytest.mark.ceph
def test_check_leaves_no_visible_object(s3_output_uri, ceph_s3, s3_bucket) -> None:
    store = open_storage(s3_output_uri)
    store.check()
    assert store.list() == []
    assert ceph_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix=store.prefix + "/").get("KeyCount") == 0


@pytest.mark.ceph
def test_list_pages_through_many_keys_relative_to_the_root(s3_output_uri, ceph_s3, s3_bucket, monkeypatch) -> None:
    monkeypatch.setattr(storage_mod, "LIST_PAGE_SIZE", 2)
    store = open_storage(s3_output_uri)
    keys = [f"p/r/s.slot{k}.pt" for k in range(5)]
    for key in keys:
        store.put_stream(key, io.BytesIO(b"12"))
    # Neither a console "folder" marker nor a sibling prefix is an object of this root.
    client = ceph_s3.client()
    client.put_object(Bucket=s3_bucket, Key=f"{store.prefix}/p/", Body=b"")
    client.put_object(Bucket=s3_bucket, Key=f"{store.prefix}-sibling/p/r/x.pt", Body=b"1")
    assert [(s.key, s.size) for s in store.list()] == [(k, 2) for k in keys]
    assert [s.key for s in store.list("p/r/s.slot3")] == ["p/r/s.slot3.pt"]


@pytest.mark.ceph
def test_a_bucket_without_prefix_is_a_root_too(ceph_s3, s3_env) -> None:
    import uuid

    bucket = f"ts-root-{uuid.uuid4().hex[:10]}"
    ceph_s3.client().create_bucket(Bucket=bucket)
    try:
        store = open_storage(f"s3://{bucket}")
        store.check()
        store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
        assert [s.key for s in store.list()] == ["p/r/s.slot0.pt"]
        assert store.url("p/r/s.slot0.pt") == f"s3://{bucket}/p/r/s.slot0.pt"
        store.delete("p/r/s.slot0.pt")
    finally:
        ceph_s3.client().delete_bucket(Bucket=bucket)


@pytest.mark.ceph
def test_every_error_carries_the_cause_and_is_in_the_tree(s3_env) -> None:
    import uuid

    store = open_storage(f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/p")
    with pytest.raises(TrackerSaverError) as caught:
        store.put_stream("p/r/s.slot0.pt", io.BytesIO(b"x"))
    assert isinstance(caught.value, StorageError) and caught.value.key == "p/r/s.slot0.pt"
    assert type(caught.value.__cause__).__module__.startswith(("botocore", "boto3"))


@pytest.mark.parametrize(
    ("outcome", "reached"),
    [
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), False),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"), False),
        (OutageError("no answer for 7.0 s"), False),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), True),
        (botocore.exceptions.ConnectionClosedError(endpoint_url="http://127.0.0.1:1"), True),
        (None, True),  # an answer, even an error status: the server saw the request
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, bool) else str(v),
)
def test_a_commit_request_reached_the_store_unless_every_attempt_proves_it_was_not_sent(
    outcome: BaseException | None, reached: bool
) -> None:
    """Only failures that happen before a byte is sent (refused, connect timeout, the outage
    clock) prove that a PUT / CompleteMultipartUpload left the key as it was."""
    attempts = CommitAttempts()
    attempts.ended(botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    attempts.ended(outcome)
    assert attempts.may_have_reached() is reached
