"""Where oneDNN's float32 product stops losing to MKL's as products grow: the time of
oneDNN's ``_linear_pointwise`` (plain weight) over ``F.linear``'s (MKL) for one product
x·Wᵀ + b without a gradient, by rows, for the shapes of a model's linear layers.

    .venv/bin/python benchmarks/small_products.py --threads 1,2 [--markdown F]

Each cell is the fastest of 5 timings of ``--calls`` calls of each library on the same
tensors, oneDNN's time over MKL's, with the product's multiply-adds (M·N·K, millions) after
it: below 1 oneDNN is the faster. ``products.SMALL_PRODUCT`` (model/products.py) is chosen
from this table.
"""

from __future__ import annotations

import argparse
import sys
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from machine import cpu_name, publish

from transformer.model.products import SMALL_PRODUCT, can_pack

SHAPES = [(128, 128), (128, 512), (512, 128), (128, 224), (256, 256), (256, 1024), (1024, 256),
          (512, 512)]  # fmt: skip
ROWS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)


def fastest(call, calls: int) -> float:
    """Seconds a call, the fastest of 5 timings of ``calls`` calls (after a warm-up)."""
    for _ in range(calls // 8):
        call()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if not can_pack():
        sys.exit("this PyTorch has no oneDNN product on this CPU")
    onednn_product = torch.ops.mkldnn._linear_pointwise
    lines = [
        f"`python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`", "",
        f"{cpu_name()}; oneDNN's time over MKL's (million multiply-adds); SMALL_PRODUCT = "
        f"{SMALL_PRODUCT / 1e6:.2f} M.", "",
    ]  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        lines += [f"**{threads} thread{'s' if threads > 1 else ''}**", "",
                  "| in → out | " + " | ".join(f"{m} rows" for m in ROWS) + " |",
                  "|---|" + "---|" * len(ROWS)]  # fmt: skip
        for k, n in SHAPES:
            weight, bias = torch.randn(n, k, generator=generator), torch.randn(n)
            cells = []
            for m in ROWS:
                x = torch.randn(m, k, generator=generator)
                with torch.no_grad():
                    through = partial(onednn_product, x, weight, bias, "none", [], "")
                    onednn = fastest(through, args.calls)
                    mkl = fastest(partial(F.linear, x, weight, bias), args.calls)
                cells.append(f"{onednn / mkl:.2f} ({m * n * k / 1e6:.2f})")
            lines.append(f"| {k} → {n} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
        lines.append("")
    publish(lines, args.markdown)


if __name__ == "__main__":
    main()
