"""botocore event hooks that feed one S3 client's requests to an :class:`~tracker_saver.core.outage.Outage`.

``before-send`` asks the clock before every attempt (a refused attempt raises ``OutageError``
without touching the network); ``needs-retry``, registered first, tells it how each attempt
ended and stops botocore's retries, and the sleep before them, once the back end has failed
for half the timeout. s3transfer's part uploads and its abort of a failed upload go through
the same client, so they share the clock.
"""

from __future__ import annotations

import threading
from typing import Any

from tracker_saver.core.outage import Outage, OutageError

__all__ = ["watch"]


def watch(client: Any, outage: Outage) -> None:
    """Make every request of ``client`` (a botocore S3 client) go through ``outage``.

    Examples:
        An endpoint that has not answered for 7 s of a 10 s timeout is not tried again
        (the clock is a fake one here; no request is sent):

        >>> import boto3
        >>> client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", region_name="us-east-1",
        ...                       aws_access_key_id="k", aws_secret_access_key="s")
        >>> now = [0.0]
        >>> outage = Outage(10.0, clock=lambda: now[0]); watch(client, outage)
        >>> outage.failed(outage.attempt(), "EndpointConnectionError")
        >>> now[0] = 7.0; outage.failed(outage.attempt())  # down now: no try for 5 s
        >>> client.list_buckets()
        Traceback (most recent call last):
        ...
        tracker_saver.core.outage.OutageError: no answer for 7.0 s (timeout 10 s); last error: EndpointConnectionError; next try in 5.0 s
    """
    started = threading.local()

    def before_send(**_: Any) -> None:
        started.at = outage.attempt()

    def needs_retry(response: Any = None, caught_exception: BaseException | None = None, **_: Any) -> None:
        if isinstance(caught_exception, OutageError):
            raise caught_exception  # refused before sending: no retry, no sleep
        status = response[0].status_code if response is not None else None
        if caught_exception is None and status is not None and status < 500:
            outage.succeeded()
            return
        error = type(caught_exception).__name__ if caught_exception is not None else f"HTTP {status}"
        outage.failed(getattr(started, "at", 0.0), error)
        if outage.exhausted():
            if caught_exception is not None and outage.is_impatient():
                raise caught_exception  # a set-up check: the error itself says what is wrong
            raise OutageError(outage.describe()) from caught_exception

    client.meta.events.register("before-send.s3", before_send, unique_id="tracker-saver-outage-send")
    client.meta.events.register_first("needs-retry.s3", needs_retry, unique_id="tracker-saver-outage-retry")
