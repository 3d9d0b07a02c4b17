"""The HTTP API and the web page: a FastAPI app around one ``Batcher``.

    POST /translate   sentences in, translations (n-best, scores) and the time taken out
    POST /attention   the encoder-decoder attention weights of one sentence, for the page
    GET  /info        languages, configs, parameter count and engine
    GET  /health      readiness, and how many requests are in flight
    GET  /            the web page (``page/``), served by the app itself: no CDN
    GET  /openapi.json

Every error is JSON ``{"error": code, "message": one line}`` with a 4xx status, or 500 with a
generic message for a bug (whose traceback goes to the server's log, never into a response):
400 for a body that is not UTF-8, 401 without the API key, 408 for a body slower than
``body_timeout``, 413 for a body over ``max_body_bytes``, 422 for an invalid request (too many
sentences, a sentence too long, a beam too wide, more decoding work than ``max_cost``, a field
of the wrong type or name, JSON that does not parse), 429 with ``Retry-After`` when
``max_queue`` sentences are already waiting, 503 while shutting down, 504 when a request waited
longer than ``timeout``. A request whose client disconnects is dropped from the queue, or its
sentences stop being decoded (``Batcher.abandon``), and it is logged as 499. HEAD works wherever
GET does; the page may not be framed by another site (``frame-ancestors 'none'``).

The engine is ours (torch) or CTranslate2 (``serve --engine ctranslate2``): /translate and the
batching are the same for both; /attention needs our model's attention maps, so with
CTranslate2 it answers 501, which the page shows when a translation is clicked.

(No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations, which name
request models made inside ``create_app``.)
"""

import asyncio
import hmac
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from ..config import DecodeConfig, ModelConfig
from ..errors import BadValue, UserError
from ..inference.engine import Engine, TorchEngine
from ..inspect.attention import inspect_sentence
from .batcher import Batcher, QueueFull, ShuttingDown
from .config import ServeConfig
from .middleware import CLIENT_GONE, AccessLog, BodyLimit, HeadAsGet
from .schema import (
    AttentionResponse,
    ErrorBody,
    HealthResponse,
    Hypothesis,
    InfoResponse,
    SentenceTranslation,
    TranslateResponse,
    request_models,
)

PAGE = Path(__file__).parent / "page"
log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered as ``ErrorBody`` JSON with ``status`` (and ``headers``)."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entries of the error statuses a route can answer."""
    return {status: {"model": ErrorBody} for status in statuses}


