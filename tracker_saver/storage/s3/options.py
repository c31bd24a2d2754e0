"""Check the S3 storage options and build the boto3 session, client and transfer config from them."""

from __future__ import annotations

import inspect
import logging
import math
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.loaders
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from tracker_saver.core.errors import ConfigError
from tracker_saver.core.masking import has_userinfo, redact_url
from tracker_saver.core.naming import check_key
from tracker_saver.core.outage import request_timeouts
from tracker_saver.storage.s3.errors import ENDPOINT_VARIABLES, client_errors, profile_errors

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "DEFAULT_MULTIPART_CHUNKSIZE",
    "DEFAULT_MULTIPART_THRESHOLD",
    "DEFAULT_WRITER_CONCURRENCY",
    "DEFAULT_WRITER_PART_SIZE",
    "MiB",
    "S3Options",
    "attempts_for",
    "check_options",
    "connect",
    "option_names",
    "parse_s3_uri",
    "refuse_unknown",
    "shared_loader",
    "transfer_config",
]

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
# The streaming writer's own (storage/s3/parts.py): measured against upload_file on the saver's
# real path (docs/s3.md, "How the writer uploads"); it sends tensor memory without copying it, so
# larger parts cost no memory there.
#: Part size of the streaming writer; less than one part in all is one PUT.
DEFAULT_WRITER_PART_SIZE = 32 * MiB
#: Parts of the streaming writer in flight at once.
DEFAULT_WRITER_CONCURRENCY = 4

_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_ADDRESSING_STYLES = ("auto", "path", "virtual")
_RETRY_MODES = ("standard", "adaptive")
_CHECKSUM_MODES = ("when_supported", "when_required")


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


def option_names(init: Callable[..., object]) -> tuple[str, ...]:
    """The storage options a constructor takes: its keyword-only parameters, in order.

    Examples:
        >>> def __init__(self, uri, *, endpoint_url=None, profile=None, **unknown): ...
        >>> option_names(__init__)
        ('endpoint_url', 'profile')
    """
    return tuple(
        p.name for p in inspect.signature(init).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    )


def refuse_unknown(uri: str, unknown: dict[str, Any], known: tuple[str, ...]) -> None:
    """Raise a ``ConfigError`` listing the known options if any option in ``unknown`` was given."""
    if unknown:
        raise ConfigError(
            f"unknown storage option {', '.join(map(repr, sorted(unknown)))} for {uri}: use {', '.join(known)}"
        )


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
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


@dataclass(frozen=True, repr=False)  # no repr: it holds the secret key
class S3Options:
    """The storage options once checked; ``None`` leaves the choice to boto3's configuration."""

    endpoint_url: str | None
    region_name: str | None
    profile: str | None
    addressing_style: str | None
    aws_access_key_id: str | None
    aws_secret_access_key: str | None
    aws_session_token: str | None
    multipart_threshold: int
    multipart_chunksize: int
    max_concurrency: int
    writer_part_size: int
    writer_concurrency: int
    retry_mode: str | None
    max_attempts: int | None
    connect_timeout: float | None
    read_timeout: float | None
    timeout: float
    request_checksum_calculation: str | None
    spool_bytes: int
    stream_writes: bool
    progress: bool | None


