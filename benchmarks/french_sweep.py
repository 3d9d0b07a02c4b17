"""The `tatoeba-fr-en` config's choices measured: preset, vocabulary, batch and schedule.

Each variant is the built-in config with one setting changed, trained for the same minutes on
one thread; two variants train at once (one per core), so that a pair shares the machine
alike. The schedule is scaled to the short budget: the warm-up takes the same share of a
variant's expected steps (``--warmup_share``, 25% as in the hour-long run: 1,000 of 4,041
steps) and the last 20% of the time cools down to 0 as in the config. At the end each variant
is validated on the whole valid split (one reference, beam 4) and evaluated on the test split
(one and all references); the choice is made on the valid split.

    python benchmarks/french_sweep.py --data_dir ../shared/data/tatoeba --out runs/sweep30 \
        --variants baseline lr2e-3 vocab16k vocab4k batch8k batch2k --table sweep.md

Runs by hand (about 32 minutes a pair at the default 30 minutes); never part of ``make test``.
``--baseline_steps`` estimates what the config makes in ``--minutes`` on one thread with another
run beside it, which sizes each variant's warm-up (800: 200 warm-up steps; on a 2-core Xeon it
made 1,117, so the warm-up took 18% of the run).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

# name: (what changes, config overrides, steps relative to the baseline's at the same minutes)
VARIANTS: dict[str, tuple[str, dict[str, object], float]] = {
    "baseline": ("the config (small, 8,000 pieces, 4,096 tokens, peak 1e-3)", {}, 1.0),
    "base": ("preset base (d_model 512, 6 + 6 layers)", {"model.preset": "base"}, 0.2),
    "vocab16k": ("16,000 pieces", {"data.vocab_size": 16000}, 1.0),
    "vocab4k": ("4,000 pieces", {"data.vocab_size": 4000}, 1.0),
    "batch8k": ("8,192 tokens a batch", {"train.max_tokens": 8192}, 0.5),
    "lr2e-3": ("peak learning rate 2e-3", {"train.peak_lr": 2e-3}, 1.0),
    "batch2k": ("2,048 tokens a batch", {"train.max_tokens": 2048}, 2.0),
    # the config once more, in the last pair: how far two runs of one setting differ
    "baseline-again": ("the config, again", {}, 1.0),
}
BLEU = re.compile(r"BLEU[^\n]*?= *([0-9.]+)")


def command(name: str, minutes: float, steps: float, args: argparse.Namespace) -> list[str]:
    """The `transformer train` command of one variant."""
    overrides = dict(VARIANTS[name][1])
    overrides.setdefault("train.warmup_steps", max(10, round(args.warmup_share * steps)))
    cmd = [sys.executable, "-m", "transformer", "train", "--config", "tatoeba-fr-en",
           "--data.data_dir", str(args.data_dir), "--out", str(args.out / name),
           "--train.max_minutes", str(minutes), "--runtime.threads", "1",
           "--train.validate_every", "1000000", "--train.save_every", "1000000",
           "--train.bleu_sentences", "2500"]  # fmt: skip
    for key, value in overrides.items():
        cmd += [f"--{key}", str(value)]
    return cmd


def final_validation(run: Path) -> dict[str, float]:
    """From metrics.jsonl: the last validation's step, loss and BLEU, and the median training
    speed."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "valid_bleu" in r][-1]
    speeds = sorted(r["tokens_per_s"] for r in rows if "tokens_per_s" in r)
    return {"step": last["step"], "valid_loss": last.get("valid_loss", float("nan")),
            "valid_bleu": last["valid_bleu"],
            "tokens_per_s": speeds[len(speeds) // 2] if speeds else float("nan")}  # fmt: skip


def table(results: dict[str, dict]) -> str:
    """The results as a Markdown table."""
    lines = ["| variant | tokens/s (median) | steps | valid BLEU (all pairs, one ref) "
             "| test BLEU one ref / all refs |", "|---|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        one, every = r["test"]
        lines.append(f"| {VARIANTS[name][0]} | {r['tokens_per_s']:,.0f} | {r['step']:,} "
                     f"| {r['valid_bleu']:.1f} | {one:.2f} / {every:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def evaluate(run: Path) -> tuple[float, float]:
    """Test BLEU with one reference per line and with all references of each source."""
    out = subprocess.run(
        [sys.executable, "-m", "transformer", "evaluate", str(run), "--checkpoint", "last",
         "-o", f"{run}.test.hyp"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    Path(f"{run}.evaluate.txt").write_text(out)
    scores = [float(x) for x in BLEU.findall(out)]
    return scores[0], scores[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--baseline_steps", type=float, default=800,
                        help="steps the baseline makes in --minutes on one thread")  # fmt: skip
    parser.add_argument("--warmup_share", type=float, default=0.25)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--table", type=Path)
    args = parser.parse_args()
    results = {}
    pairs = [args.variants[i : i + 2] for i in range(0, len(args.variants), 2)]
    for pair in pairs:
        started = time.time()
        jobs = []
        for name in pair:
            steps = args.baseline_steps * VARIANTS[name][2]
            log = open(args.out.parent / f"{args.out.name}-{name}.log", "w")  # noqa: SIM115
            jobs.append((name, subprocess.Popen(command(name, args.minutes, steps, args),
                                                stdout=log, stderr=subprocess.STDOUT)))  # fmt: skip
        for name, job in jobs:
            if job.wait() != 0:
                sys.exit(f"{name}: training failed (see {args.out.name}-{name}.log)")
        for name, _ in jobs:
            run = args.out / name
            results[name] = {**final_validation(run), "test": evaluate(run)}
            print(name, results[name], f"{time.time() - started:.0f} s", flush=True)
    if args.table:
        args.table.write_text(table(results))
    (args.out / "sweep.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
