"""How much of one greedy decoding step is matrix products: the step, then its products alone.

    .venv/bin/python benchmarks/step_products.py --model runs/multi30k-de-en --rows 64,32

One decoding step of a trained model (``--model``; the cache holds ``--past`` positions, the
source is ``--source`` random tokens) is recorded once with a ``TorchDispatchMode``: every
operator it calls, with its arguments. Then, on one thread, in turn for ``--rounds`` rounds:
the step itself (decoder and vocabulary step, ``best_next_tokens``), and the recorded matrix
products alone called again on the same tensors (``linear``: the decoder's projections and
feed-forward; ``matmul``: attention's Q·Kᵀ and weights·V; ``mm``: the final linear layer's
products). What is left, step minus products, is every other operator and the Python around
them. Fastest of the rounds, in ms per step. Writes ``--report`` (default
results/step_products.md).
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
    for call in recorder.calls:
        name = str(call[0]).split(".")[1]
        if name in PRODUCTS:
            kinds.setdefault(name, []).append(call)

    def replay(calls):
        def run():
            for func, a, kw in calls:
                func(*a, **kw)

        return run

    products = [call for calls in kinds.values() for call in calls]
    times: dict[str, float | int] = {"rows": rows, "operators": len(recorder.calls),
                                     "products": len(products)}  # fmt: skip
    runs = {"step": step, "all products": replay(products)}
    runs |= {name: replay(calls) for name, calls in kinds.items()}
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
             f"{args.rounds} rounds of 50.\n",
             "| rows | operators | products | step | all products | linear | matmul | mm | "
             "rest |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    with torch.inference_mode():
        for rows in (int(r) for r in args.rows.split(",")):
            t = measure(model, rows, args)
            rest = t["step"] - t["all products"]
            lines.append(
                f"| {rows} | {t['operators']} | {t['products']} | {t['step']:.2f} | "
                f"{t['all products']:.2f} ({t['all products'] / t['step']:.0%}) | "
                f"{t.get('linear', 0):.2f} | {t.get('matmul', 0):.2f} | {t.get('mm', 0):.2f} | "
                f"{rest:.2f} |"
            )
            print(lines[-1], flush=True)
    args.report.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
