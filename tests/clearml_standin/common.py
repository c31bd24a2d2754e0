"""What every part of the stand-in shares: its identity, its errors (the real server's codes), ids and clock."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

#: Test credentials the stand-in accepts (they protect nothing: the server only listens on 127.0.0.1).
ACCESS_KEY = "STANDIN_ACCESS_KEY"
SECRET_KEY = "standin-secret-key-not-a-real-secret"

API_VERSION = "2.31"
SERVER_VERSION = "1.17.0"
USER_ID, USER_NAME, COMPANY_ID, COMPANY_NAME = "standin-user", "Stand-in User", "standin-company", "stand-in"
USER: dict[str, Any] = {"id": USER_ID, "name": USER_NAME, "company": {"id": COMPANY_ID, "name": COMPANY_NAME}}
_BUILD = {"version": SERVER_VERSION, "build": "standin", "commit": "standin"}


class StandInError(Exception):
    """An API error the stand-in answers with (HTTP status = ``code``)."""

    def __init__(self, code: int, subcode: int, msg: str) -> None:
        super().__init__(msg)
        self.code, self.subcode, self.msg = code, subcode, msg


@dataclass
class Call:
    """One request the stand-in received (body already parsed)."""

    endpoint: str
    data: Any
    at: float
    status: int = 200


@dataclass
class _Fault:
    pattern: re.Pattern[str]
    code: int
    subcode: int
    msg: str
    times: int | None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _new_id() -> str:
    return uuid.uuid4().hex


def _invalid(what: str, code: int, subcode: int) -> Callable[[str], StandInError]:
    return lambda value: StandInError(code, subcode, f"Invalid {what} id: id={value}")


_bad_model = _invalid("model", 400, 201)
_bad_task = _invalid("task", 400, 101)
_bad_project = _invalid("project", 400, 401)


def _forbidden() -> StandInError:
    """clearml-server's ``errors.forbidden.NoWritePermission``."""
    return StandInError(403, 21, "Forbidden (modification not allowed)")
