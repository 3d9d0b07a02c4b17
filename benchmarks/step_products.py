"""How much of one greedy decoding step is matrix products, other operators, and Python.

    .venv/bin/python benchmarks/step_products.py --model runs/multi30k-de-en --rows 64,32

One decoding step of a trained model (``--model``; the cache holds ``--past`` positions, the
source is ``--source`` random tokens) is recorded once with a ``TorchDispatchMode``: every
operator it calls, with its arguments. Then, on one thread, in turn for ``--rounds`` rounds:
the step itself (decoder and vocabulary step, ``best_next_tokens``); the recorded matrix
products alone, called again on the same tensors, by kind (``linear``: the decoder's
projections and feed-forward, and the final layer where the vocabulary is one product;
``bmm``: attention's Q·Kᵀ and weights·V; ``mm``/``addmm``: the final layer's products into
its buffer); and every other recorded operator alone, called again the same way (in-place
ones too: their numbers change, their cost does not). What is left, step minus both, is the
Python around the operators and its dispatch into them. Fastest of the rounds, in ms per step.
Writes ``--report`` (default results/step_products.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transformer.inference.next_tokens import best_next_tokens
from transformer.inference.search import RunningBatch
from transformer.model_dir.checkpoints import load_checkpoint

RESULTS = Path(__file__).parent / "results"
PRODUCTS = ("linear", "matmul", "mm", "addmm", "bmm")
# report columns: (heading, the kinds of product it sums)
COLUMNS = [
    ("linear layers", ("linear",)),
    ("attention", ("bmm", "matmul")),
    ("vocabulary", ("mm", "addmm")),
]


class Recorder(TorchDispatchMode):
    """Keeps every operator call (the operator, its arguments) made inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def fastest(runs: dict, rounds: int, repeats: int = 50) -> dict[str, float]:
    """ms per call of each of ``runs``, the fastest of ``rounds`` rounds of ``repeats`` calls;
    every round runs each in turn, so that load from other work falls on all of them."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            for _ in range(5):
                run()
            start = time.perf_counter()
            for _ in range(repeats):
                run()
            best[name] = min(best[name], (time.perf_counter() - start) / repeats * 1e3)
    return best


def measure(model, rows: int, args: argparse.Namespace) -> dict[str, float | int]:
    torch.manual_seed(0)
    src = torch.randint(4, model.config.src_vocab_size, (rows, args.source))
    memory, src_mask = model.encode(src)
    batch = RunningBatch(model, memory, src_mask, True, longest=4 * args.past)
    at_limit = torch.zeros(rows, dtype=torch.bool)
    for _ in range(args.past):
        batch.append(batch.next_best(1, at_limit).tokens[:, 0])
    past = batch.cache.length

    def step():
        for layer in batch.cache.layers:  # the same position every time
            layer.length = past
        return best_next_tokens(batch._decoded(logits=False), model.output, 1, at_limit)

    recorder = Recorder()
    with recorder:
        step()
    kinds: dict[str, list[tuple]] = {}
    others: list[tuple] = []
    for call in recorder.calls:
        name = str(call[0]).split(".")[1]
        if name in PRODUCTS:
            kinds.setdefault(name, []).append(call)
        else:
            others.append(call)

    def replay(calls):
        def run():
            for func, a, kw in calls:
                func(*a, **kw)

        return run

    products = [call for calls in kinds.values() for call in calls]
    times: dict[str, float | int] = {"rows": rows, "operators": len(recorder.calls),
                                     "products": len(products)}  # fmt: skip
    runs = {"step": step, "all products": replay(products), "other operators": replay(others)}
    for heading, names in COLUMNS:
        calls = [call for name in names for call in kinds.get(name, [])]
        if calls:
            runs[heading] = replay(calls)
    return times | fastest(runs, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="runs/multi30k-de-en")
    parser.add_argument("--rows", default="64,32")
    parser.add_argument("--past", type=int, default=12, help="positions in the cache")
    parser.add_argument("--source", type=int, default=20, help="source tokens a row")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--report", type=Path, default=RESULTS / "step_products.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_checkpoint(Path(args.model)).model.eval()
    lines = [f"`python benchmarks/step_products.py --model {args.model} --rows {args.rows}`, "
             f"one thread, {args.past} positions in the cache, {args.source} source tokens; "
             "ms per step, fastest of "
             f"{args.rounds} rounds of 50. Python: the step minus its operators, each kind "
             "called again alone on the recorded tensors.\n",
             "| rows | operators | products | step | all products | "
             + " | ".join(heading for heading, _ in COLUMNS)
             + " | other operators | Python and dispatch |",
             "|---|---|---|---|---|" + "---|" * len(COLUMNS) + "---|---|"]  # fmt: skip
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            t = measure(model, rows, args)
            python = t["step"] - t["all products"] - t["other operators"]
            lines.append(
                f"| {rows} | {t['operators']} | {t['products']} | {t['step']:.2f} | "
                f"{t['all products']:.2f} ({t['all products'] / t['step']:.0%}) | "
                + " | ".join(f"{t.get(heading, 0):.2f}" for heading, _ in COLUMNS)
                + f" | {t['other operators']:.2f} | {python:.2f} ({python / t['step']:.0%}) |"
            )
            print(lines[-1], flush=True)
    args.report.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
