"""Multi30k de->en on this CPU, bf16 against fp32: BLEU after the same minutes and the same steps.

    .venv/bin/python benchmarks/precision_cpu.py --data_dir ../shared/data/multi30k --minutes 30
    .venv/bin/python benchmarks/precision_cpu.py --data_dir ../shared/data/multi30k \\
        --minutes 0.5 --test 50 --bleu_sentences 0 --save_every 5 --out /tmp/check  # a tiny check

Trains the built-in ``multi30k-de-en`` config once per precision (``--precisions``, fp32 then
bf16), each for ``--minutes`` of wall-clock time, one after the other on the same machine, with
the same seed, data and batch order; every checkpoint is kept. Then translates the test split
(test_2016_flickr; its first ``--test`` sentences, 0 for all 1,000) with beam 4 in fp32 and
scores sacreBLEU, for two checkpoints of each run:
- the run's best checkpoint (validation BLEU): what the same minutes bought;
- the checkpoint at the last step every run reached (a multiple of ``train.save_every``): what
  the same steps bought, so that a precision's speed and its accuracy are told apart.
Writes ``results/precision_cpu.md``. Run by hand on a quiet machine: the speeds depend on it.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import torch

from transformer.config import load_config
from transformer.data import load_splits
from transformer.data.tokenizer import Tokenizers
from transformer.device import native_bf16_cpu
from transformer.inference.evaluate import score_translations
from transformer.inference.translation import translate
from transformer.model_dir.checkpoints import load_checkpoint, read_config, read_index
from transformer.model_dir.runs import read_metrics
from transformer.training.loop import train

RESULTS = Path(__file__).parent / "results"


def test_bleu(run: Path, name: str, sources: list[str], references: list[str]) -> float:
    """Test BLEU of the checkpoint ``name`` (a step folder) of ``run``, beam 4, in fp32."""
    loaded = load_checkpoint(run / "checkpoints" / name)
    decode = replace(loaded.config.decode, beam_size=4, nbest=1)
    hypotheses = translate(
        loaded.model, Tokenizers.load(run, read_config(run).model.vocab_sizes), sources, decode
    ).best
    return next(s.score for s in score_translations(hypotheses, references) if s.name == "BLEU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=None, help="folder with the Multi30k files")
    parser.add_argument("--out", default="runs/precision_cpu", help="one run folder per precision")
    parser.add_argument("--minutes", type=float, default=30.0, help="of training per precision")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--test", type=int, default=0, help="test sentences to score; 0: all")
    parser.add_argument("--bleu_sentences", type=int, default=None,
                        help="validation BLEU sentences (default: the config's 300)")  # fmt: skip
    parser.add_argument("--save_every", type=int, default=None,
                        help="steps between checkpoints (default: the config's 500)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: the default")
    parser.add_argument("--skip-train", action="store_true", help="score the runs in --out")
    parser.add_argument("--report", type=Path, default=RESULTS / "precision_cpu.md",
                        help="the table's file")  # fmt: skip
    args = parser.parse_args()
    train_overrides: dict = {"max_minutes": args.minutes, "max_steps": 10**9,
                             "keep_checkpoints": 10**6}  # fmt: skip
    for key in ("bleu_sentences", "save_every"):
        if getattr(args, key) is not None:
            train_overrides[key] = getattr(args, key)
    runs: dict[str, Path] = {}
    for precision in args.precisions.split(","):
        config = load_config("multi30k-de-en", {
            "data": {"data_dir": args.data_dir}, "train": train_overrides,
            "runtime": {"precision": precision, "device": "cpu", "threads": args.threads},
        })  # fmt: skip
        runs[precision] = Path(args.out) / precision
        if not args.skip_train:
            train(config, runs[precision], overwrite=True)

    test = load_splits(config.data).test
    test = test[: args.test] if args.test else test
    sources, references = [s for s, _ in test], [t for _, t in test]
    saved = {p: sorted(c.name for c in (run / "checkpoints").glob("step_*"))
             for p, run in runs.items()}  # fmt: skip
    common = sorted(set.intersection(*(set(names) for names in saved.values())))
    same_steps = common[-1] if common else None
    rows = []
    for precision, run in runs.items():
        metrics = read_metrics(run)
        speeds = sorted(r["tokens_per_s"] for r in metrics if "tokens_per_s" in r)
        valid = [r for r in metrics if "valid_loss" in r]
        best = read_index(run / "checkpoints")["best"]
        speed = f"{speeds[len(speeds) // 2]:,.0f}" if speeds else "(no log row yet)"
        rows.append(
            f"| {precision} | {metrics[-1]['step']:,} | {speed} | "
            f"{valid[-1]['valid_loss']:.3f} | {best} | "
            f"{test_bleu(run, best, sources, references):.2f} | "
            + (f"{test_bleu(run, same_steps, sources, references):.2f} |" if same_steps else "|")
        )
        print(rows[-1], flush=True)
    cpu = native_bf16_cpu() or "no native bf16"
    text = "\n".join([
        f"`multi30k-de-en`, {args.minutes:g} minutes of training per precision on the CPU "
        f"({cpu}; {torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.1f} at "
        f"the end), torch {torch.__version__}; test_2016_flickr, {len(sources)} sentences, "
        f"beam 4 in fp32; same steps: {same_steps}",
        "",
        "| precision | steps | tokens/s (median) | last valid loss | best checkpoint | "
        "BLEU, same minutes (best) | BLEU, same steps |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]) + "\n"  # fmt: skip
    print(text)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)


if __name__ == "__main__":
    main()
