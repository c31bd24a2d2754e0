"""The web UI's FastAPI app: a JSON API under ``/api`` over the public model functions, and the page.

Like the CLI, every endpoint calls one public function of :mod:`tracker_saver.models`; the app
adds validation, error mapping and :class:`~tracker_saver.ui.guard.Guard` (host names, cross-site
requests, body size, security headers), nothing else. Errors are ``{"detail": "..."}`` with the
status of their class (see ``_STATUS``) and never carry a path, a credential or a traceback.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Annotated, Any, BinaryIO
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi import Path as PathParam
from fastapi import Query as QueryParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from tracker_saver import models
from tracker_saver.core.errors import (
    ConfigError,
    IntegrityError,
    RecordNotFoundError,
    RegistryError,
    StorageError,
    TrackerSaverError,
)
from tracker_saver.core.naming import key_ext, safe_filename
from tracker_saver.core.records import RecordState
from tracker_saver.registry import Registry
from tracker_saver.ui.guard import SECURITY_HEADERS, Guard
from tracker_saver.ui.schema import (
    ALIAS_PATTERN,
    AliasIn,
    ChartOut,
    DetailOut,
    ErrorOut,
    PageOut,
    PointOut,
    RecordOut,
    RenameIn,
    SeriesOut,
    TagsIn,
    public_message,
    record_out,
)

__all__ = ["create_app"]

#: The most records one page or one chart may hold.
MAX_PAGE = 500
MAX_CHART_POINTS = 5000
#: States whose records are saved checkpoints: the chart's points (pinned copies would repeat them).
CHART_STATES = (RecordState.LIVE, RecordState.REVIVED, RecordState.EVICTED)
#: Downloads sent at once; one more is refused (429) until one ends. Each holds an open object:
#: on S3, its verified download (in memory up to the storage's spool size, else a temp file).
MAX_DOWNLOADS = 2
#: The bytes a download sends per read.
_CHUNK = 1 << 20
#: Most specific first: RecordNotFoundError is a RegistryError, IntegrityError a StorageError.
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (RecordNotFoundError, 404),
    (ConfigError, 422),
    (IntegrityError, 409),
    (RegistryError, 409),
    (StorageError, 502),
    (TrackerSaverError, 400),
)
_STATIC = resources.files("tracker_saver.ui") / "static"
_ORDER = r"^[-+]?[A-Za-z_][A-Za-z0-9_.-]{0,99}$"

Text = Annotated[str | None, QueryParam(max_length=1000)]
RecordId = Annotated[str, PathParam(min_length=1, max_length=200)]


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        parts.append(f"{where or 'request'}: {err.get('msg', 'invalid')}")
    return public_message("; ".join(parts) or "invalid request")


def _attachment(filename: str) -> str:
    """A ``Content-Disposition`` that saves the bytes as ``filename`` (as Starlette's ``FileResponse`` writes it)."""
    quoted = quote(filename)
    return f"attachment; filename*=utf-8''{quoted}" if quoted != filename else f'attachment; filename="{filename}"'


def _chunks(file: BinaryIO) -> Iterator[bytes]:
    """``file``'s bytes, :data:`_CHUNK` at a time."""
    while chunk := file.read(_CHUNK):
        yield chunk


class _Download(StreamingResponse):
    """A download's bytes; ``done`` (the open object, the download's place) closes when the response
    ends, however it ends: all sent, the client gone, or the server stopping.

    A client that goes away mid-download makes Starlette cancel the sending at its
    ``http.disconnect``; the byte iterator is then left suspended, and only the garbage collector
    would close it (minutes later, or never while other traffic is low). This ``finally`` runs at
    the cancellation itself. No read is in flight then: a read in the worker thread is waited for.
    """

    def __init__(self, file: BinaryIO, done: contextlib.ExitStack, headers: dict[str, str]) -> None:
        super().__init__(_chunks(file), media_type="application/octet-stream", headers=headers)
        self.done = done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.done.close()


def create_app(
    registry: str | os.PathLike[str] | Registry | None = None,
    *,
    allowed_hosts: Sequence[str] | None = None,
    max_downloads: int = MAX_DOWNLOADS,
) -> FastAPI:
    """The UI over ``registry``: the page at ``/``, the JSON API under ``/api``, the schema at ``/openapi.json``.

    Args:
        registry: which registry to show (as :func:`tracker_saver.registry.open_registry` reads it).
        allowed_hosts: host names to answer (``["127.0.0.1", "localhost", "::1"]`` stops DNS
            rebinding on a loopback server; any port); ``None`` answers any.
        max_downloads: downloads sent at once; one more gets 429 until one ends.

    Examples:
        >>> from fastapi.testclient import TestClient
        >>> TestClient(create_app(":memory:")).get("/api/models").json()
        {'items': [], 'total': 0, 'offset': 0, 'limit': 50}
    """
    app = FastAPI(
        title="tracker_saver",
        summary="Checkpoint records: find, rename, tag, alias, pin and download them",
        version="1",
        docs_url=None,  # Swagger and ReDoc load their scripts from a CDN: the schema stays at /openapi.json
        redoc_url=None,
    )
    app.add_middleware(Guard, hosts=allowed_hosts)
    downloads = threading.BoundedSemaphore(max_downloads)

    @app.exception_handler(TrackerSaverError)
    async def known(request: Request, exc: TrackerSaverError) -> JSONResponse:
        status = next(code for kind, code in _STATUS if isinstance(exc, kind))
        return _error(status, public_message(str(exc)))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        traceback.print_exception(exc, file=sys.stderr)  # the server's log has the trace; the page does not
        return _error(500, "internal error: the server log has the details")

    codes = (400, 403, 404, 409, 413, 422, 429, 502)
    errors: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in codes}
    api = APIRouter(prefix="/api", responses=errors)

    @api.get("/models", response_model=PageOut, summary="Records matching filters, one page, sorted")
    def list_models(
        project: Text = None,
        run: Text = None,
        stream: Text = None,
        state: RecordState | None = None,
        where: Annotated[
            str | None, QueryParam(max_length=2000, description="e.g. score>0.9 and global_step<=20")
        ] = None,
        order_by: Annotated[str, QueryParam(pattern=_ORDER)] = "-created_at",
        offset: Annotated[int, QueryParam(ge=0, le=10**9)] = 0,
        limit: Annotated[int, QueryParam(ge=1, le=MAX_PAGE)] = 50,
    ) -> PageOut:
        filters: dict[str, Any] = {
            "project": project or None,
            "run": run or None,
            "stream": stream or None,
            "states": [state] if state is not None else None,
            "where": where,
        }
        records = models.find_models(**filters, order_by=order_by, offset=offset, limit=limit, registry=registry)
        total = models.count_models(**filters, registry=registry)
        return PageOut(items=[record_out(r) for r in records], total=total, offset=offset, limit=limit)

    @api.get("/chart", response_model=ChartOut, summary="Score against step per stream, newest points first")
    def chart(
        project: Text = None,
        run: Text = None,
        stream: Text = None,
        state: RecordState | None = None,
        where: Annotated[str | None, QueryParam(max_length=2000)] = None,
        limit: Annotated[int, QueryParam(ge=1, le=MAX_CHART_POINTS)] = 2000,
    ) -> ChartOut:
        states = [s for s in CHART_STATES if state is None or s == state]
        series: dict[tuple[str, str, str], SeriesOut] = {}
        if states:
            records = models.find_models(
                project=project or None,
                run=run or None,
                stream=stream or None,
                states=states,
                where=where,
                order_by="-created_at",
                limit=limit,
                registry=registry,
            )
            for r in reversed(records):
                out = record_out(r)
                if out.score is None or not math.isfinite(out.score) or out.step is None:
                    continue  # no point to draw: a chart has no place for an infinite score
                key = (r.project, r.run, r.stream)
                if key not in series:
                    series[key] = SeriesOut(
                        project=out.project, run=out.run, stream=out.stream, score_name=out.score_name, points=[]
                    )
                cost = out.timings
                series[key].points.append(
                    PointOut(
                        id=out.id,
                        name=out.name,
                        step=out.step,
                        score=out.score,
                        state=out.state,
                        blocked_s=cost.blocked_s if cost else None,
                        durable_s=cost.durable_s if cost else None,
                    )
                )
        for s in series.values():
            s.points.sort(key=lambda p: (p.step, int(p.id) if p.id.isdigit() else 0))
        return ChartOut(series=sorted(series.values(), key=lambda s: (s.project, s.run, s.stream)))

    @api.get("/models/{record_id}", response_model=DetailOut, summary="A record and the history of its slot")
    def show(record_id: RecordId) -> DetailOut:
        record = models.get_model(record_id, registry=registry)
        history = models.slot_history(record, registry=registry)
        return DetailOut(record=record_out(record), history=[record_out(r) for r in history])

    @api.patch("/models/{record_id}", response_model=RecordOut, summary="Rename: later saves never overwrite it")
    def rename(record_id: RecordId, body: RenameIn) -> RecordOut:
        return record_out(models.rename_model(record_id, body.name, registry=registry))

    @api.post("/models/{record_id}/tags", response_model=RecordOut, summary="Add tags")
    def add_tags(record_id: RecordId, body: TagsIn) -> RecordOut:
        return record_out(models.add_tags(record_id, body.tags, registry=registry))

    @api.delete("/models/{record_id}/tags", response_model=RecordOut, summary="Remove tags")
    def remove_tags(
        record_id: RecordId, tag: Annotated[list[str], QueryParam(min_length=1, max_length=100)]
    ) -> RecordOut:
        return record_out(models.remove_tags(record_id, tag, registry=registry))

    @api.post(
        "/models/{record_id}/aliases",
        response_model=RecordOut,
        summary="Point a user alias at the record (a slot record is pinned first; the record named is returned)",
    )
    def set_alias(record_id: RecordId, body: AliasIn) -> RecordOut:
        return record_out(models.set_alias(record_id, body.alias, registry=registry))

    @api.delete("/models/{record_id}/aliases/{alias}", response_model=RecordOut, summary="Remove a user alias")
    def remove_alias(record_id: RecordId, alias: Annotated[str, PathParam(pattern=ALIAS_PATTERN)]) -> RecordOut:
        record = models.get_model(record_id, registry=registry)
        if alias not in record.aliases:
            raise RecordNotFoundError(
                f"record {record_id} has no alias {alias!r}: it has {', '.join(record.aliases) or 'none'}",
                record_id=record_id,
            )
        models.remove_alias(record.project, alias, registry=registry)
        return record_out(models.get_model(record_id, registry=registry))

    @api.post("/models/{record_id}/pin", response_model=RecordOut, summary="Copy to a stable key (a pinned record)")
    def pin(record_id: RecordId) -> RecordOut:
        return record_out(models.pin_model(record_id, registry=registry))

    @api.delete("/models/{record_id}/pin", status_code=204, summary="Delete a pinned record and its object")
    def unpin(record_id: RecordId) -> Response:
        models.unpin_model(record_id, registry=registry)
        return Response(status_code=204)

    @api.get(
        "/models/{record_id}/download",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/octet-stream": {}}}},
        summary="The object's bytes, verified against the record's sha256 before the first byte is sent",
    )
    def download(record_id: RecordId) -> Response:
        record = models.get_model(record_id, registry=registry)
        if not downloads.acquire(blocking=False):
            busy = f"{max_downloads} downloads are being sent, the most this server sends at once: retry when one ends"
            return _error(429, busy, {"Retry-After": "5"})
        done = contextlib.ExitStack()
        done.callback(downloads.release)
        try:
            # Hashed, then sent from the same open object: locally the slot file itself (a save's
            # os.replace cannot change what is sent), on S3 its one verified download.
            file = done.enter_context(models.open_verified(record))
        except BaseException:
            done.close()
            raise
        name = safe_filename(record.name, key_ext(record.filename))
        headers = {
            "Content-Disposition": _attachment(name),
            "Content-Length": str(record.size),
            "X-Checkpoint-SHA256": record.sha256 or "",
        }
        return _Download(file, done, headers)

    app.include_router(api)

    @app.get("/", include_in_schema=False)
    def index() -> Response:
        return Response((_STATIC / "index.html").read_bytes(), media_type="text/html; charset=utf-8")

    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")
    return app
