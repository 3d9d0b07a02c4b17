"""The HTTP API and the web page: a FastAPI app around one ``Batcher``.

    POST /translate   sentences in, translations (n-best, scores, alignments) and the time out
    POST /score       (source, target) pairs in, the model's log-probability of each out
    POST /attention   the encoder-decoder attention weights of one sentence, for the page
    POST /step-through  one sentence through the model, step by step: the data of the page
                      GET /step-through?sentence=...&beam=... draws (the step-through view)
    GET  /info        languages, configs, parameter count and engine
    GET  /health      readiness, and how many requests are in flight
    GET  /            the web page (``page/``), served by the app itself: no CDN
    GET  /openapi.json

Every error is JSON ``{"error": code, "message": one line}`` with a 4xx status, or 500 with a
generic message for a bug (whose traceback goes to the server's log, never into a response):
400 for a body that is not UTF-8, 401 without the API key, 408 for a body slower than
``body_timeout``, 413 for a body over ``max_body_bytes``, 422 for an invalid request (too many
sentences, a sentence too long, a beam too wide, more model work than ``max_cost``, a field
of the wrong type or name, JSON that does not parse), 429 with ``Retry-After`` when
``max_queue`` sentences are already waiting, 503 while shutting down, 504 when a request waited
longer than ``timeout``. A request whose client disconnects is dropped from the queue, or its
sentences stop being decoded (``Batcher.abandon``), and it is logged as 499. HEAD works wherever
GET does; the page may not be framed by another site (``frame-ancestors 'none'``).

The engine is ours (torch) or CTranslate2 (``serve --engine ctranslate2``): /translate and the
batching are the same for both; /attention and /step-through need our model's attention maps
and intermediates, so with CTranslate2 they answer 501, which the pages show (as /attention does
for an RNN encoder-decoder without attention).

(No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations, which name
request models made inside ``create_app``.)
"""

import asyncio
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
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles

from ..config import DecodeConfig
from ..errors import BadValue, UserError
from ..inference.alignment import pharaoh
from ..inference.cost import Cost, scoring_cost, translation_cost
from ..inference.engine import Engine, TorchEngine
from ..inference.glossary import NO_CONSTRAINED_SEARCH, Glossary
from ..inference.translate import Translation
from ..inspect.attention import inspect_sentence
from ..inspect.step_page import PAGE as STEP_PAGE
from ..inspect.step_page import engine_view, page_html
from .batcher import Batcher, QueueFull, ShuttingDown
from .config import ServeConfig
from .errors import INTERNAL, ApiError, add_error_handlers, key_required, statuses
from .middleware import CLIENT_GONE, AccessLog, BodyLimit, HeadAsGet
from .schema import (
    AttentionResponse,
    HealthResponse,
    Hypothesis,
    InfoResponse,
    PairScore,
    ScoreResponse,
    SentenceTranslation,
    StepThroughResponse,
    TranslateResponse,
    request_models,
)

PAGE = Path(__file__).parent / "page"
log = logging.getLogger(__name__)


