"""The HTTP API and the web page: a FastAPI app around one ``Batcher``.

    POST /translate   sentences in, translations (n-best, scores, alignments) and the time out
    POST /score       (source, target) pairs in, the model's log-probability of each out
    POST /attention   the encoder-decoder attention weights of one sentence, for the page
    POST /step-through  one sentence through the model, step by step: the data of the page
                      GET /step-through?sentence=...&beam_size=... draws (the step-through view)
    GET  /info        languages, configs, parameter count and engine
    GET  /health      readiness, and how many requests are in flight
    GET  /            the web page (``page/``), served by the app itself: no CDN
    GET  /openapi.json

Every error is JSON ``{"error": code, "message": one line}`` with a 4xx status (the codes and
the limits behind them: docs/serving-limits.md), or 500 with a generic message for a bug, whose
traceback goes to the server's log, never into a response.

The engine is ours (torch) or CTranslate2 (``serve --engine ctranslate2``): /translate and the
batching are the same for both; /attention and /step-through need our model's attention maps
and intermediates, so with CTranslate2 they answer 501, which the pages show (as /attention does
for an RNN encoder-decoder without attention).

The endpoints are module-level functions on two routers (``api``, behind the API key when there
is one, and ``public``); what they serve is ``Served``, in ``app.state.served``.
(No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations.)
"""

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from ..config import DecodeConfig
from ..errors import UserError
from ..inference.alignment import pharaoh
from ..inference.cost import scoring_cost, translation_cost
from ..inference.engine import Engine, TorchEngine
from ..inference.glossary import Glossary
from ..inference.search import Stopped
from ..inference.translation import Translation
from ..inspect.attention import inspect_sentence
from ..inspect.step_page import PAGE as STEP_PAGE
from ..inspect.step_page import engine_view, page_html
from .batcher import Batcher, QueueFull, ShuttingDown
from .config import ServeConfig
from .errors import INTERNAL, ApiError, add_error_handlers, key_required, statuses
from .middleware import CLIENT_GONE, AccessLog, BodyLimit, HeadAsGet
from .records import finite
from .requests import (
    attention_too_large,
    check_budget,
    check_engine_can,
    check_prefixes,
    check_queue,
    check_targets_fit,
    glossary_of,
    least_attention,
    one_beam,
    search,
)
from .schema import (
    AttentionRequest,
    AttentionResponse,
    HealthResponse,
    Hypothesis,
    InfoResponse,
    Limits,
    PairScore,
    ScoreRequest,
    ScoreResponse,
    SentenceTranslation,
    StepThroughRequest,
    StepThroughResponse,
    TranslateRequest,
    TranslateResponse,
    search_options,
)
from .texts import translate_texts_request

PAGE = Path(__file__).parent / "page"
log = logging.getLogger(__name__)


@dataclass
class Served:
    """What the endpoints serve: the engine, its worker, the service's config and limits, and
    the default search (the engine's, batched by ``serve.batch_tokens``)."""

    engine: Engine
    batcher: Batcher
    config: ServeConfig
    limits: Limits
    default: DecodeConfig

    @property
    def max_positions(self) -> int:
        return self.engine.config.model.max_positions


def create_app(engine: Engine, config: ServeConfig = ServeConfig()) -> FastAPI:  # noqa: B008
    """The app that serves ``engine``; its worker thread starts now and stops at shutdown.

    ``config.api_key`` (already resolved from the environment by the caller), when set, is
    required as ``Authorization: Bearer KEY`` on /translate, /score, /attention, /step-through
    and /info.
    """
    batcher = Batcher(engine, config.batch_tokens, config.max_wait_ms, config.max_queue)
    limits = Limits.of(config, engine.config.model.max_positions)
    default = replace(engine.decode, max_source_tokens=config.batch_tokens)
    app = FastAPI(title="transformer", version="1", lifespan=_lifespan, docs_url=None,
                  redoc_url=None, summary="Translation with the Transformer of 'Attention Is "
                  "All You Need'.")  # fmt: skip
    app.state.served = Served(engine, batcher, config, limits, default)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, timeout=config.body_timeout)
    app.add_middleware(AccessLog)
    add_error_handlers(app)
    keyed = statuses(401) if config.api_key else {}
    app.include_router(api, **key_required(config.api_key), responses=keyed)
    app.include_router(public)
    app.mount("/page", StaticFiles(directory=PAGE), name="page")
    app.mount("/steps", StaticFiles(directory=STEP_PAGE), name="steps")

    def openapi() -> dict[str, Any]:  # FastAPI's schema, with this server's limits in it
        if app.openapi_schema is None:
            limits.narrow(FastAPI.openapi(app))
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI):
    yield
    await asyncio.to_thread(app.state.served.batcher.close)  # finishes what is queued


