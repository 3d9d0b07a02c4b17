"""Dynamic batching: requests that arrive together are decoded together, by one worker thread.

Each HTTP request submits a job (its sentences, their target prefixes if any, and its search
settings) and waits on a Future.
The worker takes the oldest job, then keeps taking jobs for up to ``max_wait_ms``, or until
``batch_tokens`` source tokens are taken; it decodes the sentences of all the jobs that share
their search settings in one call to ``translate`` (which sorts them by length and cuts them
into batches of at most ``batch_tokens`` padded source tokens, ``data/batching.py``), and
gives each job its own translations, in its own order.

Only the worker touches the model, so inference never runs concurrently on shared state (the
key/value caches, autocast, torch's threads, or CTranslate2's model). Other work on the
model (attention maps, the step-through view, scores) goes through the same queue, as a job of
its own (``call``), which is given the same ``stopped`` as a translation for its searches.

A job whose caller has gone (its client disconnected, or its request timed out) is
``abandon``-ed: taken out of the queue if the worker has not reached it, else its sentences stop
being decoded at the search's next step (``stopped``, inference/search.py; the ctranslate2
engine cannot stop a call half-way and finishes it), and what is left of it answers nobody.
``close`` stops taking jobs, finishes every job already queued, and ends the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..config import DecodeConfig
from ..inference.engine import Engine
from ..inference.glossary import Glossary
from ..inference.search import Stopped
from ..inference.translation import TranslationResult

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """More sentences are waiting than the queue allows; the caller should retry later."""


class ShuttingDown(Exception):
    """The batcher was closed: it takes no new jobs."""


@dataclass
class Batched:
    """What one job gets back: its translations, and how many sentences were decoded with them."""

    result: TranslationResult
    batch_sentences: int  # all the sentences decoded in the same call, this job's included


@dataclass
class _Job:
    sentences: list[str]
    decode: DecodeConfig | None  # None for a call
    tokens: int  # source tokens, for the batch budget
    prefixes: list[str] | None = None  # one per sentence, or None
    glossary: Glossary | None = None  # terms its translations must contain
    future: Future = field(default_factory=Future)
    call: Callable[[Stopped], Any] | None = None
    abandoned: bool = False  # its caller has gone: stop decoding its sentences

    def stopped(self, i: int) -> bool:
        """Whether nobody waits for sentence ``i`` of a call's search: its caller has gone."""
        return self.abandoned


