"""Batches translated at once on a CPU: ``runtime.inter_threads``, as CTranslate2's.

Decoding a batch is a long chain of small operations, one decoder step after another, and a
small matrix product gains little from a second core. Two batches decoded at once, each on one
core, keep both cores busy instead: on the 2-core CPU, Multi30k's test2016 with two batches at
once on one thread each against one batch at a time on two threads (docs/speed.md). Torch lets
go of Python's global lock inside each operation, so threads are enough where the operators are
most of the work: at Multi30k's size two processes were 1.05-1.12x faster, one forked from the
loaded model 1.05x. At the demo's size, where a fifth of a step is Python and that Python runs
one thread at a time, two processes were 1.10-1.25x faster (benchmarks/threads_processes.py);
but a forked one hangs in torch unless the process had set one OpenMP thread before the fork,
and spawned ones would load torch and the model again, so the workers stay threads.

``map_batches`` runs the batches on the calling thread and ``inter - 1`` worker threads. The
model is only read; every batch has its own key/value cache. Each worker runs with the calling
thread's autocast (thread-local in torch) and its own number of intra-op threads (OpenMP's, per
thread). The calling thread takes the batches from the front of the list, the longest first,
and the workers from its back: a long batch runs beside short ones, not beside the next
longest, and the calling thread decodes in the memory its allocator already holds, where a new
thread's allocator starts afresh (on test2016 both together lowered greedy search's peak
resident memory by about 25 MB, docs/speed.md). Fewer
sentences than would fill a batch per worker are cut into one batch per worker
(``DecodeThreads.batch_size``). On a GPU there is one worker: the calling thread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch

from ..config import RuntimeConfig
from ..device import cores

Batch = TypeVar("Batch")
Result = TypeVar("Result")


@dataclass(frozen=True)
class DecodeThreads:
    """How a CPU decodes many batches: ``inter`` at once, sharing ``total`` threads."""

    inter: int = 1
    total: int = 0  # 0: torch's own setting, untouched

    def batch_size(self, sentences: int, most: int) -> int:
        """Sentences per batch: at most ``most``, and few enough that every one of the
        ``inter`` workers gets a batch (a server's round of a few requests, a short file)."""
        return max(1, min(most, -(-sentences // self.inter)))

    def workers(self, batches: int) -> tuple[int, int]:
        """(batches at once, intra-op threads each) for ``batches`` batches."""
        workers = max(1, min(self.inter, batches))
        return workers, max(1, self.total // workers) if self.total else 0


def decode_threads(runtime: RuntimeConfig, device: torch.device) -> DecodeThreads:
    """The runtime's threads for decoding on ``device``: on a CPU, ``inter_threads`` batches at
    once (0: one per thread of ``runtime.threads``, or per core), each on an equal share of
    the threads; on a GPU, or with compiled decoding, one batch at a time."""
    if device.type != "cpu":
        return DecodeThreads()
    total = runtime.threads or cores()
    if runtime.compile:  # one batch at a time: compiled decoding is not thread-safe (compiled.py)
        return DecodeThreads(1, total)
    return DecodeThreads(runtime.inter_threads or total, total)


def map_batches(
    run: Callable[[Batch], Result], batches: list[Batch], threads: DecodeThreads
) -> list[Result]:
    """``[run(b) for b in batches]``, ``threads.inter`` batches at once; results in order."""
    workers, intra = threads.workers(len(batches))
    if workers == 1:
        with _intra_threads(intra):
            return [run(batch) for batch in batches]
    autocast = _autocast_state()
    # Batch indices, longest first (``in_length_batches``): the calling thread pops them from
    # the front, the workers from the back, so a long batch runs beside short ones. A deque's
    # pops from either end are thread-safe.
    queue = deque(range(len(batches)))
    results: list[Result | None] = [None] * len(batches)

    def take(front: bool) -> None:
        while True:
            try:
                i = queue.popleft() if front else queue.pop()
            except IndexError:  # none left
                return
            results[i] = run(batches[i])

    def in_worker() -> None:
        try:
            with torch.autocast(**autocast):
                take(front=False)
        finally:
            queue.clear()  # on an error, the others take no new batch either

    with _intra_threads(intra), ThreadPoolExecutor(
        workers - 1, thread_name_prefix="decode", initializer=torch.set_num_threads,
        initargs=(intra,),
    ) as pool:  # fmt: skip
        others = [pool.submit(in_worker) for _ in range(workers - 1)]
        try:
            take(front=True)
        finally:
            queue.clear()
        for other in others:
            other.result()  # a worker's error, raised here
    return results  # type: ignore[return-value] (every index was run)


@contextmanager
def _intra_threads(threads: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` (0: unchanged) for the block, then restored
    (MKL's count is shared by every thread of the process)."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _autocast_state() -> dict:
    """The calling thread's CPU autocast, to enter again in a worker (its state is per thread;
    decoding runs on the CPU here)."""
    return {"device_type": "cpu", "dtype": torch.get_autocast_dtype("cpu"),
            "enabled": torch.is_autocast_enabled("cpu")}  # fmt: skip
