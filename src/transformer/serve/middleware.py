"""Three ASGI middlewares around the app: the request body's limits, HEAD, and the access log.

``BodyLimit`` reads the body before the app sees it, up to ``max_bytes``: a larger body (by its
Content-Length, or by what arrives) is answered 413 at once, and a body that has not arrived
within ``timeout`` seconds (``serve.body_timeout``: one byte a second is not a client, it is a
held connection) 408, both with the API's JSON error and ``Connection: close``. A body that is
not UTF-8 is a 422 naming the byte (it was a 400 naming nothing), and a JSON body that gives a
key twice in one object a 422 naming the key: the JSON parser would keep the last one, where a
proxy or a log in front of the server may have read the first.

``HeadAsGet`` answers HEAD wherever GET works: the GET route runs and its body is dropped
(RFC 9110 §9.3.2: the same headers as GET, no content).

``AccessLog`` writes one JSON line per request to the ``transformer.serve.access`` logger:
time, client, method, path, status and milliseconds, plus what the endpoint put in
``request.state.log`` (sentence and character counts; the sentences themselves only if the
server was started with ``--serve.log_text``). The request text is not logged by default. A
client that disconnects before any answer is logged with status 499 (nginx's "client closed
request"), not as a server error.
"""

from __future__ import annotations

import asyncio
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


CLIENT_GONE = 499  # nginx's status for a request whose client closed the connection


class BodyLimit:
    """Answers 413 to a request whose body is larger than ``max_bytes``, and 408 to one whose
    body has not arrived within ``timeout`` seconds."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send, int(declared))
            return
        chunks, size, more = [], 0, True
        deadline = time.monotonic() + self.timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                await self._too_slow(send, size)
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._too_large(send, size, "at least ")
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False
        problem = _body_problem(body)
        if problem is not None:
            await send_json(send, 422, {"error": "invalid_request", "message": problem})
            return

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
        await send_json(send, 413, {"error": "body_too_large", "message": message}, _CLOSE)

    async def _too_slow(self, send: Send, size: int) -> None:
        message = (
            f"the request body did not arrive within {self.timeout:g} s ({size} bytes came; "
            f"serve.body_timeout)"
        )
        await send_json(send, 408, {"error": "body_timeout", "message": message}, _CLOSE)


_CLOSE = {"Connection": "close"}  # the rest of the body is not read: the connection ends


class _Twice(Exception):
    pass


def _body_problem(body: bytes) -> str | None:
    """What makes ``body`` no request (one line), or None: bytes that are not UTF-8 (JSON's
    encoding), or a key given twice in one object (``_key_given_twice``)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        return (f"body: not valid UTF-8 (byte {body[error.start]:#04x} at offset {error.start}); "
                "JSON is sent in UTF-8")  # fmt: skip
    twice = _key_given_twice(body)
    if twice is not None:
        return f"body: the key {twice} is given twice in one object; give each key once"
    return None


def _key_given_twice(body: bytes) -> str | None:
    """The first key that a JSON ``body`` gives twice in one object (shortened, as JSON), or
    None; a body that is not JSON is left to the app's own errors."""

    def pairs(found: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in found:  # one pass: a body of 6,000 keys is 6,000 steps, not 18 million
            if key in seen:
                raise _Twice(json.dumps(key if len(key) <= 40 else key[:40] + "..."))
            seen.add(key)
        return dict(found)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except _Twice as twice:
        return str(twice)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep: the app's
        return None
    return None


class HeadAsGet:
    """HEAD wherever GET works: the request goes to the app as GET, its body is dropped."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


class AccessLog:
    """One structured (JSON) line per HTTP request, written when its response is complete."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500  # 500 unless the app answers
        started = gone = False

        async def watched(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
            await send(message)

        async def listened() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or (message["type"] == "http.disconnect" and not started)
            return message

        try:
            await self.app(scope, listened, watched)
        finally:
            if gone and not started:  # left before any answer: not the server's failure
                status = CLIENT_GONE
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
