"""Multi30k de->en: train, plot the loss curve, score BLEU / chrF, and time decoding.

    .venv/bin/python benchmarks/multi30k.py --data_dir ../shared/data [--minutes 60]
    .venv/bin/python benchmarks/multi30k.py --skip-train        # re-measure an existing run

Trains the built-in ``multi30k-de-en`` config into ``--out`` for ``--minutes`` of wall-clock
time, averages the last 5 checkpoints, translates test_2016_flickr (1,000 sentences) with beam
search and with greedy search, with and without the key/value cache, and writes
``benchmarks/results/multi30k.json`` and ``multi30k_loss.png``. Run by hand on a quiet machine
(the speeds depend on it); the README quotes the numbers.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from matplotlib.figure import Figure

from transformer.config import load_config
from transformer.data import load_splits
from transformer.data.batching import encode_source
from transformer.data.tokenizer import Tokenizers
from transformer.inference import translate_ids
from transformer.inference.evaluate import score_translations
from transformer.model_dir.checkpoints import average_last, load_checkpoint, read_config
from transformer.model_dir.runs import read_metrics
from transformer.training.loop import train

RESULTS = Path(__file__).parent / "results"


def plot_losses(rows: list[dict], path: Path) -> None:
    train_rows = [r for r in rows if "loss" in r]
    valid_rows = [r for r in rows if "valid_loss" in r]
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label="train loss")
    ax.plot([r["step"] for r in valid_rows], [r["valid_loss"] for r in valid_rows], "o-",
            label="valid loss")  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("label-smoothed cross-entropy per token")
    ax.set_title("Multi30k de→en, small preset")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def timed_translation(
    model, tokenizers, sources, decode, use_cache: bool
) -> tuple[list[str], float]:
    ids = [encode_source(tokenizers.src.encode(s)) for s in sources]
    start = time.perf_counter()
    results = translate_ids(model, ids, decode, use_cache=use_cache)
    seconds = time.perf_counter() - start
    return [tokenizers.tgt.decode(options[0].tokens) for options in results], seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=None, help="folder with the Multi30k files")
    parser.add_argument("--out", default="runs/multi30k-de-en")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--skip-train", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    overrides = {"train": {"max_minutes": args.minutes}, "data": {"data_dir": args.data_dir}}
    config = load_config("multi30k-de-en", overrides)
    if not args.skip_train:
        train(config, out, overwrite=True)
    RESULTS.mkdir(exist_ok=True)
    rows = read_metrics(out)
    plot_losses(rows, RESULTS / "multi30k_loss.png")

    tokenizers = Tokenizers.load(out, read_config(out).model.vocab_sizes)
    test = load_splits(config.data).test
    sources, references = [s for s, _ in test], [t for _, t in test]
    averaged = average_last(out, 5)
    results: dict[str, object] = {"train": [r for r in rows if "event" in r]}
    train_rows = [r for r in rows if "tokens_per_s" in r]
    results["tokens_per_s_median"] = sorted(r["tokens_per_s"] for r in train_rows)[
        len(train_rows) // 2
    ]
    results["valid"] = [r for r in rows if "valid_loss" in r]
    for name, folder in (("best", out), ("average_last5", averaged)):
        loaded = load_checkpoint(folder)
        for beam in (4, 1):
            decode = replace(loaded.config.decode, beam_size=beam, nbest=1)
            for use_cache in (True, False):
                if name != "best" and not use_cache:
                    continue  # speed is measured once, on the best checkpoint
                hyps, seconds = timed_translation(
                    loaded.model, tokenizers, sources, decode, use_cache
                )
                scores = score_translations(hyps, references, lowercase=True)
                key = f"{name} beam{beam} {'cache' if use_cache else 'no-cache'}"
                results[key] = {
                    "checkpoint": loaded.path.name,
                    "seconds": seconds,
                    "sentences_per_s": len(sources) / seconds,
                    **{s.name: s.score for s in scores},
                    "signatures": {s.name: s.signature for s in scores},
                }
                print(key, json.dumps(results[key]))
    (RESULTS / "multi30k.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