def check_options(
    *,
    endpoint_url: object,
    region_name: object,
    profile: object,
    addressing_style: object,
    aws_access_key_id: object,
    aws_secret_access_key: object,
    aws_session_token: object,
    multipart_threshold: object,
    multipart_chunksize: object,
    max_concurrency: object,
    writer_part_size: object,
    writer_concurrency: object,
    retry_mode: object,
    max_attempts: object,
    connect_timeout: object,
    read_timeout: object,
    timeout: object,
    request_checksum_calculation: object,
    spool_bytes: object,
    stream_writes: object,
    progress: object,
) -> S3Options:
    """Check every option up front, in signature order; a bad one is a ``ConfigError`` with the rule.

    Examples:
        >>> values = dict.fromkeys(option_names(check_options))
        >>> values.update(multipart_threshold=1, multipart_chunksize=8 << 20, max_concurrency=10,
        ...               writer_part_size=32 << 20, writer_concurrency=4, spool_bytes=0,
        ...               stream_writes=True, retry_mode="legacy")
        >>> check_options(**values)
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.ConfigError: storage option retry_mode must be one of 'standard', 'adaptive', got 'legacy'
    """
    endpoint = _check_str("endpoint_url", endpoint_url)
    if endpoint is not None and "@" in endpoint and not has_userinfo(endpoint):
        # An '@' that URL parsing does not take for userinfo: a password with '/' in it, say.
        raise ConfigError(
            "storage option endpoint_url has an '@' outside a user:password@host part, so it may hold a "
            "credential and is not shown: use http(s)://HOST:PORT, and aws_access_key_id/aws_secret_access_key"
        )
    if endpoint is not None and urlsplit(endpoint).scheme not in ("http", "https"):
        raise ConfigError(
            f"storage option endpoint_url {redact_url(endpoint)!r} is not an http(s) URL: "
            "use e.g. http://127.0.0.1:7480"
        )
    region = _check_str("region_name", region_name)
    profile_name = _check_str("profile", profile)
    style = _check_choice("addressing_style", addressing_style, _ADDRESSING_STYLES)
    key_id = _check_str("aws_access_key_id", aws_access_key_id)
    secret = _check_str("aws_secret_access_key", aws_secret_access_key)
    token = _check_str("aws_session_token", aws_session_token)
    if (key_id is None) != (secret is None) or (token is not None and key_id is None):
        raise ConfigError(
            "storage options aws_access_key_id and aws_secret_access_key go together "
            "(aws_session_token needs both): pass both, or neither to use boto3's credential chain"
        )
    threshold = _check_int("multipart_threshold", multipart_threshold, 1)
    chunksize = _check_int("multipart_chunksize", multipart_chunksize, 5 * MiB, 5 * 1024 * MiB)
    concurrency = _check_int("max_concurrency", max_concurrency, 1, 1000)
    part_size = _check_int("writer_part_size", writer_part_size, 5 * MiB, 5 * 1024 * MiB)
    writers = _check_int("writer_concurrency", writer_concurrency, 1, 100)
    retries = _check_choice("retry_mode", retry_mode, _RETRY_MODES)
    attempts = None if max_attempts is None else _check_int("max_attempts", max_attempts, 1, 100)
    connect = _check_seconds("connect_timeout", connect_timeout)
    read = _check_seconds("read_timeout", read_timeout)
    bound = _check_seconds("timeout", timeout)
    if bound is None or not math.isfinite(bound):
        raise ConfigError(f"storage option timeout must be a positive number of seconds, got {timeout!r}")
    checksums = _check_choice("request_checksum_calculation", request_checksum_calculation, _CHECKSUM_MODES)
    spool = _check_int("spool_bytes", spool_bytes, 0)
    if not isinstance(stream_writes, bool):
        raise ConfigError(f"storage option stream_writes must be True or False, got {stream_writes!r}")
    if progress is not None and not isinstance(progress, bool):
        raise ConfigError(f"storage option progress must be None, True or False, got {progress!r}")
    return S3Options(
        endpoint_url=endpoint,
        region_name=region,
        profile=profile_name,
        addressing_style=style,
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        aws_session_token=token,
        multipart_threshold=threshold,
        multipart_chunksize=chunksize,
        max_concurrency=concurrency,
        writer_part_size=part_size,
        writer_concurrency=writers,
        retry_mode=retries,
        max_attempts=attempts,
        connect_timeout=connect,
        read_timeout=read,
        timeout=bound,
        request_checksum_calculation=checksums,
        spool_bytes=spool,
        stream_writes=stream_writes,
        progress=progress,
    )