api, public = APIRouter(), APIRouter()
_ERRORS = (400, 408, 413, 422, 429, 500, 503, 504)  # what a request sent to the model may meet


def _served(request: Request, body: BaseModel | None = None) -> Served:
    """The app's ``Served``, once ``body`` is within the server's limits (422 if not)."""
    served: Served = request.app.state.served
    over = None if body is None else served.limits.check(body)
    if over is not None:
        raise ApiError(422, "invalid_request", over)
    return served


@api.post("/translate", response_model=TranslateResponse, responses=statuses(*_ERRORS))
async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
    """Translates one or more sentences; the search options default to the model's."""
    start, served = time.perf_counter(), _served(request, body)
    sentences: list[str] = body.sentences
    request.state.log = _log_fields(sentences, served.config.log_text)
    check_prefixes(served.engine, served.max_positions, body.prefix, len(sentences))
    decode = search(served.default, **search_options(body))
    check_engine_can(served.engine, decode)
    glossary = glossary_of(body.glossary, served.engine, decode)
    markup = body.markup or "text"
    jsonl = body.output_format == "jsonl"
    if body.document or jsonl or body.flag_below is not None or markup != "text":
        found, together = await translate_texts_request(
            served.engine, sentences, decode, body.prefix, bool(body.document), jsonl,
            body.flag_below, lambda job, abandon=None: _answer(served, job, request, abandon),
            lambda parts, search, forced: served.batcher.translate(parts, search, forced, glossary),
            served.batcher.call,
            lambda parts, search, rerun, forced: _check_search(served, parts, forced, search,
                                                               rerun, glossary),
            markup, glossary,
        )  # fmt: skip
        return TranslateResponse(translations=[SentenceTranslation(**f) for f in found],
                                 time_ms=(time.perf_counter() - start) * 1000,
                                 batch_sentences=together)  # fmt: skip
    _check_search(served, sentences, body.prefix, decode, glossary=glossary)
    batched = await _answer(
        served, lambda: served.batcher.translate(sentences, decode, body.prefix, glossary), request
    )
    truncated = set(batched.result.truncated)
    translations = [
        SentenceTranslation(
            text=options[0].text,
            score=finite(options[0].score),
            nbest=[Hypothesis(text=o.text, score=finite(o.score), alignment=_pharaoh(o))
                   for o in options],
            truncated=i in truncated,
            alignment=_pharaoh(options[0]),
            missing_terms=batched.result.unmet.get(i),
        )  # fmt: skip
        for i, options in enumerate(batched.result.nbest)
    ]  # fmt: skip
    ms = (time.perf_counter() - start) * 1000
    return TranslateResponse(translations=translations, time_ms=ms,
                             batch_sentences=batched.batch_sentences)  # fmt: skip