def create_app(engine: Engine, config: ServeConfig = ServeConfig()) -> FastAPI:  # noqa: B008
    """The app that serves ``engine``; its worker thread starts now and stops at shutdown.

    ``config.api_key`` (already resolved from the environment by the caller), when set, is
    required as ``Authorization: Bearer KEY`` on /translate, /attention and /info.
    """
    default = replace(engine.decode, max_source_tokens=config.batch_tokens)
    batcher = Batcher(engine, config.batch_tokens, config.max_wait_ms, config.max_queue)
    model_config = engine.config.model
    TranslateRequest, AttentionRequest = request_models(config, model_config.max_positions)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await asyncio.to_thread(batcher.close)  # finishes what is queued

    app = FastAPI(title="transformer", version="1", lifespan=lifespan, docs_url=None,
                  redoc_url=None, summary="Translation with the Transformer of 'Attention Is "
                  "All You Need'.")  # fmt: skip
    app.state.batcher = batcher
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout=config.body_timeout)
    app.add_middleware(AccessLog)
    _add_error_handlers(app)
    protected, keyed = _key_required(config.api_key), (401,) if config.api_key else ()

    async def answer(future_of: Callable[[], Future], request: Request) -> Any:
        """What the worker returns for a job, as the API's errors when it cannot; a job whose
        client left or whose time ran out is abandoned (no more work on it)."""
        try:
            future = future_of()
        except QueueFull as error:
            raise ApiError(429, "queue_full", f"the server is busy: {error}; retry later",
                           {"Retry-After": "1"}) from None  # fmt: skip
        except ShuttingDown as error:
            raise ApiError(503, "shutting_down", str(error)) from None
        result, left = asyncio.wrap_future(future), asyncio.ensure_future(_client_left(request))
        try:
            await asyncio.wait({result, left}, timeout=config.timeout,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            left.cancel()
        if not result.done():
            batcher.abandon(future)
            if left.done() and not left.cancelled():
                raise ApiError(CLIENT_GONE, "client_closed_request", "the client left")
            message = f"no answer within {config.timeout:g} s (serve.timeout); try again later"
            raise ApiError(504, "timeout", message)
        try:
            return result.result()
        except UserError as error:
            raise ApiError(422, "invalid_request", str(error)) from None
        except Exception:  # a bug: its traceback goes to the log, not to the client
            log.exception("the worker failed")
            raise ApiError(500, "internal_error", _INTERNAL) from None

    def check_cost(sentences: list[str], decode: DecodeConfig) -> None:
        """422 for a request that may ask for more decoding work than ``serve.max_cost``."""
        n, longest, hypotheses = decoding_cost(sentences, decode, engine, model_config)
        if n * hypotheses > config.max_cost:
            message = (
                f"this request may decode {n * hypotheses:,} tokens (up to {longest} per "
                f"sentence, {n:,} in all, x {hypotheses} hypotheses); this server allows "
                f"{config.max_cost:,} (serve.max_cost): send fewer sentences, a smaller beam or "
                "max_len"
            )
            raise ApiError(422, "over_budget", message)

    @app.post("/translate", response_model=TranslateResponse, **protected,
              responses=_errors(*keyed, 400, 408, 413, 422, 429, 500, 503, 504))  # fmt: skip
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        """Translates one or more sentences; the search options default to the model's."""
        start = time.perf_counter()
        sentences: list[str] = body.sentences
        request.state.log = _log_fields(sentences, config.log_text)
        decode = _search(default, body.beam, body.nbest, body.max_len, body.sampling)
        check_cost(sentences, decode)
        batched = await answer(lambda: batcher.translate(sentences, decode), request)
        truncated = set(batched.result.truncated)
        translations = [
            SentenceTranslation(
                text=options[0].text,
                score=_finite(options[0].score),
                nbest=[Hypothesis(text=o.text, score=_finite(o.score)) for o in options],
                truncated=i in truncated,
            )  # fmt: skip
            for i, options in enumerate(batched.result.nbest)
        ]
        ms = (time.perf_counter() - start) * 1000
        return TranslateResponse(translations=translations, time_ms=ms,
                                 batch_sentences=batched.batch_sentences)  # fmt: skip

    @app.post("/attention", response_model=AttentionResponse, **protected,
              responses=_errors(*keyed, 400, 408, 413, 422, 429, 500, 501, 503, 504))  # fmt: skip
    async def attention(body: AttentionRequest, request: Request) -> AttentionResponse:
        """Translates one sentence and returns its encoder-decoder attention, layer by layer
        (torch engine only: 501 with CTranslate2)."""
        start = time.perf_counter()
        if not isinstance(engine, TorchEngine):
            raise ApiError(501, "not_implemented", f"attention maps need the torch engine; this "
                           f"server runs {engine.name} (serve --engine torch)")  # fmt: skip
        request.state.log = _log_fields([body.sentence], config.log_text)
        decode = _search(default, body.beam, 1, body.max_len, False)
        check_cost([body.sentence], decode)

        def inspect() -> dict:
            with torch.inference_mode(), engine.precision():
                seen = inspect_sentence(engine.model, engine.tokenizers, body.sentence, decode)
            # Rounded in float64: a float32 0.0001 would reach the JSON as 9.999999747378752e-05.
            weights = [layer.cross_attention[0].double() for layer in seen.maps.decoder]
            return {"translation": seen.translation, "source_tokens": seen.src_labels,
                    "target_tokens": seen.tgt_labels,
                    "cross_attention": [w.round(decimals=4).tolist()  # (H, T, S) per layer
                                        for w in weights]}  # fmt: skip

        found = await answer(lambda: batcher.call(inspect), request)
        return AttentionResponse(**found, time_ms=(time.perf_counter() - start) * 1000)

    @app.get("/info", response_model=InfoResponse, **protected, responses=_errors(*keyed))
    async def info() -> InfoResponse:
        """The languages, the model's config and size, the engine, the default search and the
        limits."""
        data = engine.config.data
        limits = {name: getattr(config, name) for name in ("max_body_bytes", "max_sentences",
                  "max_chars", "max_beam", "max_queue", "timeout", "max_cost", "body_timeout",
                  "idle_timeout")}  # fmt: skip
        return InfoResponse(
            source_language=data.src_lang, target_language=data.tgt_lang,
            parameters=engine.parameters, checkpoint=engine.path.name, engine=engine.name,
            device=engine.device, model=asdict(model_config), decode=asdict(default),
            limits=limits,
        )  # fmt: skip

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        """Ready: the model is loaded (the server listens only once it is)."""
        return HealthResponse(status="ok", in_flight=batcher.in_flight)

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE / "index.html", headers=_PAGE_HEADERS)

    app.mount("/page", StaticFiles(directory=PAGE), name="page")
    return app


