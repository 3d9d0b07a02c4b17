"""What a search's steps of few rows cost: every decoding step of a file timed by its rows.

    .venv/bin/python benchmarks/step_rows.py --model runs/multi30k-de-en \\
        --input test_2016_flickr.de

A batch starts with all its rows (``--batch`` sentences × the beam) and loses them as its
sentences end, so its last steps run few rows, the longest outputs of the batch. A step has a
fixed cost (the Python and the operator calls around its products) and products that cost in
proportion to its rows, so a step of one row costs a good part of a full one. This times each
step of a search (one thread, one batch at a time: no second thread beside it), from the
vocabulary step's start to the new tokens appended, groups the steps by their rows, and
compares their time with a bound: the same rows decoded in full steps only, each at the median
time of a full step. That bound is what a search would save that refilled its batch with the
next sentences as sentences end (continuous batching), before the cost of refilling: encoding
the new sentences in smaller groups, and a mask per row over positions that then differ.
Seconds are those of the last of ``--rounds`` passes (the first warms up).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict

import torch
from speed_tables import diagnostic_arguments, publish, sentences

from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine
from transformer.inference.search import RunningBatch


class StepClock:
    """Times every step of the searches run while it is installed: (rows, seconds) each."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, float]] = []
        self._began = 0.0
        self._rows = 0

    def install(self) -> None:
        next_best, append = RunningBatch.next_best, RunningBatch.append

        def timed_next_best(batch: RunningBatch, k: int, at_limit: torch.Tensor):  # noqa: ANN202
            self._began, self._rows = time.perf_counter(), at_limit.numel()
            return next_best(batch, k, at_limit)

        def timed_append(batch: RunningBatch, tokens: torch.Tensor) -> None:
            append(batch, tokens)
            self.steps.append((self._rows, time.perf_counter() - self._began))

        RunningBatch.next_best, RunningBatch.append = timed_next_best, timed_append


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    diagnostic_arguments(parser)
    parser.add_argument("--batch", type=int, default=64, help="sentences a batch")
    args = parser.parse_args()
    lines = sentences(args)
    torch.set_num_threads(1)
    runtime = RuntimeConfig(device="cpu", threads=1, inter_threads=1)
    engine = load_torch_engine(
        args.model, runtime=runtime, beam_size=args.beam, batch_size=args.batch
    )
    clock = StepClock()
    clock.install()
    for _ in range(args.rounds):
        clock.steps.clear()
        began = time.perf_counter()
        engine.translate(lines)
        seconds = time.perf_counter() - began
    full = args.batch * args.beam
    by_rows: dict[int, list[float]] = defaultdict(list)
    for rows, step in clock.steps:
        by_rows[rows].append(step)
    in_steps = sum(step for _, step in clock.steps)
    rows_decoded = sum(rows for rows, _ in clock.steps)
    full_step = statistics.median(by_rows[max(by_rows)])
    bound = rows_decoded / max(by_rows) * full_step
    table = "".join(
        f"| {rows} | {len(times)} | {statistics.median(times) * 1e3:.2f} | "
        f"{sum(times):.3f} | {sum(times) / in_steps:.1%} |\n"
        for rows, times in sorted(by_rows.items())
    )
    report = (
        f"`python benchmarks/step_rows.py {' '.join(sys.argv[1:])}`: {len(lines)} sentences, "
        f"beam {args.beam}, {args.batch} sentences a batch ({full} rows), one thread, one batch "
        f"at a time; the last of {args.rounds} passes.\n\n"
        f"The pass: {seconds:.3f} s, of which {in_steps:.3f} s in {len(clock.steps)} steps "
        f"({rows_decoded:,} rows decoded); the rest is the encoder and the search's own work.\n\n"
        "| rows | steps | median ms a step | seconds | share of the steps' time |\n"
        f"|---|---|---|---|---|\n{table}\n"
        f"The same {rows_decoded:,} rows in steps of {max(by_rows)} rows only, at their median "
        f"{full_step * 1e3:.2f} ms: {bound:.3f} s, {in_steps - bound:.3f} s less "
        f"({(in_steps - bound) / seconds:.1%} of the pass).\n"
    )
    publish(report, args.markdown)


if __name__ == "__main__":
    main()