@api.post("/score", response_model=ScoreResponse, responses=statuses(*_ERRORS))
async def score(body: ScoreRequest, request: Request) -> ScoreResponse:
    """The model's log-probability of each target given its source (teacher-forced), total,
    per token and length-penalised: for filtering data, reranking, checking a model."""
    start, served = time.perf_counter(), _served(request, body)
    engine = served.engine
    request.state.log = _log_fields(body.sources, served.config.log_text)
    if len(body.targets) != len(body.sources):
        raise ApiError(422, "invalid_request", f"targets: {len(body.targets)} targets for "
                       f"{len(body.sources)} sources; give one per source")  # fmt: skip
    cost = scoring_cost(engine.tokenizers, body.sources, body.targets, served.max_positions)
    check_targets_fit(cost, engine, body.targets, served.max_positions)
    check_budget(cost, served.config.max_cost, "send fewer or shorter pairs")
    decode = search(served.default, **search_options(body))
    found = await _answer(served, lambda: served.batcher.call(
        lambda _: engine.score(body.sources, body.targets, decode)), request)  # fmt: skip
    cut = set(found.truncated)
    scores = [PairScore(log_prob=finite(p.log_prob), per_token=finite(p.per_token),
                        score=finite(p.penalised), tokens=p.tokens, truncated=i in cut)
              for i, p in enumerate(found.scores)]  # fmt: skip
    return ScoreResponse(scores=scores, time_ms=(time.perf_counter() - start) * 1000)


@api.post("/attention", response_model=AttentionResponse, responses=statuses(*_ERRORS, 501))
async def attention(body: AttentionRequest, request: Request) -> AttentionResponse:
    """Translates one sentence and returns its encoder-decoder attention, layer by layer
    (torch engine only: 501 with CTranslate2)."""
    start, served = time.perf_counter(), _served(request, body)
    engine = served.engine
    if not isinstance(engine, TorchEngine):
        raise ApiError(501, "not_implemented", f"attention maps need the torch engine; this "
                       f"server runs {engine.name} (serve --engine torch)")  # fmt: skip
    if "cross" not in engine.model.attention_kinds:
        raise ApiError(501, "not_implemented", "this model has no attention to draw (an RNN "
                       "with model.rnn_attention = none)")  # fmt: skip
    request.state.log = _log_fields([body.sentence], served.config.log_text)
    decode = one_beam(served.default, body)
    prefixes = None if body.prefix is None else [body.prefix]
    check_prefixes(served.engine, served.max_positions, prefixes, 1)
    _check_search(served, [body.sentence], prefixes, decode, rerun=1)
    if problem := attention_too_large(least_attention(engine, body.sentence, decode), True):
        raise ApiError(422, "invalid_request", problem)

    def inspect(stopped: Stopped) -> dict:
        with torch.inference_mode(), engine.precision():
            seen = inspect_sentence(engine.model, engine.tokenizers, body.sentence, decode,
                                    body.prefix, stopped)  # fmt: skip
        # Rounded in float64: a float32 0.0001 would reach the JSON as 9.999999747378752e-05.
        weights = [layer.cross_attention[0].double() for layer in seen.maps.decoder]
        if problem := attention_too_large(sum(w.numel() for w in weights)):
            raise UserError(problem)
        return {"translation": seen.translation, "source_tokens": seen.src_labels,
                "target_tokens": seen.tgt_labels,
                "cross_attention": [w.round(decimals=4).tolist()  # (H, T, S) per layer
                                    for w in weights]}  # fmt: skip

    found = await _answer(served, lambda: served.batcher.call(inspect), request)
    return AttentionResponse(**found, time_ms=(time.perf_counter() - start) * 1000)


@api.post("/step-through", response_model=StepThroughResponse,
          responses=statuses(*_ERRORS, 501))  # fmt: skip
async def step_through(body: StepThroughRequest, request: Request) -> StepThroughResponse:
    """One sentence through the model, step by step, with the model's own numbers: what
    the step-through page draws (torch engine only: 501 with CTranslate2)."""
    start, served = time.perf_counter(), _served(request, body)
    engine = served.engine
    if not isinstance(engine, TorchEngine):
        raise ApiError(501, "not_implemented", "the step-through view needs the torch "
                       f"engine; this server runs {engine.name} (--engine torch)")  # fmt: skip
    request.state.log = _log_fields([body.sentence], served.config.log_text)
    decode = one_beam(served.default, body)
    _check_search(served, [body.sentence], None, decode, rerun=1)
    view = await _answer(
        served,
        lambda: served.batcher.call(
            lambda stopped: engine_view(engine, body.sentence, decode, stopped)
        ),
        request,
    )
    ms = (time.perf_counter() - start) * 1000
    return StepThroughResponse(translation=view["translation"], view=view, time_ms=ms)