class Batcher:
    """One worker thread that owns the model and decodes queued requests in batches.

    Args:
        engine: the model (torch or CTranslate2) and its tokenizers; only the worker uses it.
        batch_tokens: source tokens taken into one round at most (a larger job goes alone).
        max_wait_ms: how long the worker waits for more jobs after the first one.
        max_queue: sentences that may wait; a job that would exceed it raises ``QueueFull``.
    """

    def __init__(
        self, engine: Engine, batch_tokens: int, max_wait_ms: float, max_queue: int
    ) -> None:
        self.engine = engine
        self.batch_tokens = batch_tokens
        self.max_wait = max_wait_ms / 1000
        self.max_queue = max_queue
        self._queue: deque[_Job] = deque()
        self._running: list[_Job] = []  # the jobs of the round the worker is decoding
        self._queued_sentences = 0
        self._in_flight = 0  # submitted and not yet answered
        self._closing = False
        self._lock = threading.Condition()
        self._worker = threading.Thread(target=self._run, name="transformer-batcher", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------------- callers' side
    def translate(
        self, sentences: list[str], decode: DecodeConfig, prefixes: list[str] | None = None,
        glossary: Glossary | None = None,
    ) -> Future[Batched]:  # fmt: skip
        """Queues ``sentences`` to be translated with ``decode`` (and ``prefixes``, one per
        sentence, and a ``glossary``); the Future gets a ``Batched``."""
        # Counting tokens encodes each sentence once more than translate() does: microseconds.
        encode = self.engine.tokenizers.src.encode
        tokens = sum(len(encode(s)) + 1 for s in sentences)  # + EOS
        return self._submit(_Job(list(sentences), decode, tokens, prefixes, glossary))

    def call(self, function: Callable[[Stopped], Any]) -> Future:
        """Runs ``function(stopped)`` on the worker (alone, in queue order), ``stopped`` telling
        its searches when its caller has gone; the Future gets its result."""
        return self._submit(_Job([""], None, 0, call=function))

    def abandon(self, future: Future) -> None:
        """The caller of ``future`` has gone: its job leaves the queue, or, if the worker is
        decoding it, its sentences stop at the search's next step."""
        with self._lock:
            for job in self._queue:
                if job.future is future:
                    self._queue.remove(job)
                    self._queued_sentences -= len(job.sentences)
                    future.cancel()
                    return
            for job in self._running:
                if job.future is future:
                    job.abandoned = True

    @property
    def in_flight(self) -> int:
        """Jobs submitted and not yet answered."""
        return self._in_flight

    def close(self, timeout: float | None = None) -> None:
        """Takes no new jobs, finishes the queued ones, and ends the worker."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._worker.join(timeout)

    def _submit(self, job: _Job) -> Future:
        with self._lock:
            if self._closing:
                raise ShuttingDown("the server is shutting down")
            n = len(job.sentences)
            if self._queued_sentences + n > self.max_queue:
                raise QueueFull(
                    f"{self._queued_sentences} sentences are waiting and this request adds {n}; "
                    f"the queue holds {self.max_queue}"
                )
            self._queue.append(job)
            self._queued_sentences += n
            self._in_flight += 1
            self._lock.notify_all()
        job.future.add_done_callback(self._answered)
        return job.future

    def _answered(self, _: Future) -> None:
        with self._lock:
            self._in_flight -= 1

    # --------------------------------------------------------------------------- worker side
    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            live = [job for job in jobs if job.future.set_running_or_notify_cancel()]
            for job in live:
                if job.call is not None:
                    _settle(job)
            by_settings: dict[tuple[DecodeConfig, Glossary | None], list[_Job]] = {}
            for job in live:
                if job.decode is not None:
                    by_settings.setdefault((job.decode, job.glossary), []).append(job)
            for (decode, glossary), group in by_settings.items():
                self._translate(group, decode, glossary)

    def _take(self) -> list[_Job] | None:
        """The next round of jobs (a call goes alone), or None once closed and empty."""
        with self._lock:
            while not self._queue:
                if self._closing:
                    return None
                self._lock.wait()
            jobs = [self._queue.popleft()]
            self._running = jobs  # filled in place: ``abandon`` finds the jobs taken so far
            tokens = jobs[0].tokens
            deadline = time.monotonic() + self.max_wait
            while jobs[0].call is None and tokens < self.batch_tokens:
                if not self._queue:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closing:
                        break
                    self._lock.wait(left)
                    continue
                following = self._queue[0]
                if following.call is not None or tokens + following.tokens > self.batch_tokens:
                    break
                jobs.append(self._queue.popleft())
                tokens += following.tokens
            self._queued_sentences -= sum(len(job.sentences) for job in jobs)
            return jobs

    def _translate(
        self, group: list[_Job], decode: DecodeConfig, glossary: Glossary | None = None
    ) -> None:
        """The sentences of ``group`` in one call; each job gets its own slice back."""
        sentences = [s for job in group for s in job.sentences]
        prefixes = None
        if any(job.prefixes for job in group):
            prefixes = [p for job in group for p in job.prefixes or [""] * len(job.sentences)]
        owner = [job for job in group for _ in job.sentences]
        terms = {"glossary": glossary} if glossary is not None else {}  # only where asked for
        try:
            result = self.engine.translate(
                sentences, decode, prefixes, stopped=lambda i: owner[i].abandoned, **terms
            )
        except Exception as error:  # a bug: every caller hears of it, the worker goes on
            log.exception("translating a batch of %d sentences failed", len(sentences))
            for job in group:
                job.future.set_exception(error)
            return
        start = 0
        for job in group:
            end = start + len(job.sentences)
            truncated = [i - start for i in result.truncated if start <= i < end]
            unmet = {i - start: terms for i, terms in result.unmet.items() if start <= i < end}
            part = TranslationResult(result.nbest[start:end], truncated, unmet)
            job.future.set_result(Batched(part, len(sentences)))
            start = end


def _settle(job: _Job) -> None:
    """A call's future gets what it returns, or what it raises; nothing once its caller has
    gone (a search cut short may leave nothing to return, and no one would hear of it)."""
    try:
        result = job.call(job.stopped)  # type: ignore[misc]
    except Exception as error:
        if job.abandoned:
            job.future.set_result(None)
        else:
            job.future.set_exception(error)
    else:
        job.future.set_result(None if job.abandoned else result)