def _key_required(api_key: str | None) -> dict[str, Any]:
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


def decoding_cost(
    sentences: list[str], decode: DecodeConfig, engine: Engine, model: ModelConfig
) -> tuple[int, int, int]:
    """(output tokens the sentences may reach in all, the most one may reach, hypotheses kept
    per step): the search's own limit per sentence, floor(a · source length + b) capped at
    max_positions - 1 (``search.output_length_limits``; ``max_len`` sets a = 0, b = max_len),
    the source counting its pieces and EOS, cut to max_positions as ``translate_with`` cuts it.
    Empty sentences cost nothing."""
    a, b, top = decode.max_len_a, decode.max_len_b, model.max_positions - 1
    encode = engine.tokenizers.src.encode
    lengths = [min(len(encode(s)) + 1, model.max_positions) for s in sentences if s.strip()]
    limits = [max(0, min(math.floor(a * n + b), top)) for n in lengths]
    hypotheses = decode.nbest if decode.sampling else decode.beam_size
    return sum(limits), max(limits, default=0), hypotheses


async def _client_left(request: Request) -> None:
    """Returns when the client disconnects (uvicorn's receive says so once the body is read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# The page loads nothing from elsewhere, and no other site may frame it (clickjacking); the
# browser enforces both. X-Frame-Options is for browsers older than CSP's frame-ancestors.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
}


def _search(
    default: DecodeConfig, beam: int | None, nbest: int | None, max_len: int | None,
    sampling: bool | None,
) -> DecodeConfig:  # fmt: skip
    """The server's default search with a request's options on top (422 if they conflict)."""
    changes: dict[str, Any] = {}
    if sampling is not None:
        changes["sampling"] = sampling
    if beam is not None:
        changes["beam_size"] = beam
    if nbest is not None:
        changes["nbest"] = nbest
        if beam is None and nbest > default.beam_size:
            changes["beam_size"] = nbest  # as `translate --decode.nbest` does: widen the beam
    if max_len is not None:
        changes["max_len_a"], changes["max_len_b"] = 0.0, max_len
    settings = {**asdict(default), **changes}
    if settings["nbest"] > settings["beam_size"] and not settings["sampling"]:
        raise ApiError(422, "invalid_request", f"nbest ({settings['nbest']}) cannot exceed beam "
                       f"({settings['beam_size']}) unless sampling")  # fmt: skip
    try:
        return replace(default, **changes)
    except BadValue as error:  # e.g. a server started with --decode.nbest above this beam
        raise ApiError(422, "invalid_request", str(error)) from None


def _finite(score: float) -> float | None:
    return score if math.isfinite(score) else None


def _log_fields(sentences: list[str], with_text: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"sentences": len(sentences), "chars": sum(map(len, sentences))}
    return {**fields, "text": sentences} if with_text else fields


_INTERNAL = "internal error; the server's log has the details"
_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
          413: "body_too_large", 415: "unsupported_media_type"}  # fmt: skip


def _add_error_handlers(app: FastAPI) -> None:
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
        return error(500, "internal_error", _INTERNAL)


# The server's limit behind a validation error: (field, pydantic error type) -> note.
_LIMITS = {
    ("sentences", "too_long"): " (serve.max_sentences)",
    ("sentences", "string_too_long"): " (serve.max_chars)",
    ("sentence", "string_too_long"): " (serve.max_chars)",
    ("beam", "less_than_equal"): " (serve.max_beam)",
    ("nbest", "less_than_equal"): " (serve.max_beam)",
    ("max_len", "less_than_equal"): " (the model's max_positions - 1)",
}


def validation_message(errors: Any) -> str:
    """pydantic's errors as one line that names each field; the values sent are not echoed."""
    parts = []
    for e in list(errors)[:3]:
        where = ".".join(str(part) for part in e.get("loc", ()) if part != "body") or "body"
        limit = _LIMITS.get((where.split(".")[0], e.get("type")), "")
        parts.append(f"{where}: {e.get('msg', 'invalid')}{limit}")
    more = len(errors) - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