@api.get("/info", response_model=InfoResponse)
async def info(request: Request) -> InfoResponse:
    """The languages, the model's config and size, the engine, the default search and the
    limits."""
    served = _served(request)
    engine, config = served.engine, served.config
    limits = {name: getattr(config, name) for name in ("max_body_bytes", "max_sentences",
              "max_chars", "max_beam", "max_queue", "timeout", "max_cost", "body_timeout",
              "idle_timeout")}  # fmt: skip
    return InfoResponse(
        source_language=engine.config.data.src_lang, target_language=engine.config.data.tgt_lang,
        parameters=engine.parameters, checkpoint=engine.path.name, engine=engine.name,
        device=engine.device, model=asdict(engine.config.model), decode=asdict(served.default),
        limits=limits,
    )  # fmt: skip


@public.get("/health", response_model=HealthResponse)
async def health(request: Request) -> HealthResponse:
    """Ready: the model is loaded (the server listens only once it is)."""
    return HealthResponse(status="ok", in_flight=_served(request).batcher.in_flight)


@public.get("/", include_in_schema=False)
async def page() -> FileResponse:
    return FileResponse(PAGE / "index.html", headers=_PAGE_HEADERS)


@public.get("/step-through", include_in_schema=False)
async def step_page() -> HTMLResponse:
    return HTMLResponse(page_html(None, "/steps/"), headers=_PAGE_HEADERS)


async def _answer(
    served: Served, future_of: Callable[[], Future], request: Request,
    abandon: Callable[[Future], object] | None = None,
) -> Any:  # fmt: skip
    """What the worker returns for a job, as the API's errors when it cannot; a job whose
    client left or whose time ran out is abandoned (no more work on it): by the batcher, or
    by ``abandon`` for another executor's job. A request's jobs (planning, searching, scoring)
    share one ``serve.timeout``, counted from its first."""
    try:
        future = future_of()
    except QueueFull as error:
        raise ApiError(429, "queue_full", f"the server is busy: {error}; retry later",
                       {"Retry-After": "1"}) from None  # fmt: skip
    except ShuttingDown as error:
        raise ApiError(503, "shutting_down", str(error)) from None
    timeout = served.config.timeout
    if not hasattr(request.state, "deadline"):
        request.state.deadline = time.monotonic() + timeout
    left_s = max(request.state.deadline - time.monotonic(), 0.0)
    result, left = asyncio.wrap_future(future), asyncio.ensure_future(_client_left(request))
    try:
        await asyncio.wait({result, left}, timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        left.cancel()
    if not result.done():
        (abandon or served.batcher.abandon)(future)
        if left.done() and not left.cancelled():
            raise ApiError(CLIENT_GONE, "client_closed_request", "the client left")
        message = f"no answer within {timeout:g} s (serve.timeout); try again later"
        raise ApiError(504, "timeout", message)
    try:
        return result.result()
    except UserError as error:
        raise ApiError(422, "invalid_request", str(error)) from None
    except Exception:  # a bug: its traceback goes to the log, not to the client
        log.exception("the worker failed")
        raise ApiError(500, "internal_error", INTERNAL) from None


def _check_search(served: Served, sentences: list[str], prefixes: list[str] | None,
                  decode: DecodeConfig, rerun: int = 0,
                  glossary: Glossary | None = None) -> None:  # fmt: skip
    check_queue(len(sentences), served.config.max_queue)  # a document's, a marked-up text's
    cost = translation_cost(served.engine.tokenizers, sentences, prefixes, decode,
                            served.max_positions, rerun, glossary)  # fmt: skip
    check_budget(cost, served.config.max_cost, "send fewer sentences or shorter prefixes or "
                 "terms, or a smaller beam_size, nbest, max_len_b or min_len")  # fmt: skip


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


def _pharaoh(translation: Translation) -> str | None:
    """The alignment as ``i-j ...``, or None when none was asked for."""
    return None if translation.alignment is None else pharaoh(translation.alignment)


def _log_fields(sentences: list[str], with_text: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"sentences": len(sentences), "chars": sum(map(len, sentences))}
    return {**fields, "text": sentences} if with_text else fields
