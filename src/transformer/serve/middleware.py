"""Two ASGI middlewares around the app: the request-body limit and the access log.

``BodyLimit`` reads the body before the app sees it, up to ``max_bytes``: a larger body (by its
Content-Length, or by what arrives) is answered 413 at once, with the API's JSON error.

``AccessLog`` writes one JSON line per request to the ``transformer.serve.access`` logger:
time, client, method, path, status and milliseconds, plus what the endpoint put in
``request.state.log`` (sentence and character counts; the sentences themselves only if the
server was started with ``--serve.log_text``). The request text is not logged by default.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import datetime, timezone
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("transformer.serve.access")


async def send_json(send: Send, status: int, body: dict, headers: dict[str, str] | None = None):
    """A complete JSON response, for a middleware that answers instead of the app."""
    payload = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


class BodyLimit:
    """Answers 413 to a request whose body is larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send, int(declared))
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._too_large(send, size, "at least ")
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: disconnect notices
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, send: Send, size: int, qualifier: str = "") -> None:
        message = (
            f"the request body has {qualifier}{size} bytes; this server accepts at most "
            f"{self.max_bytes} (serve.max_body_bytes)"
        )
        await send_json(send, 413, {"error": "body_too_large", "message": message})


class AccessLog:
    """One structured (JSON) line per HTTP request, written when its response is complete."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500  # 500 unless the app answers

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            client = scope.get("client") or ("-", 0)
            line = {
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "client": client[0],
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "ms": round((time.perf_counter() - start) * 1000, 1),
                **scope.get("state", {}).get("log", {}),
            }
            access_log.info(json.dumps(line, ensure_ascii=False))
