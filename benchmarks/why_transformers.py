"""Why Transformers: the notes' predecessors and the Transformer, trained side by side.

    .venv/bin/python benchmarks/why_transformers.py --data_dir ../shared/data/multi30k [--minutes 4]
    .venv/bin/python benchmarks/why_transformers.py --skip-train     # compare the runs again

Trains three models, one after another, for the same wall-clock minutes each on this machine,
on the same data with the same optimiser, schedule and batch size (the built-in ``numbers``
config's ``train`` section):

    gru              a GRU encoder-decoder without attention: one fixed vector c for the sentence
    gru-bahdanau     the same with Bahdanau's attention: c_i = Σ_j α_ij h_j per target word
    transformer      the built-in ``numbers`` Transformer (d_model 128, 3+3 layers)

then ``transformer compare`` writes its report (report.md, PNG and SVG plots, compare.json) into
``--results`` (benchmarks/results/why_transformers). The sizes are close: 3.6M parameters for
the GRU, 3.8M with attention (hidden 256 per direction, embeddings 128), 3.4M for the
Transformer (8,000 pieces per language).

The data is Multi30k English -> French (``--data_dir`` reads local copies; without it the corpus
is downloaded), because the length effect shows there. It does not on number words, where the
answer is a composition of a few local patterns: there all three models reached 99.8-100%
exact match after 4 minutes each, numbers up to 999,999 (1-9 words) and up to 999,999,999,999 (up to
25 words) alike, so no length bucket separates them (``--corpus numbers --vocab_size 300``
repeats that). Multi30k's test2016 has sentences of 4 to 32 words, so its longest bucket, 16-32
words, still holds 145 sentences.

Extra ``--section.key value`` options go to all three trainings (e.g. ``--threads 1``). Run it on
a quiet machine: speeds are measured, and a busy one changes them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformer.cli import config_from_args
from transformer.config import RuntimeConfig
from transformer.inspect.compare import compare_runs
from transformer.inspect.compare_report import check_report_folder, write_report
from transformer.training.loop import train

RESULTS = Path(__file__).parent / "results" / "why_transformers"
RNN = ["--architecture", "rnn", "--rnn_cell", "gru", "--rnn_hidden", "256",
       "--rnn_embedding", "128", "--rnn_layers", "1", "--rnn_dropout", "0.0"]  # fmt: skip
MODELS = {
    "gru": [*RNN, "--rnn_attention", "none"],
    "gru-bahdanau": [*RNN, "--rnn_attention", "bahdanau"],
    "transformer": [],  # the numbers config's own model
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="training minutes per model")
    parser.add_argument("--out", default="runs/why-transformers", help="where the runs go")
    parser.add_argument("--results", default=str(RESULTS), help="the compare report's folder")
    parser.add_argument("--skip-train", action="store_true", help="compare existing runs only")
    args, extra = parser.parse_known_args()
    out, results = Path(args.out), Path(args.results)
    check_report_folder(results)  # before any training
    data = ["--corpus", "multi30k", "--vocab_size", "8000"]  # the defaults; `extra` may change them
    common = ["--config", "numbers", *data, "--max_minutes", str(args.minutes), "--max_steps",
              "1000000", *extra]  # fmt: skip
    runs = []
    for name, model in MODELS.items():
        config = config_from_args([*common, *model])
        runs.append(out / name)
        if not args.skip_train:
            result = train(config, out / name, overwrite=True)
            print(f"{name}: {result.step} steps in {result.seconds:.0f} s")
    threads = config.runtime.threads
    comparison = compare_runs(runs, runtime=RuntimeConfig(device="cpu", threads=threads))
    files = write_report(comparison, results)
    for run in comparison.runs:
        figures = {"run": run.name, "bleu": round(run.bleu, 2), "exact": run.exact,
                   "bucket_bleu": [round(b, 2) for b in run.bucket_bleu],
                   "tokens_per_s": run.tokens_per_s, "forward_ms": run.forward_ms}  # fmt: skip
        print(json.dumps(figures))
    print(f"report: {files[0]}")


if __name__ == "__main__":
    main()
