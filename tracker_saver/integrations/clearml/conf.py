"""S3 options for an output_uri from clearml.conf (``sdk.aws.s3``), when boto3 finds no credentials."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["clearml_s3_options", "with_clearml_credentials"]


def clearml_s3_options(output_uri: str, endpoint_url: str | None = None) -> dict[str, Any]:
    """S3 options from clearml.conf (``sdk.aws.s3``) for ``output_uri``, if boto3 finds no credentials.

    ClearML users keep their keys in clearml.conf. boto3's own chain (environment, profile,
    instance role) wins; only when it has nothing are the bucket's (or the default) key, secret,
    region and host taken from there. For a non-AWS host, ClearML names buckets
    ``s3://HOST:PORT/BUCKET``; ``endpoint_url`` (or ``AWS_ENDPOINT_URL``) selects that entry.

    Examples:
        >>> clearml_s3_options("/not/s3")
        {}
    """
    if not output_uri.startswith("s3://"):
        return {}
    import boto3
    from clearml.config import get_config_for_bucket

    if boto3.Session().get_credentials() is not None:
        return {}
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    lookup = output_uri
    if endpoint:
        host = endpoint.split("://", 1)[-1].rstrip("/")
        lookup = f"s3://{host}/{output_uri[len('s3://') :]}"
    cfg = get_config_for_bucket(lookup)
    if not (cfg.key and cfg.secret):
        return {}
    options: dict[str, Any] = {"aws_access_key_id": cfg.key, "aws_secret_access_key": cfg.secret}
    if cfg.token:
        options["aws_session_token"] = cfg.token
    if cfg.region:
        options["region_name"] = cfg.region
    if cfg.host and not endpoint_url:
        options["endpoint_url"] = f"{'https' if cfg.secure else 'http'}://{cfg.host}"
    return options


def with_clearml_credentials(output_uri: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` plus clearml.conf's S3 credentials for ``output_uri``, when ``options`` names none.

    Examples:
        >>> with_clearml_credentials("/data/ckpt", {"profile": "team"})
        {'profile': 'team'}
    """
    if any(k in options for k in ("aws_access_key_id", "profile")):
        return dict(options)
    return {**clearml_s3_options(output_uri, options.get("endpoint_url")), **options}
