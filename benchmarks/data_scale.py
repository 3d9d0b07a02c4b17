"""Data at scale: preparing and batching millions of sentence pairs in bounded memory.

Generates a synthetic parallel corpus (English and French number words, numbers drawn with
replacement from 0..999,999) of N pairs as two text files, then measures in a fresh process for
each size, as ``transformer train --src en.txt --tgt fr.txt`` would run them:

- preparation: reading and splitting the corpus, training SentencePiece, encoding the training
  pairs (into the binarized dataset, or into Python lists before it);
- one epoch of batching: the size-sorted batch order and every batch padded into tensors,
  as the training loop reads them;

and reports wall time, peak resident memory (VmHWM; reset between the two phases) and the
bytes the prepared training data takes on disk.

``--baseline PATH`` measures the same with the package found in PATH/src as well, e.g. the
commit before the binarized pipeline (Python lists of every example)::

    git worktree add /tmp/before-tree ffe618b
    python benchmarks/data_scale.py --sizes 1e6 2e6 5e6 --baseline /tmp/before-tree \
        --baseline-sizes 2.5e5 5e5 1e6 --out benchmarks/results/data_scale.md

Runs by hand (minutes per size); never part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"corpus": None, "preset": "tiny", "vocab_size": 200, "max_tokens": 4096,
        "valid_fraction": 0.001, "test_fraction": 0.001}  # fmt: skip


def generate(folder: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    """N pairs of number words in en.txt / fr.txt (made once per size, then reused)."""
    from transformer.data.numbers import NumberWords

    folder.mkdir(parents=True, exist_ok=True)
    en, fr = folder / f"en-{n}.txt", folder / f"fr-{n}.txt"
    if en.exists() and fr.exists():
        return en, fr
    rng = random.Random(seed)
    words = NumberWords("en"), NumberWords("fr")
    with open(f"{en}.tmp", "w") as e, open(f"{fr}.tmp", "w") as f:
        for _ in range(n):
            x = rng.randint(0, 999_999)
            e.write(words[0](x) + "\n")
            f.write(words[1](x) + "\n")
    os.replace(f"{en}.tmp", en)
    os.replace(f"{fr}.tmp", fr)
    return en, fr


def _peak_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current RSS


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child(en: Path, fr: Path, out: Path) -> dict:
    """One measurement in this (fresh) process, with whichever package is on the path."""
    import torch

    import transformer
    from transformer.config import load_config, sectioned
    from transformer.data.batching import collate, make_batches
    from transformer.model_dir.runs import RunDir
    from transformer.training import prepare as prep

    torch.set_num_threads(1)
    tree = Path(os.environ["PYTHONPATH"]).resolve()
    if not Path(transformer.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"imported {transformer.__file__}, not the package in {tree}")
    config = load_config(None, sectioned({**KEYS, "src": str(en), "tgt": str(fr)}))
    run = RunDir(out)
    started = time.perf_counter()
    if hasattr(prep, "save") and "scratch" in prep.save.__code__.co_varnames:  # binarized
        data = prep.prepare(config, run, resume=False)
        prep.save(data, run, run.scratch)
        disk = _disk(run.data)
    else:  # Python lists in memory; nothing of the data on disk
        data = prep.prepare(config, run, resume=False)
        disk = 0
    prep_s, prep_peak = time.perf_counter() - started, _peak_bytes()
    _reset_peak()
    started = time.perf_counter()
    order = make_batches(data.train, config.train.max_tokens, config.train.seed, 0)
    tokens = 0
    batch_of = getattr(data.train, "batch", None)  # the binarized dataset pads from its arrays
    for indices in order:
        batch = batch_of(indices) if batch_of else collate([data.train[i] for i in indices])
        tokens += batch.src.numel() + batch.tgt_in.numel()
    epoch_s, epoch_peak = time.perf_counter() - started, _peak_bytes()
    return {"pairs": len(data.train), "prep_s": prep_s, "prep_peak": prep_peak, "disk": disk,
            "epoch_s": epoch_s, "epoch_peak": epoch_peak, "batches": len(order),
            "padded_tokens": tokens}  # fmt: skip


def measure(n: int, corpus: Path, work: Path, src_tree: Path) -> dict:
    en, fr = generate(corpus, n)
    out = work / f"{src_tree.name}-{n}"
    subprocess.run(["rm", "-rf", str(out)], check=True)
    env = {**os.environ, "PYTHONPATH": str(src_tree / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(en), str(fr), str(out)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode:
        raise SystemExit(f"measuring {n:,} pairs with {src_tree} failed:\n{result.stderr[-3000:]}")
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _growth(rows: list[dict], key: str) -> float:
    """Least-squares slope of ``key`` per million pairs."""
    xs, ys = [r["pairs"] / 1e6 for r in rows], [r[key] for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def table(results: dict[str, list[dict]]) -> str:
    mb = 1 << 20
    lines = [
        "| pipeline | pairs | prepare s | prepare peak MB | epoch of batches s | "
        "epoch peak MB | on disk MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        for r in rows:
            lines.append(
                f"| {name} | {r['pairs']:,} | {r['prep_s']:.0f} | {r['prep_peak'] / mb:,.0f} | "
                f"{r['epoch_s']:.0f} | {r['epoch_peak'] / mb:,.0f} | {r['disk'] / mb:,.0f} |"
            )
    lines.append("")
    growth = {name: _growth(rows, "prep_peak") / mb for name, rows in results.items()
              if len(rows) > 1}  # fmt: skip
    for name, g in growth.items():
        lines.append(f"- {name}: peak memory of preparation grows {g:,.0f} MB per million pairs")
    if len(growth) == 2:
        (new, g_new), (old, g_old) = growth.items()
        lines.append(f"- growth {new} / {old}: {100 * g_new / g_old:.1f}%")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 2e6, 5e6])
    parser.add_argument("--baseline", type=Path, help="a checkout of an earlier commit")
    parser.add_argument("--baseline-sizes", nargs="+", type=float, default=[2.5e5, 5e5, 1e6])
    parser.add_argument("--work", type=Path, default=Path("/tmp/data_scale"))
    parser.add_argument("--out", type=Path, help="also write the table to this markdown file")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*(Path(p) for p in args.child))))
        return
    corpus = args.work / "corpus"
    runs = [("binarized (this tree)", ROOT, args.sizes)]
    if args.baseline:
        runs.append((f"lists ({args.baseline.name})", args.baseline.resolve(), args.baseline_sizes))
    results: dict[str, list[dict]] = {}
    for name, tree, sizes in runs:
        for n in sizes:
            row = measure(int(n), corpus, args.work, tree)
            print(name, json.dumps(row), flush=True)
            results.setdefault(name, []).append(row)
    text = table(results)
    print(text)
    if args.out:
        args.out.write_text(f"{__doc__.split(chr(10))[0]}\n\n{text}\n")


if __name__ == "__main__":
    main()
