"""What a second decoding thread costs the first: one search, alone and beside other work.

    .venv/bin/python benchmarks/second_thread.py --model runs/multi30k-de-en \\
        --input test_2016_flickr.de --limit 512

``runtime.inter_threads`` decodes two batches at once on two threads of one process
(inference/parallel.py). Each thread is slower than it is alone, for two reasons that this
separates. One search of the sentences (one thread, one batch at a time) is timed:
- *alone*;
- *beside matrix products*: another thread multiplies large matrices all the while; it shares
  the cores' caches and the memory, but holds Python's global lock almost never (one call
  per product of a few milliseconds);
- *beside a search*: another thread runs the same search all the while; it shares as much,
  and its Python between operators holds the lock, which the timed search then waits for
  after each of its own operators.
The difference between the last two is what the lock costs. Seconds are the fastest of
``--rounds``; the modes take turns.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable

import torch
from speed_tables import diagnostic_arguments, publish, sentences

from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine


def products(stop: threading.Event) -> None:
    """Large matrix products until ``stop``: each call lets go of the lock for milliseconds."""
    torch.set_num_threads(1)
    a, b = torch.randn(512, 512), torch.randn(512, 2048)
    while not stop.is_set():
        a @ b


def timed_beside(search: Callable[[], object], other: Callable[[threading.Event], None] | None,
                 rounds: int) -> float:  # fmt: skip
    """The fastest of ``rounds`` searches while ``other`` runs on a second thread."""
    stop = threading.Event()
    worker = threading.Thread(target=other, args=(stop,)) if other else None
    if worker:
        worker.start()
        time.sleep(0.3)  # let it get going
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        search()
        best = min(best, time.perf_counter() - began)
    stop.set()
    if worker:
        worker.join()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    diagnostic_arguments(parser)
    args = parser.parse_args()
    lines = sentences(args)
    torch.set_num_threads(1)
    runtime = RuntimeConfig(device="cpu", threads=1, inter_threads=1)
    engine = load_torch_engine(args.model, runtime=runtime, beam_size=args.beam)
    engine.translate(lines[:64])  # warm up

    def search() -> None:
        torch.set_num_threads(1)  # per thread (OpenMP's count is the calling thread's)
        engine.translate(lines)

    def searches(stop: threading.Event) -> None:
        while not stop.is_set():
            search()

    modes = {"alone": None, "beside matrix products": products, "beside a search": searches}
    best = dict.fromkeys(modes, float("inf"))
    for _ in range(args.rounds):
        for name, other in modes.items():
            best[name] = min(best[name], timed_beside(search, other, 1))
            print(f"{name}: {best[name]:.2f} s", flush=True)
    alone = best["alone"]
    rows = "".join(
        f"| {name} | {seconds:.2f} s | {seconds / alone:.2f}× |\n" for name, seconds in best.items()
    )
    table = (
        f"`python benchmarks/second_thread.py {' '.join(sys.argv[1:])}`: {len(lines)} "
        f"sentences, beam {args.beam}, one thread, one batch at a time; fastest of "
        f"{args.rounds}.\n\n| the timed search | seconds | ÷ alone |\n|---|---|---|\n{rows}"
    )
    publish(table, args.markdown)


if __name__ == "__main__":
    main()
