"""The server's errors: every one is JSON ``{"error": code, "message": one line}`` (``ErrorBody``),
never a traceback; a bug is a 500 whose body says only that the server's log has the details.
Also the API key's check, and pydantic's validation errors as one line naming the field (the
server's own limits are ``schema.Limits``).
"""

import hmac
import logging
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from .schema import ErrorBody

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered as ``ErrorBody`` JSON with ``status`` (and ``headers``)."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def statuses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entries of the error statuses a route can answer."""
    return {code: {"model": ErrorBody} for code in codes}


def key_required(api_key: str | None) -> dict[str, Any]:
    """Route options that require ``Authorization: Bearer API_KEY``; none without a key, so that
    the schema says exactly what this server asks for."""
    if api_key is None:
        return {}
    bearer = HTTPBearer(auto_error=False, description="the server's API key")

    def require_key(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        given = credentials.credentials if credentials else ""
        if not hmac.compare_digest(given.encode(), api_key.encode()):
            raise ApiError(401, "unauthorized", "send the server's API key as 'Authorization: "
                           "Bearer KEY'", {"WWW-Authenticate": "Bearer"})  # fmt: skip

    return {"dependencies": [Depends(require_key)]}


INTERNAL = "internal error; the server's log has the details"
_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
          413: "body_too_large", 415: "unsupported_media_type"}  # fmt: skip


def add_error_handlers(app: FastAPI) -> None:
    """Every error as ``ErrorBody`` JSON; a bug becomes a 500 whose body says nothing more."""

    def error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"error": code, "message": message}, status, headers)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return error(e.status, e.code, e.message, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        return error(422, "invalid_request", validation_message(e.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        code = _CODES.get(e.status_code, "error")
        return error(e.status_code, code, str(e.detail), getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def bug(request: Request, e: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=e)
        return error(500, "internal_error", INTERNAL)


def validation_message(errors: Any) -> str:
    """pydantic's errors as one line that names each field; the values sent are not echoed."""
    parts = []
    for e in list(errors)[:3]:
        where = ".".join(_named(part) for part in e.get("loc", ()) if part != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = len(errors) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _named(part: object, most: int = 40) -> str:
    """A field's name as a message shows it: a key the client made up (an unknown field) is
    shortened, and its line breaks and other control characters are escaped, so that the
    message stays one short line (a key of 60,000 characters came back whole)."""
    text = str(part)
    if len(text) > most:
        text = f"{text[:most]}... ({len(text):,} characters)"
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
