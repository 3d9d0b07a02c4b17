"""The two CPU kernels a decoding step's attention goes around, and what going around them gives.

    .venv/bin/python benchmarks/attention_kernels.py --rows 256

A decoding step's attention is one query per row over the keys so far (self-attention) or over
the source (encoder-decoder attention): ``rows`` = batch rows × heads small products. On one
thread, the fastest of ``--rounds`` rounds, each over ``--inputs`` different random tensors (a
kernel timed on one tensor over and over can look faster than on new data every step):

- ``softmax`` over the last dim, rows of 4 to 32 columns, as it is and padded to 16 columns with
  −inf (``attention._softmax``);
- weights·V and Q·Kᵀ through ``bmm`` against multiply-and-sum, at Dh = 32 and 4 to 32 keys
  (``bmm`` leaves BLAS for a scalar loop below 400 = keys · Dh for one query);
- ``attention_step`` against the code before it (``bmm`` and ``softmax`` as they are), for a
  step of self-attention (no mask) and of encoder-decoder attention (a padding mask).

Times in µs per call. Writes ``--report`` (default results/attention_kernels.md).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from transformer.model.attention import _softmax, attention_step

RESULTS = Path(__file__).parent / "results"


def fastest(calls: dict[str, Callable[[int], object]], inputs: int, rounds: int) -> dict:
    """µs per call of each ``call(i)`` over inputs i = 0..inputs-1, the calls in turn in every
    round, fastest of the rounds."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            for i in range(min(inputs, 4)):
                call(i)
            start = time.perf_counter()
            for i in range(inputs):
                call(i)
            best[name] = min(best[name], (time.perf_counter() - start) / inputs * 1e6)
    return best


def kernels(s: list, w: list, v: list, q: list) -> dict[str, Callable[[int], object]]:
    """The kernels of one row of the first table, over scores s, weights w, values v (also
    the keys) and queries q."""
    return {
        "softmax": lambda i: s[i].softmax(dim=-1),
        "padded": lambda i: _softmax(s[i]),
        "wv bmm": lambda i: torch.bmm(w[i], v[i]),
        "wv sum": lambda i: (w[i].transpose(1, 2) * v[i]).sum(1, keepdim=True),
        "qk bmm": lambda i: torch.bmm(q[i], v[i].transpose(1, 2)),
        "qk sum": lambda i: (q[i] * v[i]).sum(-1).unsqueeze(1),
    }


def steps(qs: list, ks: list, vs: list, mask: torch.Tensor | None) -> dict:
    """A step's attention before and now, over queries, keys and values."""
    return {
        "before": lambda i: plain_step(qs[i], ks[i], vs[i], mask),
        "now": lambda i: attention_step(qs[i], ks[i], vs[i], mask)[0],
    }


def plain_step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None):
    """``attention_step`` as it was: ``bmm`` and ``softmax`` whatever the sizes."""
    B, H, Tq, Dh = q.shape
    keys, values = k.flatten(0, 1), v.flatten(0, 1)
    scores = torch.bmm(q.flatten(0, 1), keys.transpose(1, 2)).div_(math.sqrt(Dh))
    if mask is None:
        return torch.bmm(scores.softmax(dim=-1), values).view(B, H, Tq, Dh)
    blocked = mask.logical_not()
    scores = scores.view(B, H, Tq, -1).masked_fill_(blocked, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1).masked_fill_(blocked, 0.0)
    return torch.bmm(weights.flatten(0, 1), values).view(B, H, Tq, Dh)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=256, help="batch rows × heads")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--inputs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--report", type=Path, default=RESULTS / "attention_kernels.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    R, n, rounds, Dh = args.rows, args.inputs, args.rounds, 32
    lines = [f"`python benchmarks/attention_kernels.py --rows {R}`, one thread, µs per call, "
             f"fastest of {rounds} rounds over {n} different inputs.", "",
             "| keys | softmax | padded to 16 | w·V `bmm` | multiply-sum | Q·Kᵀ `bmm` | "
             "multiply-sum |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    with torch.inference_mode():
        for keys in (4, 8, 12, 13, 15, 16, 20, 32):
            s = [torch.randn(R, 1, keys) for _ in range(n)]
            w = [x.softmax(-1) for x in s]
            v = [torch.randn(R, keys, Dh) for _ in range(n)]
            q = [torch.randn(R, 1, Dh) for _ in range(n)]
            times = fastest(kernels(s, w, v, q), n, rounds).values()
            lines.append(f"| {keys} | " + " | ".join(f"{t:.1f}" for t in times) + " |")
        H = args.heads
        B = R // H
        lines += ["", f"A step's attention, {B} rows of {H} heads, Dh {Dh}, µs per call:", "",
                  "| attention | keys | before | `attention_step` | speed-up |",
                  "|---|---|---|---|---|"]  # fmt: skip
        cases = [("self", keys, False) for keys in (4, 8, 12, 20)]
        cases += [("encoder-decoder", keys, True) for keys in (10, 14, 24)]
        for name, keys, masked in cases:
            qs = [torch.randn(B, H, 1, Dh) for _ in range(n)]
            ks = [torch.randn(B, H, keys, Dh) for _ in range(n)]
            vs = [torch.randn(B, H, keys, Dh) for _ in range(n)]
            mask = None
            if masked:
                mask = torch.ones(B, 1, 1, keys, dtype=torch.bool)
                mask[::3, ..., keys - 3 :] = False
            for i in range(3):
                torch.testing.assert_close(attention_step(qs[i], ks[i], vs[i], mask)[0],
                                           plain_step(qs[i], ks[i], vs[i], mask),
                                           rtol=1e-5, atol=1e-6)  # fmt: skip
            before, after = fastest(steps(qs, ks, vs, mask), n, rounds).values()
            lines.append(f"| {name} | {keys} | {before:.1f} | {after:.1f} | "
                         f"{before / after:.2f}× |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
