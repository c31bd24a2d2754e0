"""S3Storage: the Storage seam on ``s3://bucket/prefix``, each write one PUT or CompleteMultipartUpload."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import Any, BinaryIO

import botocore.exceptions

from tracker_saver.core.errors import ConfigError, StorageError
from tracker_saver.core.masking import redact_url
from tracker_saver.core.naming import check_key
from tracker_saver.core.outage import DEFAULT_TIMEOUT_S, Outage
from tracker_saver.storage.base import (
    DEFAULT_SPOOL_BYTES,
    ObjectStat,
    SpooledWrite,
    Stable,
    Staged,
    StagedWrite,
    Storage,
    listed,
)
from tracker_saver.storage.s3.errors import ErrorBoundary
from tracker_saver.storage.s3.options import (
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MULTIPART_CHUNKSIZE,
    DEFAULT_MULTIPART_THRESHOLD,
    DEFAULT_WRITER_CONCURRENCY,
    DEFAULT_WRITER_PART_SIZE,
    check_options,
    connect,
    option_names,
    parse_s3_uri,
    refuse_unknown,
    transfer_config,
)
from tracker_saver.storage.s3.progress import Progress
from tracker_saver.storage.s3.staged import S3Write, etag_fingerprint
from tracker_saver.storage.s3.uploads import UploadTracker
from tracker_saver.storage.s3.watch import watch

__all__ = ["KNOWN_OPTIONS", "LIST_PAGE_SIZE", "PROBE_NAME", "S3Storage"]

log = logging.getLogger(__name__)

#: ``check()`` writes this empty object under the prefix to prove write access. ``list`` hides it.
PROBE_NAME = ".tracker-saver-check"
#: Keys per list request (S3's maximum; tests lower it to exercise pagination).
LIST_PAGE_SIZE = 1000


class S3Storage(Storage):
    """Objects under ``s3://bucket/prefix``, through boto3.

    The commit point is S3's own: a ``PutObject`` or ``CompleteMultipartUpload`` that returned
    replaces the key atomically, and a reader sees the previous object until then (DESIGN
    invariants 2 and 6). A failed multipart upload is aborted, so it leaves neither an object nor
    billable parts; if the abort itself cannot reach the server, this storage retries it on its
    next call. Configuration follows boto3 (explicit option > environment / profile > default):
    see ``docs/s3.md``.

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
        multipart_threshold: ``put_file``/``put_stream``: objects of at least this many bytes go up
            as a multipart upload (boto3's default, 8 MiB).
        multipart_chunksize: ``put_file``/``put_stream``: part size in bytes (5 MiB to 5 GiB;
            boto3's default, 8 MiB).
        max_concurrency: ``put_file``/``put_stream``: parts in flight (boto3's default, 10).
        writer_part_size: the streaming ``writer``'s part size (5 MiB to 5 GiB; default 32 MiB);
            a checkpoint smaller than one part goes up as one PUT.
        writer_concurrency: the streaming ``writer``'s parts in flight (default 4).
        retry_mode: botocore's ``"standard"`` (default) or ``"adaptive"``.
        timeout: seconds a call may wait on an endpoint that stopped answering (refused,
            frozen or 5xx) before it raises ``StorageError``; default 60. Retries stop once
            the endpoint has failed for half of it; the other half bounds the last attempt.
            ``TrackerSaver(timeout=...)`` sets it. See docs/outages.md.
        max_attempts: attempts per request including the first; default: ``AWS_MAX_ATTEMPTS``
            or the profile's, else what fits in ``timeout`` (10 for 60 s, at least 3).
        connect_timeout, read_timeout: seconds per attempt; default ``timeout/6`` and
            ``timeout/3`` (10 s and 20 s).
        request_checksum_calculation: ``"when_required"`` (default here, unless
            ``AWS_REQUEST_CHECKSUM_CALCULATION`` is set) or botocore's ``"when_supported"``.
            Our own sha256, verified on every load, makes botocore's CRC32 redundant CPU work.
        spool_bytes: ``get`` keeps a downloaded object in memory up to this size, then spills
            it to a temp file; with ``stream_writes=False`` the same holds for ``writer``.
        stream_writes: ``writer`` uploads parts while the caller writes (default), instead
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
        tracker_saver.core.errors.ConfigError: unknown storage option 'multipart_chunk_size' for s3://ckpts: use endpoint_url, ...
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
        writer_part_size: int = DEFAULT_WRITER_PART_SIZE,
        writer_concurrency: int = DEFAULT_WRITER_CONCURRENCY,
        retry_mode: str | None = None,
        max_attempts: int | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        request_checksum_calculation: str | None = None,
        spool_bytes: int = DEFAULT_SPOOL_BYTES,
        stream_writes: bool = True,
        progress: bool | None = None,
        **unknown: Any,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        refuse_unknown(self.uri, unknown, KNOWN_OPTIONS)
        options = check_options(
            endpoint_url=endpoint_url,
            region_name=region_name,
            profile=profile,
            addressing_style=addressing_style,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token,
            multipart_threshold=multipart_threshold,
            multipart_chunksize=multipart_chunksize,
            max_concurrency=max_concurrency,
            writer_part_size=writer_part_size,
            writer_concurrency=writer_concurrency,
            retry_mode=retry_mode,
            max_attempts=max_attempts,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            timeout=timeout,
            request_checksum_calculation=request_checksum_calculation,
            spool_bytes=spool_bytes,
            stream_writes=stream_writes,
            progress=progress,
        )
        self.multipart_threshold = options.multipart_threshold
        self.multipart_chunksize = options.multipart_chunksize
        self.max_concurrency = options.max_concurrency
        self.writer_part_size = options.writer_part_size
        self.writer_concurrency = options.writer_concurrency
        self.spool_bytes = options.spool_bytes
        self.stream_writes = options.stream_writes
        self.progress = options.progress
        self._session, self._client = connect(self.uri, options)
        self.outage = Outage(options.timeout)
        watch(self._client, self.outage)
        self.endpoint = redact_url(self._client.meta.endpoint_url)
        self._transfer_config = transfer_config(options)
        self._boundary = ErrorBoundary(self.uri, self.bucket, self.prefix, self.endpoint, self._session)
        self._uploads = UploadTracker(self._client, self.bucket)

    def __repr__(self) -> str:
        return f"S3Storage({self.uri!r}, endpoint_url={self.endpoint!r})"

    # ---------------------------------------------------------------- keys
    def _s3_key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, s3_key: str) -> str:
        return s3_key[len(self.prefix) + 1 :] if self.prefix else s3_key

    # ---------------------------------------------------------------- multipart uploads
    def staged(self, prefix: str = "") -> list[Staged]:
        """Multipart uploads in progress to keys starting with ``prefix`` (one paginated listing).

        Uploads of a process that crashed stay here until aborted (or a bucket lifecycle rule
        with ``AbortIncompleteMultipartUpload`` removes them); they are never objects.
        """
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        out = []
        with self._boundary("listing multipart uploads under", prefix or None):
            paginator = self._client.get_paginator("list_multipart_uploads")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
                for upload in page.get("Uploads", []):
                    started = upload["Initiated"].timestamp()
                    out.append(Staged(self._relative(upload["Key"]), upload["UploadId"], started))
        return sorted(out, key=lambda s: (s.key, s.started))

    def abort_staged(self, item: Staged) -> None:
        with self._boundary("aborting an unfinished upload to", item.key):
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=self._s3_key(item.key), UploadId=item.ref)
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                    raise

    @contextlib.contextmanager
    def _transfer(self, action: str, key: str) -> Iterator[str]:
        """Around one upload: abort what a failure leaves behind, map errors. Yields the S3 key."""
        s3_key = self._s3_key(key)
        self._uploads.abort_leftovers()
        try:
            with self._boundary(action, key):
                yield s3_key
        except BaseException:
            self._uploads.abort_leftovers(self._uploads.forget(s3_key))
            raise
        self._uploads.forget(s3_key)

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
        self._uploads.abort_leftovers()
        with self.outage.impatient():  # a refused endpoint here is a wrong one: say so at once
            self._check_probe()

    def _check_probe(self) -> None:
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
            raise StorageError(
                f"cannot read {path!r} to upload it to {self.uri}/{key}: {exc.strerror}", key=key
            ) from exc
        progress = Progress(f"upload {key}", size, self.progress)
        try:
            with self._transfer("uploading to", key) as s3_key:
                # upload_file reads the file in parts (multipart above the threshold), never whole.
                self._client.upload_file(path, self.bucket, s3_key, Config=self._transfer_config, Callback=progress)
        finally:
            progress.close()

    def put_stream(self, key: str, stream: BinaryIO) -> None:
        size: int | None = None
        with contextlib.suppress(AttributeError, OSError, ValueError):
            if stream.seekable():
                here = stream.tell()
                size = stream.seek(0, os.SEEK_END) - here
                stream.seek(here)
        progress = Progress(f"upload {key}", size, self.progress)
        try:
            with self._transfer("uploading to", key) as s3_key:
                self._client.upload_fileobj(
                    stream, self.bucket, s3_key, Config=self._transfer_config, Callback=progress
                )
        finally:
            progress.close()

    def stage(self, key: str, *, stable: Stable | None = None) -> StagedWrite:
        """A staged write to ``key``; with ``stream_writes`` (default) its bytes go up while they are written.

        Each part of ``writer_part_size`` bytes is uploaded on one of ``writer_concurrency``
        threads (:class:`S3Write`), writes of ``stable`` memory without copying them; less than
        one part in all is one PUT at the commit point. Without ``stream_writes`` the bytes are
        spooled and sent by ``put_stream`` at the commit point. Either way ``abort`` says
        whether the commit request may have reached the server.
        """
        if self.stream_writes:
            return S3Write(
                key,
                s3_key=self._s3_key(key),
                bucket=self.bucket,
                client=self._client,
                uploads=self._uploads,
                boundary=self._boundary,
                part_size=self.writer_part_size,
                concurrency=self.writer_concurrency,
                progress=self.progress,
                stable=stable,
            )
        attempts = self._uploads.watch(self._s3_key(key))
        return SpooledWrite(self, key, sent=attempts.may_have_reached)

    def get(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]:
        s3_key = self._s3_key(key)
        spool = tempfile.SpooledTemporaryFile(max_size=self.spool_bytes)
        progress = Progress(f"download {key}", None, self.progress)
        try:
            with self._boundary("downloading", key):
                # Parts are fetched in parallel and written at their offsets: the spool must seek.
                self._client.download_fileobj(
                    self.bucket, s3_key, spool, Config=self._transfer_config, Callback=progress
                )
            spool.seek(0)
        except OSError as exc:
            spool.close()
            raise StorageError(
                f"downloading {self.uri}/{key} failed: no room for a local copy ({exc})", key=key
            ) from exc
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
        return ObjectStat(
            key, int(head["ContentLength"]), head["LastModified"].timestamp(), etag_fingerprint(head["ETag"])
        )

    def list(self, prefix: str = "") -> list[ObjectStat]:
        if not isinstance(prefix, str):
            raise ConfigError(f"list prefix must be a string, got {prefix!r}")
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        probe = self._s3_key(PROBE_NAME)
        out = []
        with self._boundary("listing", prefix or None):
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(
                Bucket=self.bucket, Prefix=full, PaginationConfig={"PageSize": LIST_PAGE_SIZE}
            ):
                for obj in page.get("Contents", []):
                    s3_key = obj["Key"]
                    # The check() probe and console "folder" markers are not objects of ours.
                    if s3_key == probe or s3_key.endswith("/") or not listed(self._relative(s3_key), prefix):
                        continue
                    out.append(
                        ObjectStat(
                            self._relative(s3_key),
                            int(obj["Size"]),
                            obj["LastModified"].timestamp(),
                            etag_fingerprint(obj["ETag"]),
                        )
                    )
        return sorted(out, key=lambda s: s.key)

    def read_small(self, key: str, limit: int = 1 << 16) -> bytes | None:
        """One GetObject of the first ``limit`` bytes (no transfer manager); ``None`` on NoSuchKey."""
        with self._boundary("reading", key):
            try:
                found = self._client.get_object(Bucket=self.bucket, Key=self._s3_key(key), Range=f"bytes=0-{limit - 1}")
            except botocore.exceptions.ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("404", "NoSuchKey", "NotFound"):
                    return None
                if code == "InvalidRange":  # an empty object has no byte 0
                    return b""
                raise
            return bytes(found["Body"].read())

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """One PUT with ``If-None-Match: *``: the store refuses it (412) when ``key`` exists.

        Ceph RGW (Pacific) and AWS honour the condition; a store that ignores it writes anyway,
        so callers read the object back.
        """
        with self._boundary("creating", key):
            try:
                self._client.put_object(Bucket=self.bucket, Key=self._s3_key(key), Body=data, IfNoneMatch="*")
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                    return False
                raise
        return True

    def copy(self, src_key: str, dst_key: str) -> None:
        """A server-side copy: boto3's managed copy (one CopyObject, or UploadPartCopy parts
        past the multipart threshold); no byte passes through this machine.

        ``dst_key`` is checked first (a HEAD), not in the copy itself: Ceph RGW 16 ignores
        ``If-None-Match`` on CopyObject (measured), so a key nobody else chooses is what keeps two
        copies apart."""
        if self.stat(dst_key) is not None:
            raise StorageError(
                f"cannot copy {src_key!r} to {self.url(dst_key)}: an object is there already, and a copy never "
                "replaces one; copy to a new key",
                key=dst_key,
            )
        source = {"Bucket": self.bucket, "Key": self._s3_key(src_key)}
        with self._transfer(f"copying {src_key} to", dst_key) as s3_key:
            self._client.copy(source, self.bucket, s3_key, Config=self._transfer_config)

    def delete(self, key: str) -> None:
        s3_key = self._s3_key(key)
        with self._boundary("deleting", key):
            # S3 answers 204 for a missing key too: deleting twice is not an error.
            self._client.delete_object(Bucket=self.bucket, Key=s3_key)


#: Every storage option, for the "unknown option" error and the docs: the constructor's keywords.
KNOWN_OPTIONS: tuple[str, ...] = option_names(S3Storage.__init__)