def connect(uri: str, options: S3Options) -> tuple[Any, Any]:
    """The boto3 session and S3 client for ``uri`` (no request is sent; ``ConfigError`` on a bad setup)."""
    core = botocore.session.Session()
    with profile_errors(uri, options.profile):
        session = boto3.Session(
            aws_access_key_id=options.aws_access_key_id,
            aws_secret_access_key=options.aws_secret_access_key,
            aws_session_token=options.aws_session_token,
            region_name=options.region_name,
            profile_name=options.profile,
            botocore_session=core,
        )
    _share_loader(core)
    retry_mode = options.retry_mode
    if retry_mode is None:
        # botocore resolves "legacy" when nothing is configured in old versions; we want at least
        # "standard" (retries throttling and connection errors with backoff). No retry loop here.
        configured = core.get_config_variable("retry_mode")
        retry_mode = configured if configured in _RETRY_MODES else "standard"
    # The outage clock (tracker_saver.core.outage, hooked in by S3Storage) stops retries at half the
    # timeout; the attempts and each one's timeouts are sized so the whole wait stays under it.
    connect_s, read_s = request_timeouts(options.timeout)
    configured_attempts = core.get_config_variable("max_attempts")  # AWS_MAX_ATTEMPTS or the profile
    attempts = options.max_attempts or configured_attempts or attempts_for(options.timeout)
    retries: dict[str, Any] = {"mode": retry_mode, "total_max_attempts": attempts}  # the first try counts
    config_kwargs: dict[str, Any] = {
        "retries": retries,
        "connect_timeout": options.connect_timeout or connect_s,
        "read_timeout": options.read_timeout or read_s,
    }
    checksums = options.request_checksum_calculation
    if checksums is None and not os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION"):
        # The saver hashes every byte itself (sha256, verified on load); botocore's CRC32
        # on top cost the streamed 512 MiB save ~6 % throughput on 2 cores (docs/s3.md).
        checksums = "when_required"
    if checksums is not None:
        config_kwargs["request_checksum_calculation"] = checksums
        config_kwargs["response_checksum_validation"] = checksums

    endpoint_url, style = (
        _without_userinfo(uri, options.endpoint_url or _environment_endpoint()),
        options.addressing_style,
    )
    if style is None and endpoint_url is not None and not _is_aws(endpoint_url):
        style = "path"
    client = _client(uri, session, endpoint_url, config_kwargs, style)
    if has_userinfo(client.meta.endpoint_url):  # from a profile's endpoint_url
        endpoint_url = _without_userinfo(uri, client.meta.endpoint_url)
        client = _client(uri, session, endpoint_url, config_kwargs, style)
    if style is None and not _is_aws(client.meta.endpoint_url):
        # Ceph and MinIO serve buckets under the path unless configured with a DNS name.
        # Recent botocore already does this for custom endpoints; older ones did not.
        client = _client(uri, session, endpoint_url, config_kwargs, "path")
    return session, client


def attempts_for(timeout: float) -> int:
    """Attempts per request under ``timeout``: as many as botocore's backoff fits, from 3 to 10.

    botocore's backoff before attempt ``i + 1`` is at most 50 ms × 2^i: keeping the longest
    sleep under half the timeout keeps a sleep from running past it.

    Examples:
        >>> attempts_for(60.0), attempts_for(5.0), attempts_for(0.5)
        (10, 6, 3)
    """
    return max(3, min(10, 1 + int(math.log2(timeout / 0.1))))


def _environment_endpoint() -> str | None:
    """The endpoint boto3 would take from the environment, only when it has ``user:password@``."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
        return None
    for name in ENDPOINT_VARIABLES:  # boto3's order: the S3-specific one first
        if os.environ.get(name):
            return os.environ[name] if has_userinfo(os.environ[name]) else None
    return None


def _without_userinfo(uri: str, endpoint_url: str | None) -> str | None:
    """``endpoint_url`` without ``user:password@``, which S3 never uses (requests are signed with keys).

    Dropped before botocore sees it: botocore puts the endpoint in its error messages and in its
    DEBUG log of every request.
    """
    if endpoint_url is None or not has_userinfo(endpoint_url):
        return endpoint_url
    log.warning(
        "the S3 endpoint %s for %s has a user:password@ part, which S3 does not use: it is dropped; "
        "remove it, and give keys as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or storage options",
        redact_url(endpoint_url),
        uri,
    )
    return redact_url(endpoint_url)


def transfer_config(options: S3Options) -> TransferConfig:
    """s3transfer's settings for every upload and download of one storage."""
    return TransferConfig(
        multipart_threshold=options.multipart_threshold,
        multipart_chunksize=options.multipart_chunksize,
        max_concurrency=options.max_concurrency,
        use_threads=True,
    )


def _client(uri: str, session: Any, endpoint_url: str | None, config_kwargs: dict[str, Any], style: str | None) -> Any:
    kwargs = dict(config_kwargs)
    if style is not None:
        kwargs["s3"] = {"addressing_style": style}
    with client_errors(uri, endpoint_url, session):
        return session.client("s3", endpoint_url=endpoint_url, config=Config(**kwargs))


def _is_aws(endpoint_url: str) -> bool:
    host = (urlsplit(endpoint_url).hostname or "").lower()
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn")) or host == "amazonaws.com"


_LOADER: Any = None
_LOADER_LOCK = threading.Lock()


def shared_loader() -> Any:
    """botocore's data loader, shared by every S3Storage (it caches the parsed service models)."""
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader()
        return _LOADER


def _share_loader(core: botocore.session.Session) -> None:
    """Make ``core``'s clients load the S3 service model (a large JSON file) once per process.

    ``register_component`` is public on botocore's Session but not documented; it is the only
    way to hand a session a loader. It runs after ``boto3.Session(...)`` on purpose: boto3 adds
    its resource models' folder to the session's own loader, which the shared one does not need.
    tests/test_storage_s3.py checks that clients still load through the shared loader.
    """
    core.register_component("data_loader", shared_loader())
