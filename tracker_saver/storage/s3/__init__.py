"""S3 storage through boto3 (AWS, Ceph RGW, MinIO): each write commits as one PUT or CompleteMultipartUpload."""

# One job per module:
#   storage.py   S3Storage, the Storage seam on S3
#   options.py   check the options; build the boto3 session, client and TransferConfig
#   errors.py    the one boundary where botocore/boto3/s3transfer errors become ours; redaction
#   parts.py     the streaming writer: parts uploaded in parallel while torch.save writes
#   staged.py    the staged write the pipeline drives: parts, then the commit point, or an abort
#   uploads.py   open multipart uploads (to abort) and commit attempts, through botocore events
#   progress.py  the tqdm bar for large transfers
# Importing this package needs boto3: open_storage turns that ModuleNotFoundError into an install hint.

from __future__ import annotations

from typing import Any

# Re-exported (``X as X``) for code that imported them from the single module this package
# replaced. Tunables that tests patch (LIST_PAGE_SIZE, PROGRESS_BYTES, KEEP_BYTES) are not:
# patch them in the module that uses them.
from tracker_saver.storage.s3.options import (
    DEFAULT_MAX_CONCURRENCY as DEFAULT_MAX_CONCURRENCY,
)
from tracker_saver.storage.s3.options import (
    DEFAULT_MULTIPART_CHUNKSIZE as DEFAULT_MULTIPART_CHUNKSIZE,
)
from tracker_saver.storage.s3.options import (
    DEFAULT_MULTIPART_THRESHOLD as DEFAULT_MULTIPART_THRESHOLD,
)
from tracker_saver.storage.s3.options import (
    parse_s3_uri as parse_s3_uri,
)
from tracker_saver.storage.s3.storage import KNOWN_OPTIONS as KNOWN_OPTIONS
from tracker_saver.storage.s3.storage import PROBE_NAME as PROBE_NAME
from tracker_saver.storage.s3.storage import S3Storage

__all__ = ["S3Storage", "from_uri"]


def from_uri(uri: str, **storage_options: Any) -> S3Storage:
    """``s3://BUCKET/PREFIX`` as an :class:`S3Storage` with its storage options."""
    return S3Storage(uri, **storage_options)