def create_app(engine: Engine, config: ServeConfig = ServeConfig()) -> FastAPI:  # noqa: B008
    """The app that serves ``engine``; its worker thread starts now and stops at shutdown.

    ``config.api_key`` (already resolved from the environment by the caller), when set, is
    required as ``Authorization: Bearer KEY`` on /translate, /attention and /info.
    """
    default = replace(engine.decode, max_source_tokens=config.batch_tokens)
    batcher = Batcher(engine, config.batch_tokens, config.max_wait_ms, config.max_queue)
    model_config = engine.config.model
    requests = request_models(config, model_config.max_positions)
    TranslateRequest, AttentionRequest, ScoreRequest, StepThroughRequest = requests

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
    add_error_handlers(app)
    protected, keyed = key_required(config.api_key), (401,) if config.api_key else ()

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
            raise ApiError(500, "internal_error", INTERNAL) from None

    def check_cost(cost: Cost, advice: str) -> None:
        """422 for a request that may make the model process more than ``serve.max_cost``
        tokens (``inference/cost.py`` counts them), before it is queued."""
        if cost.tokens > config.max_cost:
            raise ApiError(422, "over_budget", f"this request may make the model process "
                           f"{cost}; this server allows {config.max_cost:,} (serve.max_cost): "
                           f"{advice}")  # fmt: skip

    def check_search(sentences: list[str], prefixes: list[str] | None, decode: DecodeConfig,
                     rerun: int = 0) -> None:  # fmt: skip
        cost = translation_cost(engine.tokenizers, sentences, prefixes, decode,
                                model_config.max_positions, rerun)  # fmt: skip
        check_cost(cost, "send fewer sentences or shorter prefixes, or a smaller beam, nbest, "
                   "max_len or min_len")  # fmt: skip

    @app.post("/translate", response_model=TranslateResponse, **protected,
              responses=statuses(*keyed, 400, 408, 413, 422, 429, 500, 503, 504))  # fmt: skip
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        """Translates one or more sentences; the search options default to the model's."""
        start = time.perf_counter()
        sentences: list[str] = body.sentences
        request.state.log = _log_fields(sentences, config.log_text)
        _check_prefixes(body.prefix, len(sentences), engine, model_config.max_positions)
        same = {name: getattr(body, name) for name in _SAME_NAMES}
        decode = _search(default, body.beam, body.nbest, body.max_len, body.sampling, **same)
        check_search(sentences, body.prefix, decode)
        glossary = _glossary(body.glossary, engine, decode)
        batched = await answer(lambda: batcher.translate(sentences, decode, body.prefix, glossary),
                               request)  # fmt: skip
        truncated = set(batched.result.truncated)
        translations = [
            SentenceTranslation(
                text=options[0].text,
                score=_finite(options[0].score),
                nbest=[Hypothesis(text=o.text, score=_finite(o.score), alignment=_pharaoh(o))
                       for o in options],
                truncated=i in truncated,
                alignment=_pharaoh(options[0]),
            )  # fmt: skip
            for i, options in enumerate(batched.result.nbest)
        ]  # fmt: skip
        ms = (time.perf_counter() - start) * 1000
        return TranslateResponse(translations=translations, time_ms=ms,
                                 batch_sentences=batched.batch_sentences)  # fmt: skip

    @app.post("/score", response_model=ScoreResponse, **protected,
              responses=statuses(*keyed, 400, 408, 413, 422, 429, 500, 503, 504))  # fmt: skip
    async def score(body: ScoreRequest, request: Request) -> ScoreResponse:
        """The model's log-probability of each target given its source (teacher-forced), total,
        per token and length-penalised: for filtering data, reranking, checking a model."""
        start = time.perf_counter()
        request.state.log = _log_fields(body.sources, config.log_text)
        if len(body.targets) != len(body.sources):
            raise ApiError(422, "invalid_request", f"targets: {len(body.targets)} targets for "
                           f"{len(body.sources)} sources; give one per source")  # fmt: skip
        cost = scoring_cost(engine.tokenizers, body.sources, body.targets,
                            model_config.max_positions)  # fmt: skip
        check_cost(cost, "send fewer or shorter pairs")
        decode = default
        if body.length_penalty is not None:
            decode = replace(default, length_penalty=body.length_penalty)
        found = await answer(lambda: batcher.call(
            lambda: engine.score(body.sources, body.targets, decode)), request)  # fmt: skip
        cut = set(found.truncated)
        scores = [PairScore(log_prob=_finite(p.log_prob), per_token=_finite(p.per_token),
                            score=_finite(p.penalised), tokens=p.tokens, truncated=i in cut)
                  for i, p in enumerate(found.scores)]  # fmt: skip
        return ScoreResponse(scores=scores, time_ms=(time.perf_counter() - start) * 1000)

    @app.post("/attention", response_model=AttentionResponse, **protected,
              responses=statuses(*keyed, 400, 408, 413, 422, 429, 500, 501, 503, 504))  # fmt: skip
    async def attention(body: AttentionRequest, request: Request) -> AttentionResponse:
        """Translates one sentence and returns its encoder-decoder attention, layer by layer
        (torch engine only: 501 with CTranslate2)."""
        start = time.perf_counter()
        if not isinstance(engine, TorchEngine):
            raise ApiError(501, "not_implemented", f"attention maps need the torch engine; this "
                           f"server runs {engine.name} (serve --engine torch)")  # fmt: skip
        if (engine.config.model.architecture, engine.config.model.rnn_attention) == ("rnn", "none"):
            raise ApiError(501, "not_implemented", "this RNN has no attention (model."
                           "rnn_attention = none): there are no weights to draw")  # fmt: skip
        request.state.log = _log_fields([body.sentence], config.log_text)
        decode = _search(default, body.beam, 1, body.max_len, False)
        prefix = body.prefix
        _check_prefixes(None if prefix is None else [prefix], 1, engine, model_config.max_positions)
        check_search([body.sentence], None if prefix is None else [prefix], decode, rerun=1)

        def inspect() -> dict:
            with torch.inference_mode(), engine.precision():
                seen = inspect_sentence(engine.model, engine.tokenizers, body.sentence, decode,
                                        prefix)  # fmt: skip
            # Rounded in float64: a float32 0.0001 would reach the JSON as 9.999999747378752e-05.
            weights = [layer.cross_attention[0].double() for layer in seen.maps.decoder]
            return {"translation": seen.translation, "source_tokens": seen.src_labels,
                    "target_tokens": seen.tgt_labels,
                    "cross_attention": [w.round(decimals=4).tolist()  # (H, T, S) per layer
                                        for w in weights]}  # fmt: skip

        found = await answer(lambda: batcher.call(inspect), request)
        return AttentionResponse(**found, time_ms=(time.perf_counter() - start) * 1000)

    @app.post("/step-through", response_model=StepThroughResponse, **protected,
              responses=statuses(*keyed, 400, 408, 413, 422, 429, 500, 501, 503, 504))  # fmt: skip
    async def step_through(body: StepThroughRequest, request: Request) -> StepThroughResponse:
        """One sentence through the model, step by step, with the model's own numbers: what
        the step-through page draws (torch engine only: 501 with CTranslate2)."""
        start = time.perf_counter()
        if not isinstance(engine, TorchEngine):
            raise ApiError(501, "not_implemented", "the step-through view needs the torch "
                           f"engine; this server runs {engine.name} (--engine torch)")  # fmt: skip
        request.state.log = _log_fields([body.sentence], config.log_text)
        decode = _search(default, body.beam, 1, body.max_len, False)
        check_search([body.sentence], None, decode, rerun=1)

        def trace() -> dict:
            return engine_view(engine, body.sentence, decode)

        view = await answer(lambda: batcher.call(trace), request)
        ms = (time.perf_counter() - start) * 1000
        return StepThroughResponse(translation=view["translation"], view=view, time_ms=ms)

    @app.get("/info", response_model=InfoResponse, **protected, responses=statuses(*keyed))
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

    @app.get("/step-through", include_in_schema=False)
    async def step_page() -> HTMLResponse:
        return HTMLResponse(page_html(None, "/steps/"), headers=_PAGE_HEADERS)

    app.mount("/page", StaticFiles(directory=PAGE), name="page")
    app.mount("/steps", StaticFiles(directory=STEP_PAGE), name="steps")
    return app


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


