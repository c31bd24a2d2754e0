"""S3 storage through boto3 (AWS, Ceph RGW, MinIO): each write commits as one PUT or CompleteMultipartUpload.

The commit point is S3's own: a ``PutObject`` or ``CompleteMultipartUpload`` that returned
replaces the key atomically, and a reader sees the previous object until then (DESIGN
invariants 2 and 6). A failed multipart upload is aborted, so it leaves neither an object nor
billable parts; if the abort itself cannot reach the server, this storage retries it on its
next call.

Every botocore/boto3 exception is mapped to the error tree in exactly one place,
:meth:`S3Storage._boundary`, which names the bucket, the key, the endpoint and the fix, and
never the credentials.

Configuration follows boto3 (explicit option > environment / profile > default): the
credential chain, ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``, ``AWS_PROFILE``,
``AWS_MAX_ATTEMPTS``, ``AWS_RETRY_MODE``. See ``docs/s3.md``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO
from urllib.parse import urlsplit, urlunsplit

import boto3
import boto3.exceptions
import botocore.exceptions
import s3transfer.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from tracker_saver.errors import ConfigError, StorageError, TrackerSaverError
from tracker_saver.naming import check_key
from tracker_saver.storage.base import DEFAULT_SPOOL_BYTES, ObjectStat, Storage

__all__ = ["S3Storage"]

log = logging.getLogger(__name__)

MiB = 1024 * 1024

# The transfer defaults are boto3's own: put_file is then exactly boto3's upload_file, and
# measurements with 16 MiB parts were no faster beyond the noise (benchmarks/bench_s3_upload.py).
#: Objects at least this large go up as a multipart upload (parts in parallel).
DEFAULT_MULTIPART_THRESHOLD = 8 * MiB
#: Part size. s3transfer raises it on its own for objects that would need more than 10,000 parts.
DEFAULT_MULTIPART_CHUNKSIZE = 8 * MiB
#: Parts in flight at once, per transfer.
DEFAULT_MAX_CONCURRENCY = 10
#: Transfers at least this large show a tqdm bar, when stderr is a terminal.
PROGRESS_BYTES = 64 * MiB
#: ``check()`` writes this empty object under the prefix to prove write access. ``list`` hides it.
PROBE_NAME = ".tracker-saver-check"
#: Keys per list request (S3's maximum; tests lower it to exercise pagination).
LIST_PAGE_SIZE = 1000
#: The streaming writer hands data to the uploader in blocks of this size (fewer, larger
#: handoffs than torch's many small writes; a large tensor is split, never copied whole).
_PIPE_BLOCK = 1 * MiB

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_ADDRESSING_STYLES = ("auto", "path", "virtual")
_RETRY_MODES = ("standard", "adaptive")
_CHECKSUM_MODES = ("when_supported", "when_required")

#: Error codes that mean "these credentials are not accepted", whatever the permissions.
_CREDENTIAL_CODES = frozenset(
    {
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "InvalidToken",
        "ExpiredToken",
        "TokenRefreshRequired",
        "InvalidClientTokenId",
        "AuthorizationHeaderMalformed",
        "RequestTimeTooSkewed",
    }
)
#: botocore exceptions that mean "no HTTP answer came back".
_UNREACHABLE = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ProxyConnectionError,
)


def _redact_url(url: str) -> str:
    """``url`` without a ``user:password@`` part (endpoints must never leak credentials)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ConfigError(f"storage option {name} must be an int of at least {minimum}{upper}, got {value!r}")
    return value


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> str | None:
    if value is None:
        return None
    if value not in choices:
        raise ConfigError(f"storage option {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def _check_str(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        # Never echo the value: it may be a credential.
        raise ConfigError(f"storage option {name} must be a non-empty string, got a {type(value).__name__}")
    return value


def _check_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"storage option {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` into ``(bucket, prefix)``; the prefix has no outer slashes.

    Examples:
        >>> parse_s3_uri("s3://ckpts/team/mnist/")
        ('ckpts', 'team/mnist')
        >>> parse_s3_uri("s3://ckpts")
        ('ckpts', '')
    """
    if not isinstance(uri, str) or uri[:5].lower() != "s3://":
        raise ConfigError(f"output_uri {uri!r} is not an S3 URI: use s3://BUCKET/PREFIX")
    bucket, _, prefix = uri[5:].partition("/")
    if "@" in bucket:
        # Do not echo the URI: the part before '@' is presumably a key and secret.
        raise ConfigError(
            "output_uri must not contain credentials (user:secret@ before the bucket): use "
            "s3://BUCKET/PREFIX and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an instance role"
        )
    if not bucket:
        raise ConfigError(f"output_uri {uri!r} has no bucket: use s3://BUCKET/PREFIX")
    if not _BUCKET.fullmatch(bucket):
        raise ConfigError(
            f"output_uri {uri!r} has the invalid bucket name {bucket!r}: use 1-255 letters, digits, "
            "'.', '-' or '_' (S3 itself wants 3-63 lowercase letters, digits, '.' or '-')"
        )
    prefix = prefix.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except ConfigError:
            raise ConfigError(
                f"output_uri {uri!r} has an unsafe prefix {prefix!r}: use s3://BUCKET/PREFIX where PREFIX "
                "has plain segments (letters, digits, . _ - = +, no '..', no '//')"
            ) from None
    return bucket, prefix


class _Progress:
    """An s3transfer callback that shows a tqdm bar once a transfer is large enough.

    The bar appears only when stderr is a terminal (never in CI logs or files) and the transfer
    is known or seen to reach ``PROGRESS_BYTES``. s3transfer calls it from its worker threads.
    """

    def __init__(self, desc: str, total: int | None, enabled: bool | None) -> None:
        self._desc = desc
        self._total = total
        self._enabled = sys.stderr.isatty() if enabled is None else enabled
        self._seen = 0
        self._bar: Any = None
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._seen += nbytes
            if self._bar is None:
                if max(self._seen, self._total or 0) < PROGRESS_BYTES:
                    return
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self._total, desc=self._desc, unit="B", unit_scale=True, unit_divisor=1024,
                    file=sys.stderr, leave=False, initial=self._seen - nbytes,
                )
            self._bar.update(nbytes)

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


class _UploadAborted(Exception):
    """Raised into s3transfer by the pipe's reader when the writer's body failed."""


class _Pipe:
    """A bounded byte pipe: the training thread writes, the upload thread reads.

    ``write`` blocks while ``limit`` bytes wait for the uploader, so memory stays bounded
    whatever the checkpoint size. ``read(n)`` returns exactly ``n`` bytes until the end, as
    s3transfer expects of a file (a short read would end a part early).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._pending = bytearray()
        self._closed = False
        self._aborted = False
        self._failure: BaseException | None = None
        self._cond = threading.Condition()

    # -- the writer side (training thread) -------------------------------------------------
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        size = view.nbytes
        start = 0
        if self._pending:
            start = min(size, _PIPE_BLOCK - len(self._pending))
            self._pending += view[:start]
            if len(self._pending) >= _PIPE_BLOCK:
                self._put(bytes(self._pending))
                self._pending.clear()
        while size - start >= _PIPE_BLOCK:
            self._put(bytes(view[start : start + _PIPE_BLOCK]))
            start += _PIPE_BLOCK
        if start < size:
            self._pending += view[start:]
        return size

    def flush(self) -> None:
        pass

    def _put(self, chunk: bytes) -> None:
        with self._cond:
            while self._buffered >= self._limit and self._failure is None:
                self._cond.wait()
            if self._failure is not None:
                # The uploader failed (e.g. the endpoint went away): stop serializing now. The
                # writer context manager raises the mapped StorageError in place of this one.
                raise self._failure
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            self._cond.notify_all()

    def close(self) -> None:
        """The end of the data: flush what is pending and let the reader see EOF."""
        if self._pending:
            self._put(bytes(self._pending))
            self._pending.clear()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def abort(self) -> None:
        """The writer's body failed: make the reader raise, so s3transfer aborts the upload."""
        with self._cond:
            self._aborted = True
            self._cond.notify_all()

    def fail(self, exc: BaseException) -> None:
        """The uploader failed: make the writer raise ``exc`` on its next block."""
        with self._cond:
            self._failure = exc
            self._chunks.clear()
            self._buffered = 0
            self._cond.notify_all()

    # -- the reader side (s3transfer's submission thread) ----------------------------------
    def readable(self) -> bool:
        return True

    def read(self, amount: int | None = -1) -> bytes:
        with self._cond:
            while True:
                if self._aborted:
                    raise _UploadAborted("the checkpoint writer failed; upload abandoned")
                if self._closed or (amount is not None and amount >= 0 and self._buffered >= amount):
                    break
                self._cond.wait()
            if amount is None or amount < 0 or amount >= self._buffered:
                out = b"".join(self._chunks)
                self._chunks.clear()
            else:
                parts: list[bytes] = []
                need = amount
                while need:
                    chunk = self._chunks.popleft()
                    if len(chunk) > need:
                        parts.append(chunk[:need])
                        self._chunks.appendleft(chunk[need:])
                        need = 0
                    else:
                        parts.append(chunk)
                        need -= len(chunk)
                out = b"".join(parts)
            self._buffered -= len(out)
            self._cond.notify_all()
            return out


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``, through boto3.

    Args:
        uri: ``s3://BUCKET`` or ``s3://BUCKET/PREFIX``.
        endpoint_url: the S3 endpoint (Ceph RGW, MinIO); default: boto3's own resolution,
            i.e. ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's
            ``endpoint_url``, else AWS.
        region_name: the signing region; default: ``AWS_DEFAULT_REGION``/profile, else
            ``us-east-1``.
        profile: a profile of ``~/.aws/config``; default: ``AWS_PROFILE``, else ``default``.
        addressing_style: ``"path"`` (Ceph, MinIO), ``"virtual"`` or ``"auto"``. Default:
            ``"path"`` for any endpoint that is not AWS, botocore's choice on AWS.
        aws_access_key_id, aws_secret_access_key, aws_session_token: explicit credentials;
            default: boto3's credential chain (environment, profile, instance role).
        multipart_threshold: objects of at least this many bytes go up as a multipart upload.
        multipart_chunksize: part size in bytes (5 MiB to 5 GiB).
        max_concurrency: parts in flight per transfer.
        retry_mode: botocore's ``"standard"`` (default) or ``"adaptive"``.
        max_attempts: attempts per request including the first; default: ``AWS_MAX_ATTEMPTS``,
            else botocore's (3).
        connect_timeout, read_timeout: seconds; default botocore's (60).
        request_checksum_calculation: ``"when_required"`` (default here, unless
            ``AWS_REQUEST_CHECKSUM_CALCULATION`` is set) or botocore's ``"when_supported"``.
            Our own sha256, verified on every load, makes botocore's CRC32 redundant CPU work.
        spool_bytes: ``get`` keeps a downloaded object in memory up to this size, then spills
            it to a temp file; with ``stream_writes=False`` the same holds for ``writer``.
        stream_writes: ``writer`` streams to S3 while the caller writes (default), instead
            of spooling the whole object first.
        progress: show a tqdm bar for transfers of at least 64 MiB: ``None`` (default) when
            stderr is a terminal, ``True`` always, ``False`` never.

    Raises:
        ConfigError: for a bad URI or option, an unknown option, an unknown profile, or
            credentials given by halves. The S3 server is first contacted by :meth:`check`
            (boto3 may resolve credentials before, e.g. from instance metadata).

    Examples:
        >>> store = S3Storage("s3://ckpts/team/mnist", endpoint_url="http://127.0.0.1:7480")
        >>> store.url("p/r/best_model.slot0.pt")
        's3://ckpts/team/mnist/p/r/best_model.slot0.pt'
        >>> S3Storage("s3://ckpts", multipart_chunk_size=8 << 20)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tracker_saver.errors.ConfigError: unknown storage option 'multipart_chunk_size' for s3://ckpts: use endpoint_url, ...
    """

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
        multipart_chunksize: int = DEFAULT_MULTIPART_CHUNKSIZE,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        retry_mode: str | None = None,
        max_attempts: int | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        request_checksum_calculation: str | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        stream_writes: bool = True,
        progress: bool | None = None,
        **unknown: Any,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        if unknown:
            raise ConfigError(
                f"unknown storage option {', '.join(map(repr, sorted(unknown)))} for {self.uri}: "
                f"use {', '.join(KNOWN_OPTIONS)}"
            )
        endpoint_url = _check_str("endpoint_url", endpoint_url)
        if endpoint_url is not None and urlsplit(endpoint_url).scheme not in ("http", "https"):
            raise ConfigError(
                f"storage option endpoint_url {_redact_url(endpoint_url)!r} is not an http(s) URL: "
                "use e.g. http://127.0.0.1:7480"
            )
        region_name = _check_str("region_name", region_name)
        profile = _check_str("profile", profile)
        addressing_style = _check_choice("addressing_style", addressing_style, _ADDRESSING_STYLES)
        key_id = _check_str("aws_access_key_id", aws_access_key_id)
        secret = _check_str("aws_secret_access_key", aws_secret_access_key)
        token = _check_str("aws_session_token", aws_session_token)
        if (key_id is None) != (secret is None) or (token is not None and key_id is None):
            raise ConfigError(
                "storage options aws_access_key_id and aws_secret_access_key go together "
                "(aws_session_token needs both): pass both, or neither to use boto3's credential chain"
            )
        self.multipart_threshold = _check_int("multipart_threshold", multipart_threshold, 1)
        self.multipart_chunksize = _check_int("multipart_chunksize", multipart_chunksize, 5 * MiB, 5 * 1024 * MiB)
        self.max_concurrency = _check_int("max_concurrency", max_concurrency, 1, 1000)
        retry_mode = _check_choice("retry_mode", retry_mode, _RETRY_MODES)
        if max_attempts is not None:
            _check_int("max_attempts", max_attempts, 1, 100)
        connect_timeout = _check_seconds("connect_timeout", connect_timeout)
        read_timeout = _check_seconds("read_timeout", read_timeout)
        checksums = _check_choice("request_checksum_calculation", request_checksum_calculation, _CHECKSUM_MODES)
        self.spool_bytes = _check_int("spool_bytes", spool_bytes, 0)
        if not isinstance(stream_writes, bool):
            raise ConfigError(f"storage option stream_writes must be True or False, got {stream_writes!r}")
        self.stream_writes = stream_writes
        if progress is not None and not isinstance(progress, bool):
            raise ConfigError(f"storage option progress must be None, True or False, got {progress!r}")
        self.progress = progress

        try:
            self._session = boto3.Session(
                aws_access_key_id=key_id,
                aws_secret_access_key=secret,
                aws_session_token=token,
                region_name=region_name,
                profile_name=profile,
            )
            # The S3 service model is a large JSON file: load it once per process, not per client.
            self._session._session.register_component("data_loader", _shared_loader())
        except botocore.exceptions.ProfileNotFound as exc:
            raise ConfigError(
                f"AWS profile {profile or os.environ.get('AWS_PROFILE')!r} for {self.uri} is not in "
                "~/.aws/config or ~/.aws/credentials: fix storage option profile / AWS_PROFILE"
            ) from exc
        # botocore resolves "legacy" when nothing is configured in old versions; we want at least
        # "standard" (retries throttling and connection errors with backoff). No retry loop here.
        if retry_mode is None:
            configured = self._session._session.get_config_variable("retry_mode")
            retry_mode = configured if configured in _RETRY_MODES else "standard"
        retries: dict[str, Any] = {"mode": retry_mode}
        if max_attempts is not None:
            retries["total_max_attempts"] = max_attempts  # like AWS_MAX_ATTEMPTS: the first try counts
        config_kwargs: dict[str, Any] = {"retries": retries}
        if connect_timeout is not None:
            config_kwargs["connect_timeout"] = connect_timeout
        if read_timeout is not None:
            config_kwargs["read_timeout"] = read_timeout
        if checksums is None and not os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION"):
            # The saver hashes every byte itself (sha256, verified on load); botocore's CRC32
            # on top cost the streamed 512 MiB save ~6 % throughput on 2 cores (docs/s3.md).
            checksums = "when_required"
        if checksums is not None:
            config_kwargs["request_checksum_calculation"] = checksums
            config_kwargs["response_checksum_validation"] = checksums

        if addressing_style is None and endpoint_url is not None and not _is_aws(endpoint_url):
            addressing_style = "path"
        client = self._make_client(endpoint_url, config_kwargs, addressing_style)
        if addressing_style is None and not _is_aws(client.meta.endpoint_url):
            # Ceph and MinIO serve buckets under the path unless configured with a DNS name.
            # Recent botocore already does this for custom endpoints; older ones did not.
            client = self._make_client(endpoint_url, config_kwargs, "path")
        self._client = client
        self.endpoint = _redact_url(client.meta.endpoint_url)
        self._transfer_config = TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            max_concurrency=self.max_concurrency,
            use_threads=True,
        )
        # Multipart uploads this storage started and that are neither completed nor aborted,
        # upload id -> S3 key; see _forget_uploads and _abort_leftovers.
        self._uploads: dict[str, str] = {}
        self._leftovers: dict[str, str] = {}
        self._uploads_lock = threading.Lock()
        # S3 key -> the hook to run at that key's commit point (see writer).
        self._commit_hooks: dict[str, Callable[[], None]] = {}
        events = self._client.meta.events
        events.register("after-call.s3.CreateMultipartUpload", self._on_multipart_created)
        events.register("before-parameter-build.s3.PutObject", self._on_commit)
        events.register("before-parameter-build.s3.CompleteMultipartUpload", self._on_commit)

    def _make_client(self, endpoint_url: str | None, config_kwargs: dict[str, Any], style: str | None) -> Any:
        kwargs = dict(config_kwargs)
        if style is not None:
            kwargs["s3"] = {"addressing_style": style}
        try:
            return self._session.client("s3", endpoint_url=endpoint_url, config=Config(**kwargs))
        except botocore.exceptions.PartialCredentialsError as exc:
            raise ConfigError(
                f"incomplete AWS credentials for {self.uri} ({exc.kwargs.get('cred_var')} is missing in "
                f"{exc.kwargs.get('provider')}): set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither"
            ) from exc
        except (ValueError, botocore.exceptions.BotoCoreError) as exc:
            text = str(exc)
            if endpoint_url:
                text = text.replace(endpoint_url, _redact_url(endpoint_url))
            raise ConfigError(f"cannot configure an S3 client for {self.uri}: {self._redact(text)}") from exc

    def __repr__(self) -> str:
        return f"S3Storage({self.uri!r}, endpoint_url={self.endpoint!r})"

    # ---------------------------------------------------------------- keys
    def _s3_key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, s3_key: str) -> str:
        return s3_key[len(self.prefix) + 1 :] if self.prefix else s3_key

    # ---------------------------------------------------------------- the error boundary
    @contextlib.contextmanager
    def _boundary(self, action: str, key: str | None, *, config: bool = False) -> Iterator[None]:
        """Map botocore/boto3 errors raised inside to ``StorageError`` (``ConfigError`` if ``config``).

        This is the one place where third-party errors become ours.
        """
        try:
            yield
        except TrackerSaverError:
            raise
        except (
            botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError,
            boto3.exceptions.Boto3Error,
            s3transfer.exceptions.RetriesExceededError,
            s3transfer.exceptions.S3DownloadFailedError,
            s3transfer.exceptions.S3UploadFailedError,
        ) as exc:
            where = f"{self.uri}/{key}" if key else self.uri
            message = self._redact(f"{action} {where} failed: {self._explain(exc)}")
            if config:
                raise ConfigError(message) from exc
            raise StorageError(message, key=key) from exc

    def _explain(self, exc: BaseException) -> str:
        """Why ``exc`` happened and what to do, in one clause."""
        # upload_file wraps the ClientError into S3UploadFailedError, and a download that ran
        # out of retries keeps the last socket error: look through both.
        if isinstance(exc, boto3.exceptions.S3UploadFailedError) and isinstance(
            exc.__cause__, botocore.exceptions.ClientError
        ):
            exc = exc.__cause__
        last = getattr(exc, "last_exception", None)
        if isinstance(last, BaseException):
            exc = last
        ep = self.endpoint
        if isinstance(exc, botocore.exceptions.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", "") or "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            op = exc.operation_name
            if code == "NoSuchBucket" or (code in ("404", "NotFound") and op == "HeadBucket"):
                return (
                    f"bucket {self.bucket!r} does not exist at endpoint {ep}: create it "
                    f"(aws s3 mb s3://{self.bucket}) or fix output_uri"
                )
            if code in _CREDENTIAL_CODES:
                return (
                    f"credentials were refused by {ep} ({code}): check AWS_ACCESS_KEY_ID/"
                    "AWS_SECRET_ACCESS_KEY or the profile"
                )
            if code == "AccessDenied":
                return (
                    f"access denied by {ep} (AccessDenied on {op}): grant the credentials "
                    f"s3:{_PERMISSION.get(op, op)} on {self._resource(op)}, or use other credentials"
                )
            if code in ("403", "Forbidden"):
                # HEAD answers carry no error code: refused credentials and a missing permission look alike.
                return (
                    f"{ep} refused the request (HTTP 403 on {op}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                    f"or the profile, and that they allow s3:{_PERMISSION.get(op, op)} on {self._resource(op)}"
                )
            if code in ("NoSuchKey", "404", "NotFound"):
                return f"the object does not exist at endpoint {ep}"
            detail = exc.response.get("Error", {}).get("Message") or ""
            return f"{code or f'HTTP {status}'} on {op} from {ep}" + (f": {detail}" if detail else "")
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return (
                "no AWS credentials found: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile "
                "(AWS_PROFILE or storage option profile), or run with an instance role"
            )
        if isinstance(exc, botocore.exceptions.SSLError):
            return f"TLS with {ep} failed ({type(exc).__name__}): check the endpoint's certificate or AWS_CA_BUNDLE"
        if isinstance(exc, _UNREACHABLE):
            return (
                f"cannot reach endpoint {ep} ({type(exc).__name__}): check AWS_ENDPOINT_URL / endpoint_url "
                "and that the server is up"
            )
        return f"{type(exc).__name__}: {exc}"

    def _resource(self, op: str) -> str:
        """What an IAM/bucket policy must name to allow ``op`` here."""
        if _PERMISSION.get(op, "").startswith("ListBucket"):
            return f"bucket {self.bucket!r}" + (f" (prefix {self.prefix + '/'!r})" if self.prefix else "")
        return f"{self.uri}/*"

    def _redact(self, text: str) -> str:
        """``text`` with every secret this storage knows replaced by ``***`` (defence in depth)."""
        secrets: set[str] = set()
        with contextlib.suppress(Exception):
            creds = self._session.get_credentials()
            if creds is not None:
                frozen = creds.get_frozen_credentials()
                secrets.update(s for s in (frozen.secret_key, frozen.token) if s)
        for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            if os.environ.get(name):
                secrets.add(os.environ[name])
        for secret in sorted(secrets, key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text

    # ---------------------------------------------------------------- multipart bookkeeping
    def _on_multipart_created(self, http_response: Any, parsed: Any, **_: Any) -> None:
        if http_response is not None and http_response.status_code < 300 and parsed.get("UploadId"):
            with self._uploads_lock:
                self._uploads[parsed["UploadId"]] = parsed["Key"]

    def _on_commit(self, params: dict[str, Any], **_: Any) -> None:
        # The request that makes an upload's bytes the key's (a PUT, or CompleteMultipartUpload
        # once every part is up) is about to be built: run the writer's before_commit now.
        # Raising here stops the request, and s3transfer aborts the multipart upload.
        with self._uploads_lock:
            hook = self._commit_hooks.pop(params.get("Key", ""), None)
        if hook is not None:
            hook()

    def _forget_uploads(self, s3_key: str) -> dict[str, str]:
        with self._uploads_lock:
            mine = {uid: k for uid, k in self._uploads.items() if k == s3_key}
            for uid in mine:
                del self._uploads[uid]
        return mine

    def _abort_leftovers(self, uploads: dict[str, str] | None = None) -> None:
        """Abort multipart uploads of ours that a failure left behind (best effort).

        s3transfer aborts a failed multipart upload itself; but when the failure is the endpoint
        going away, that abort fails too. Those uploads are kept and retried on every later call
        (their parts would otherwise cost storage until a lifecycle rule removes them).
        """
        with self._uploads_lock:
            todo = {**self._leftovers, **(uploads or {})}
            self._leftovers.clear()
        for upload_id, s3_key in todo.items():
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=s3_key, UploadId=upload_id)
                log.debug("aborted leftover multipart upload of s3://%s/%s", self.bucket, s3_key)
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":  # s3transfer aborted it
                    self._keep_leftover(upload_id, s3_key, exc)
            except botocore.exceptions.BotoCoreError as exc:
                self._keep_leftover(upload_id, s3_key, exc)

    def _keep_leftover(self, upload_id: str, s3_key: str, exc: Exception) -> None:
        log.debug("could not abort multipart upload of s3://%s/%s yet (%s)", self.bucket, s3_key, type(exc).__name__)
        with self._uploads_lock:
            self._leftovers[upload_id] = s3_key

    def incomplete_uploads(self) -> list[tuple[str, str]]:
        """``(key, upload_id)`` of every multipart upload in progress under this root.

        Uploads of a process that crashed stay here until aborted (or a bucket lifecycle rule
        with ``AbortIncompleteMultipartUpload`` removes them); they are never objects.
        """
        out = []
        with self._boundary("listing multipart uploads under", None):
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}/" if self.prefix else ""):
                for upload in page.get("Uploads", []):
                    out.append((self._relative(upload["Key"]), upload["UploadId"]))
        return out

    def discard_staged(self, key: str) -> None:
        """Abort the multipart uploads to ``key`` that a killed writer left unfinished."""
        s3_key = self._s3_key(key)
        with self._boundary("aborting unfinished uploads to", key):
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=s3_key):
                for upload in page.get("Uploads", []):
                    if upload["Key"] == s3_key:
                        self._client.abort_multipart_upload(Bucket=self.bucket, Key=s3_key, UploadId=upload["UploadId"])

    @contextlib.contextmanager
    def _transfer(self, action: str, key: str) -> Iterator[str]:
        """Around one upload: abort what a failure leaves behind, map errors. Yields the S3 key."""
        s3_key = self._s3_key(key)
        self._abort_leftovers()
        try:
            with self._boundary(action, key):
                yield s3_key
        except BaseException:
            self._abort_leftovers(self._forget_uploads(s3_key))
            raise
        self._forget_uploads(s3_key)

    # ---------------------------------------------------------------- Storage
    def check(self) -> None:
        """Prove now that the root can be written and read, so a bad setup fails before training.

        It writes an empty probe object under the prefix, reads its size back (the pipeline
        checks every write with ``stat``) and deletes it if allowed. Write access is not
        required to include delete (slots are overwritten, never deleted): when delete is
        refused the probe simply stays, one empty object that ``list`` does not show.

        Raises:
            ConfigError: naming the bucket, the endpoint and the fix (no bucket, refused
                credentials, no permission, endpoint unreachable).
        """
        self._abort_leftovers()
        probe = self._s3_key(PROBE_NAME)
        with self._boundary("checking output_uri: writing", PROBE_NAME, config=True):
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"")
        with self._boundary("checking output_uri: reading the size of", PROBE_NAME, config=True):
            self._client.head_object(Bucket=self.bucket, Key=probe)
        try:
            with self._boundary("checking output_uri: deleting", PROBE_NAME, config=True):
                self._client.delete_object(Bucket=self.bucket, Key=probe)
        except ConfigError as exc:
            if not isinstance(exc.__cause__, botocore.exceptions.ClientError):
                raise
            # The server answered "no": delete is not needed (slots are overwritten), keep the probe.
            log.debug("check: probe kept: %s", exc)

    def put_file(self, key: str, path: str | os.PathLike[str]) -> None:
        path = os.fspath(path)
        try:
            size = os.path.getsize(path)
        except OSError as exc:
            raise StorageError(f"cannot read {path!r} to upload it to {self.uri}/{key}: {exc.strerror}", key=key) from exc
        progress = _Progress(f"upload {key}", size, self.progress)
        try:
            with self._transfer("uploading to", key) as s3_key:
                # upload_file reads the file in parts (multipart above the threshold), never whole.
                self._client.upload_file(
                    path, self.bucket, s3_key, Config=self._transfer_config, Callback=progress
                )
        finally:
            progress.close()

    def put_stream(self, key: str, stream: BinaryIO) -> None:
        size: int | None = None
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if stream.seekable():
                here = stream.tell()
                size = stream.seek(0, os.SEEK_END) - here
                stream.seek(here)
        progress = _Progress(f"upload {key}", size, self.progress)
        try:
            with self._transfer("uploading to", key) as s3_key:
                self._client.upload_fileobj(
                    stream, self.bucket, s3_key, Config=self._transfer_config, Callback=progress
                )
        finally:
            progress.close()

    @contextlib.contextmanager
    def writer(self, key: str, *, before_commit: Callable[[], None] | None = None) -> Iterator[BinaryIO]:
        """Yield a binary file; on a clean exit its bytes replace ``key`` atomically.

        ``before_commit`` runs at the commit point: right before the PUT, or the
        CompleteMultipartUpload once every part is uploaded (so after the body has returned).

        With ``stream_writes`` (default) the bytes go up while they are written: an upload
        thread reads them through a bounded pipe (at most about a dozen parts in memory, no
        temp file), and the multipart upload is completed only on a clean exit. If the
        body raises, the upload is aborted and the previous object stays. If the upload fails
        first, the next write raises and the body's exception is replaced by the mapped
        ``StorageError``.

        Note:
            The body runs on the caller's thread; the upload, and ``before_commit``, on the
            upload thread.
        """
        s3_key = self._s3_key(key)
        if before_commit is not None:
            with self._uploads_lock:
                self._commit_hooks[s3_key] = before_commit
        try:
            with self._writer(key) as target:
                yield target
        finally:
            with self._uploads_lock:
                self._commit_hooks.pop(s3_key, None)

    @contextlib.contextmanager
    def _writer(self, key: str) -> Iterator[BinaryIO]:
        if not self.stream_writes:
            with super().writer(key) as spool:
                yield spool
            return
        # Room for what s3transfer holds in memory anyway, so the writer rarely waits on it.
        pipe = _Pipe(limit=2 * max(self.multipart_chunksize, self.multipart_threshold))
        outcome: list[BaseException] = []

        def upload() -> None:
            try:
                self.put_stream(key, pipe)  # type: ignore[arg-type]
            except BaseException as exc:  # handed to the training thread, raised there
                outcome.append(exc)
                pipe.fail(exc)

        thread = threading.Thread(target=upload, name=f"s3-upload {key}", daemon=True)
        thread.start()
        try:
            yield pipe  # type: ignore[misc]
            pipe.close()
        except BaseException:
            pipe.abort()
            thread.join()
            failure = outcome[0] if outcome else None
            if failure is not None and not isinstance(failure, _UploadAborted):
                # The body failed because the upload did (its write raised): report the cause.
                raise failure from failure.__cause__
            raise
        thread.join()
        if outcome:
            raise outcome[0] from outcome[0].__cause__

    def get(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]:
        s3_key = self._s3_key(key)
        spool = tempfile.SpooledTemporaryFile(max_size=self.spool_bytes)
        progress = _Progress(f"download {key}", None, self.progress)
        try:
            with self._boundary("downloading", key):
                # Parts are fetched in parallel and written at their offsets: the spool must seek.
                self._client.download_fileobj(
                    self.bucket, s3_key, spool, Config=self._transfer_config, Callback=progress
                )
            spool.seek(0)
        except OSError as exc:
            spool.close()
            raise StorageError(f"downloading {self.uri}/{key} failed: no room for a local copy ({exc})", key=key) from exc
        except BaseException:
            spool.close()
            raise
        finally:
            progress.close()
        return spool  # type: ignore[return-value]

    def stat(self, key: str) -> ObjectStat | None:
        s3_key = self._s3_key(key)
        with self._boundary("reading the size of", key):
            try:
                head = self._client.head_object(Bucket=self.bucket, Key=s3_key)
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return None
                raise
        return ObjectStat(key, int(head["ContentLength"]))

    def list(self, prefix: str = "") -> list[ObjectStat]:
        if not isinstance(prefix, str):
            raise ConfigError(f"list prefix must be a string, got {prefix!r}")
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        probe = self._s3_key(PROBE_NAME)
        out = []
        with self._boundary("listing", prefix or None):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full, PaginationConfig={"PageSize": LIST_PAGE_SIZE}):
                for obj in page.get("Contents", []):
                    s3_key = obj["Key"]
                    # The check() probe and console "folder" markers are not objects of ours.
                    if s3_key == probe or s3_key.endswith("/"):
                        continue
                    out.append(ObjectStat(self._relative(s3_key), int(obj["Size"])))
        return sorted(out, key=lambda s: s.key)

    def delete(self, key: str) -> None:
        s3_key = self._s3_key(key)
        with self._boundary("deleting", key):
            # S3 answers 204 for a missing key too: deleting twice is not an error.
            self._client.delete_object(Bucket=self.bucket, Key=s3_key)


_LOADER: Any = None
_LOADER_LOCK = threading.Lock()


def _shared_loader() -> Any:
    """botocore's data loader, shared by every S3Storage (it caches the parsed service models)."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            import botocore.loaders

            _LOADER = botocore.loaders.create_loader()
        return _LOADER


def _is_aws(endpoint_url: str) -> bool:
    host = (urlsplit(endpoint_url).hostname or "").lower()
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn")) or host == "amazonaws.com"


#: The IAM action an operation needs, for AccessDenied messages.
_PERMISSION: dict[str, str] = {
    "PutObject": "PutObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "HeadObject": "GetObject",
    "GetObject": "GetObject",
    "ListObjectsV2": "ListBucket",
    "DeleteObject": "DeleteObject",
    "HeadBucket": "ListBucket",
    "ListMultipartUploads": "ListBucketMultipartUploads",
    "AbortMultipartUpload": "AbortMultipartUpload",
}

#: Every storage option, for the "unknown option" error and the docs.
KNOWN_OPTIONS: tuple[str, ...] = (
    "endpoint_url",
    "region_name",
    "profile",
    "addressing_style",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "multipart_threshold",
    "multipart_chunksize",
    "max_concurrency",
    "retry_mode",
    "max_attempts",
    "connect_timeout",
    "read_timeout",
    "request_checksum_calculation",
    "spool_bytes",
    "stream_writes",
    "progress",
)
