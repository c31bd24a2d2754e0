"""The one boundary where botocore, boto3 and s3transfer errors become ours, with every secret masked."""

# Operations map through ErrorBoundary (StorageError, or ConfigError for check()); building the
# session and the client maps through profile_errors and client_errors (ConfigError). Every
# message names the bucket, the key, the endpoint and the fix, never a credential. The
# third-party exception stays chained as __cause__, but as a masked copy (see `masked`):
# botocore's own messages carry request URLs, and a traceback prints every chained message.

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import boto3.exceptions
import botocore.exceptions
import s3transfer.exceptions

from tracker_saver.errors import ConfigError, StorageError, TrackerSaverError

__all__ = [
    "ErrorBoundary",
    "MaskedError",
    "client_errors",
    "has_userinfo",
    "masked",
    "profile_errors",
    "raise_masked",
    "redact",
    "redact_url",
]

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


#: ``scheme://user:password@`` in any text: the userinfo part, up to the host.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@\"'<>]*@")
#: Environment variables boto3 takes an endpoint from (a user may have put credentials in them).
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def has_userinfo(url: str) -> bool:
    """Whether ``url`` has a ``user:password@`` part.

    Examples:
        >>> has_userinfo("http://key:secret@127.0.0.1:7480"), has_userinfo("http://127.0.0.1:7480")
        (True, False)
    """
    parts = urlsplit(url)
    return parts.username is not None or parts.password is not None


def redact_url(url: str) -> str:
    """``url`` without a ``user:password@`` part (endpoints must never leak credentials).

    Examples:
        >>> redact_url("http://key:secret@127.0.0.1:7480/")
        'http://127.0.0.1:7480/'
    """
    if not has_userinfo(url):
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


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
    text = _USERINFO.sub(r"\1", text)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


class MaskedError(Exception):
    """Stands in, as a chained cause, for a third-party exception that could not be copied masked.

    Its message is the original's type and masked message: ``botocore.exceptions.X: ...``.
    """

    def __init__(self, original: type[BaseException], message: str) -> None:
        super().__init__(f"{original.__module__}.{original.__qualname__}: {message}")
        self.original = f"{original.__module__}.{original.__qualname__}"


def _masked_value(value: Any, clean: Callable[[str], str], memo: dict[int, BaseException]) -> Any:
    """``value`` with every string cleaned, through dicts, lists, tuples and exceptions."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, BaseException):
        return masked(value, clean, memo)
    if isinstance(value, dict):
        return {k: _masked_value(v, clean, memo) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_masked_value(v, clean, memo) for v in value)
    return value


def masked(
    exc: BaseException, clean: Callable[[str], str], memo: dict[int, BaseException] | None = None
) -> BaseException:
    """A copy of ``exc``, and of its whole chain, whose every text went through ``clean``.

    The copy is rebuilt from ``exc``'s own pickling recipe (so it keeps its type:
    ``except botocore.exceptions.ClientError`` still works on a cause) with every string in its
    arguments and attributes cleaned. If that fails, or the copy still shows something
    ``clean`` would change, a :class:`MaskedError` with the original type's name stands in.
    The copy keeps ``exc``'s traceback: code locations, which show no values.

    Examples:
        >>> copy = masked(ValueError("http://u:pw@host/x"), lambda t: redact(t, None))
        >>> type(copy).__name__, str(copy)
        ('ValueError', 'http://host/x')
    """
    memo = {} if memo is None else memo
    if id(exc) in memo:
        return memo[id(exc)]
    copy: BaseException
    try:
        recipe: Any = exc.__reduce_ex__(4)
        rebuild, args = recipe[0], recipe[1]
        state = recipe[2] if len(recipe) > 2 else None
        copy = rebuild(*_masked_value(args, clean, memo))
        if isinstance(state, dict) and state:
            copy.__dict__.update(_masked_value(state, clean, memo))
        shown = [str(copy), repr(copy), repr(vars(copy))]
        if not isinstance(copy, BaseException) or any(clean(text) != text for text in shown):
            raise TypeError("the copy still shows a secret")
    except Exception:
        try:
            text = str(exc)
        except Exception:
            text = "(its message could not be read)"
        copy = MaskedError(type(exc), clean(text))
    memo[id(exc)] = copy
    copy.__traceback__ = exc.__traceback__
    copy.__cause__ = masked(exc.__cause__, clean, memo) if exc.__cause__ is not None else None
    copy.__context__ = masked(exc.__context__, clean, memo) if exc.__context__ is not None else None
    copy.__suppress_context__ = exc.__suppress_context__
    return copy


def raise_masked(error: TrackerSaverError, cause: BaseException, clean: Callable[[str], str]) -> NoReturn:
    """``raise error from masked(cause)``, with not even ``__context__`` holding the raw ``cause``.

    Call it while ``cause`` is being handled. Python makes the exception being handled the
    ``__context__`` of whatever is raised: raising the masked copy first, and ``error`` while
    handling it, leaves the raw exception in neither ``__cause__`` nor ``__context__``.
    """
    copy = masked(cause, clean)
    context, traceback = copy.__context__, copy.__traceback__
    try:
        raise copy
    except BaseException:
        copy.__context__, copy.__traceback__ = context, traceback  # what raising it just replaced
        raise error from copy


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
        tracker_saver.errors.StorageError: uploading to s3://ckpts/team/p/r/s.slot0.pt failed: cannot reach endpoint ...
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