# Request fields that are DecodeConfig fields of the same name and meaning.
_SAME_NAMES = ("top_p", "min_len", "no_repeat_ngram", "repetition_penalty", "alignment")


def _search(
    default: DecodeConfig, beam: int | None, nbest: int | None, max_len: int | None,
    sampling: bool | None, **same: object,
) -> DecodeConfig:  # fmt: skip
    """The server's default search with a request's options on top (422 if they conflict);
    ``same``: DecodeConfig fields as the request gives them (None: the default)."""
    changes: dict[str, Any] = {name: value for name, value in same.items() if value is not None}
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
    except BadValue as error:  # e.g. min_len above max_len, or a server's own odd default
        raise ApiError(422, "invalid_request", str(error)) from None


def _check_prefixes(
    prefixes: list[str] | None, count: int, engine: Engine, max_positions: int
) -> None:
    """One prefix per sentence, each leaving room for </s>: checked before the request is
    queued, so that a bad one cannot fail the requests decoded with it."""
    if prefixes is None:
        return
    if len(prefixes) != count:
        raise ApiError(422, "invalid_request", f"prefix: {len(prefixes)} for {count} sentences; "
                       "give one per sentence ('' for none)")  # fmt: skip
    for i, prefix in enumerate(prefixes):
        pieces = len(engine.tokenizers.tgt.encode(prefix))
        if pieces > max_positions - 1:
            raise ApiError(422, "invalid_request", f"prefix.{i}: {pieces} pieces; the model's "
                           f"outputs hold at most {max_positions - 1}")  # fmt: skip


def _glossary(
    pairs: list[list[str]] | None, engine: Engine, decode: DecodeConfig
) -> Glossary | None:
    """A request's glossary, checked against the engine and the model before it is queued."""
    if not pairs:
        return None
    if engine.name == "ctranslate2":
        raise ApiError(422, "invalid_request", f"glossary: {NO_CONSTRAINED_SEARCH}")
    if decode.sampling:
        raise ApiError(422, "invalid_request", "glossary: a glossary needs a search, not sampling")
    try:
        glossary = Glossary.of(pairs)
        glossary.check(engine.tokenizers, engine.config.model.max_positions)
    except UserError as error:
        raise ApiError(422, "invalid_request", str(error)) from None
    return glossary


def _pharaoh(translation: Translation) -> str | None:
    """The alignment as ``i-j ...``, or None when none was asked for."""
    return None if translation.alignment is None else pharaoh(translation.alignment)


def _finite(score: float) -> float | None:
    return score if math.isfinite(score) else None


def _log_fields(sentences: list[str], with_text: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"sentences": len(sentences), "chars": sum(map(len, sentences))}
    return {**fields, "text": sentences} if with_text else fields
