"""/translate with ``document``, ``output_format: jsonl``, ``flag_below`` or ``markup``: the
fields of ``translate --document --output_format jsonl --flag_below P --markup html`` over HTTP
(inference/texts.py), with a ``glossary`` too.

Each of the request's ``sentences`` is then a text: a line, or with ``document`` a document
whose paragraphs are separated by blank lines. All their sentences go to the batcher as one job;
with ``jsonl`` (or ``flag_below``) they are then scored, as a second job, for the words'
probabilities. The answer has the usual fields, plus, with ``jsonl``, ``log_prob`` and ``words``
(a line), or ``paragraphs`` with their ``sentences`` (a document): the objects that
``--output_format jsonl`` writes (serve/records.py).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..config import DecodeConfig
from ..errors import UserError
from ..inference.confidence import confidences
from ..inference.engine import Engine
from ..inference.glossary import Glossary
from ..inference.markup import MarkupError
from ..inference.search import Stopped
from ..inference.texts import Plan, TextOut, aligned, check_options, plan_for, put_back, record
from .batcher import QueueFull
from .errors import ApiError
from .records import finite

# Cutting texts into sentences (pysbd) and reading markup take up to a second for the largest
# request the default limits admit: done on the event loop, every other request (/health too)
# would wait. One thread of its own, because pysbd's segmenter keeps the text it is cutting
# on itself, so that two texts at once on one segmenter would mix. At most MAX_PLANS requests
# are read or wait to be (about 0.45 s each at the largest): more are a 429, as a full queue is.
MAX_PLANS = 16


class _Planner:
    """The one planning thread, and how many requests it holds (``submit`` raises QueueFull
    beyond ``MAX_PLANS``)."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="transformer-plan")
        self.held, self.lock = 0, threading.Lock()

    def submit(self, job: Callable[[], Any]) -> Future:
        with self.lock:
            if self.held >= MAX_PLANS:
                raise QueueFull(f"{self.held} requests are having their texts read or wait to, "
                                "as many as may")  # fmt: skip
            self.held += 1
        future = self.pool.submit(job)
        future.add_done_callback(self._release)  # done, failed or cancelled
        return future

    def _release(self, _: Future) -> None:
        with self.lock:
            self.held -= 1


PLANNER = _Planner()


def check_request(decode: DecodeConfig, document: bool, jsonl: bool, flag: bool,
                  prefixes: list[str] | None, markup: str = "text") -> None:  # fmt: skip
    """422 for what the text modes cannot do."""
    try:
        check_options(decode, document, jsonl, flag, markup)
    except UserError as error:
        raise ApiError(422, "invalid_request", str(error)) from None
    if document and prefixes is not None:
        raise ApiError(422, "invalid_request", "prefix: a document's sentences are found by the "
                       "segmenter; prefixes go with lines, not documents")  # fmt: skip


async def translate_texts_request(
    engine: Engine,
    texts: list[str],
    decode: DecodeConfig,
    prefixes: list[str] | None,
    document: bool,
    jsonl: bool,
    flag_below: float | None,
    queue: Callable[..., Awaitable[Any]],
    translate_job: Callable[[list[str], DecodeConfig, list[str] | None], Future],
    call_job: Callable[[Callable[[Stopped], Any]], Future],
    check_cost: Callable[[list[str], DecodeConfig, int, list[str] | None], None],
    markup: str = "text",
    glossary: Glossary | None = None,
) -> tuple[list[dict], int]:
    """The texts translated (``put_back``) as dicts of SentenceTranslation's fields, and the
    batch's sentence count. ``queue(job, abandon=None)`` waits for a job (app.py's ``answer``):
    the planning, on ``PLANNER`` (dropped there if it has not started when its client leaves
    or its time runs out), then the batcher's;
    ``translate_job(parts, search, prefixes)`` and ``call_job(function)`` make one (the
    batcher's); ``check_cost(parts, search, rerun, prefixes)`` refuses what is over the server's
    budget, ``rerun`` being the passes over each translation after the search (the words'
    probabilities). ``prefixes``: one per part (``Plan.part_prefixes``). ``glossary``: the one
    ``translate_job`` searches with, for the terms a split sentence lacks."""
    check_request(decode, document, jsonl, flag_below is not None, prefixes, markup)

    def planned() -> Plan:
        try:
            return plan_for(engine, texts, document, markup, glossary)
        except MarkupError as error:
            raise UserError(f"sentences.{error.text}: line {error.line}: {error.reason}") from None

    p = await queue(lambda: PLANNER.submit(planned), Future.cancel)
    search = aligned(p, decode, engine.name)  # markup asks for alignments: they cost passes
    scored = jsonl or flag_below is not None  # the words' probabilities: one pass more
    forced = p.part_prefixes(prefixes)
    check_cost(p.parts, search, int(scored), forced)
    batched = await queue(lambda: translate_job(p.parts, search, forced))
    found = None
    if scored:
        tokens = [o[0].tokens if o else [] for o in batched.result.nbest]
        found = await queue(lambda: call_job(
            lambda _: confidences(engine, engine.tokenizers, p.parts, tokens)))  # fmt: skip
    outs = put_back(p, batched.result, found, flag_below, decode.alignment, glossary)
    return [_fields(t, jsonl) for t in outs], batched.batch_sentences


def _fields(t: TextOut, jsonl: bool) -> dict:
    score = finite(sum(s.score for s in t.sentences))
    first = record(t) if t.paragraphs is None else None
    missing = [term for s in t.sentences for term in s.missing_terms or []]
    fields: dict = {"text": t.text, "score": score, "truncated": t.truncated,
                    "alignment": first.get("alignment") if first else None,
                    "missing_terms": missing or None}  # fmt: skip
    fields["nbest"] = [{"text": t.text, "score": score, "alignment": fields["alignment"]}]
    if first is not None:
        fields["plain_text"] = first.get("plain_text")
    if jsonl and first is not None:
        fields["log_prob"], fields["words"] = first.get("log_prob"), first.get("words")
    elif jsonl:
        fields["log_prob"] = finite(sum(s.confidence.log_prob for s in t.sentences
                                         if s.confidence))  # fmt: skip
        fields["paragraphs"] = record(t)["paragraphs"]
    return fields
