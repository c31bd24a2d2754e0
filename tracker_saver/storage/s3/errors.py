"""The one boundary where botocore, boto3 and s3transfer errors become ours, with every secret masked."""

# Operations map through ErrorBoundary (StorageError, or ConfigError for check()); building the
# session and the client maps through profile_errors and client_errors (ConfigError). Every
# message names the bucket, the key, the endpoint and the fix, never a credential. The
# third-party exception stays chained as __cause__, but as a masked copy (see `masked`):
# botocore's own messages carry request URLs, and a traceback prints every chained message.

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import boto3.exceptions
import botocore.exceptions
import s3transfer.exceptions

from tracker_saver.core.errors import ConfigError, StorageError, TrackerSaverError
from tracker_saver.core.masking import has_userinfo, raise_masked, redact_url, strip_userinfo
from tracker_saver.core.outage import OutageError

__all__ = ["ENDPOINT_VARIABLES", "ErrorBoundary", "client_errors", "profile_errors", "redact"]

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
#: What the boundary maps; anything else (ours included) passes through unchanged.
_THIRD_PARTY = (
    OutageError,
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
    boto3.exceptions.Boto3Error,
    s3transfer.exceptions.RetriesExceededError,
    s3transfer.exceptions.S3DownloadFailedError,
    s3transfer.exceptions.S3UploadFailedError,
)
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


#: Environment variables boto3 takes an endpoint from (a user may have put credentials in them).
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def redact(text: str, session: Any) -> str:
    """``text`` without any ``user:password@`` in a URL, and every secret that ``session`` or the
    environment knows replaced by ``***``.

    Defence in depth: no message is built from a secret, but a botocore message might hold one.

    Examples:
        >>> redact('Could not connect to "http://u:pw@127.0.0.1:7480/b/k"', None)
        'Could not connect to "http://127.0.0.1:7480/b/k"'
    """
    secrets: set[str] = set()
    with contextlib.suppress(Exception):
        creds = session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            secrets.update(s for s in (frozen.secret_key, frozen.token) if s)
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        if os.environ.get(name):
            secrets.add(os.environ[name])
    for name in ENDPOINT_VARIABLES:
        # A userinfo that URL parsing does not see (a '/' in the password) is masked whole.
        value = os.environ.get(name, "")
        if "@" in value:
            text = text.replace(value, redact_url(value) if has_userinfo(value) else f"<${name}>")
    text = strip_userinfo(text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


@contextlib.contextmanager
def profile_errors(uri: str, profile: str | None) -> Iterator[None]:
    """Around ``boto3.Session(...)``: an unknown profile becomes a ``ConfigError`` naming it."""
    try:
        yield
    except botocore.exceptions.ProfileNotFound as exc:
        error = ConfigError(
            f"AWS profile {profile or os.environ.get('AWS_PROFILE')!r} for {uri} is not in "
            "~/.aws/config or ~/.aws/credentials: fix storage option profile / AWS_PROFILE"
        )
        raise_masked(error, exc, lambda text: redact(text, None))


@contextlib.contextmanager
def client_errors(uri: str, endpoint_url: str | None, session: Any) -> Iterator[None]:
    """Around ``session.client("s3", ...)``: a bad configuration becomes a ``ConfigError``."""

    def clean(text: str) -> str:
        if endpoint_url:
            text = text.replace(endpoint_url, redact_url(endpoint_url))
        return redact(text, session)

    try:
        yield
    except botocore.exceptions.PartialCredentialsError as exc:
        error = ConfigError(
            f"incomplete AWS credentials for {uri} ({exc.kwargs.get('cred_var')} is missing in "
            f"{exc.kwargs.get('provider')}): set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or neither"
        )
        raise_masked(error, exc, clean)
    except (ValueError, botocore.exceptions.BotoCoreError) as exc:
        raise_masked(ConfigError(f"cannot configure an S3 client for {uri}: {clean(str(exc))}"), exc, clean)


class ErrorBoundary:
    """Maps the third-party errors raised inside ``with boundary(action, key):`` for one storage root.

    Args:
        uri: the root, ``s3://bucket`` or ``s3://bucket/prefix``.
        bucket, prefix: the root's parts, for the bucket and permission advice.
        endpoint: the endpoint URL without credentials.
        session: the boto3 session, whose credentials are masked in every message.

    Examples:
        >>> import botocore.exceptions
        >>> boundary = ErrorBoundary("s3://ckpts/team", "ckpts", "team", "http://127.0.0.1:7480", None)
        >>> with boundary("uploading to", "p/r/s.slot0.pt"):
        ...     raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:7480")
        Traceback (most recent call last):
        ...
        tracker_saver.core.errors.StorageError: uploading to s3://ckpts/team/p/r/s.slot0.pt failed: cannot reach endpoint ...
    """

    def __init__(self, uri: str, bucket: str, prefix: str, endpoint: str, session: Any) -> None:
        self.uri = uri
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = endpoint
        self._session = session

    @contextlib.contextmanager
    def __call__(self, action: str, key: str | None, *, config: bool = False) -> Iterator[None]:
        """Map botocore/boto3 errors raised inside to ``StorageError`` (``ConfigError`` if ``config``)."""
        try:
            yield
        except TrackerSaverError:
            raise
        except _THIRD_PARTY as exc:
            where = f"{self.uri}/{key}" if key else self.uri
            message = self.clean(f"{action} {where} failed: {self.explain(exc)}")
            raise_masked(ConfigError(message) if config else StorageError(message, key=key), exc, self.clean)

    def clean(self, text: str) -> str:
        """``text`` with every credential masked (see :func:`redact`)."""
        return redact(text, self._session)

    def explain(self, exc: BaseException) -> str:
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
        if isinstance(exc, OutageError):
            return (
                f"endpoint {ep} stopped answering ({exc}): check that the server is up, "
                "or allow a longer wait with TrackerSaver(timeout=...)"
            )
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
