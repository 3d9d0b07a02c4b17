"""The command table: each subcommand's help, the config sections it takes, its options, its run.

Each run parses nothing itself and makes one call into the library (training.py: info, train,
demo, average; translating.py: translate, evaluate, score, attention, compare, serve, export,
explain).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from jsonargparse import ArgumentParser

from ..config import SECTIONS
from .hub import _import, _import_options
from .training import (
    _average,
    _average_options,
    _demo,
    _demo_options,
    _info,
    _info_options,
    _train,
    _train_options,
)
from .translating import (
    _attention,
    _attention_options,
    _compare,
    _compare_options,
    _evaluate,
    _evaluate_options,
    _explain,
    _explain_options,
    _export,
    _export_options,
    _score,
    _score_options,
    _serve,
    _serve_options,
    _translate,
    _translate_options,
)


@dataclass
class Command:
    """One subcommand: its help line, the config sections it takes, its own options, its run."""

    help: str
    sections: tuple[str, ...]
    options: Callable[[ArgumentParser], None]
    run: Callable[[argparse.Namespace, dict[str, dict]], None]
    description: str = ""
    skip: frozenset[str] = frozenset()  # keys of its sections it has no use for


# What only training uses: a command that does not train neither offers nor accepts these.
TRAINING_ONLY = frozenset({"runtime.compile", "runtime.timeout_minutes"})


COMMANDS = {
    "info": Command("parameter counts per part of a model", ("model",), _info_options, _info),
    "train": Command("train a model on parallel text", tuple(SECTIONS), _train_options, _train,
                     "Trains from a YAML config (--config), files (--data.src, --data.tgt) or a "
                     "named corpus (--data.corpus). Precedence: defaults < preset < --config < "
                     "options; on --resume the saved config replaces --config."),
    "demo": Command("train a built-in model (number words, or French to English) and score it",
                    ("runtime",),
                    _demo_options, _demo, skip=frozenset({"runtime.timeout_minutes"})),
    "translate": Command("translate sentences (stdin, a file, or interactively)",
                         ("decode", "runtime"),
                         _translate_options, _translate,
                         "One sentence per line. Empty lines stay empty; a line longer than the "
                         "model accepts is truncated with a warning on stderr. Search options "
                         "default to the model's decode config.", skip=TRAINING_ONLY),
    "evaluate": Command("translate a test set and score it with sacreBLEU", ("decode", "runtime"),
                        _evaluate_options, _evaluate, skip=TRAINING_ONLY),
    "score": Command("the model's log-probability of given translations", ("decode", "runtime"),
                     _score_options, _score,
                     "Scores each line of --ref as a translation of the same line of --src, "
                     "teacher-forced: one line per pair, tab-separated: the total log-probability "
                     "(pieces and </s>), per token, and divided by the GNMT length penalty "
                     "(--decode.length_penalty), the score beam search ranks by.",
                     skip=TRAINING_ONLY),
    "serve": Command("serve translations over HTTP, with a web page",
                     ("serve", "decode", "runtime"), _serve_options, _serve,
                     "Serves MODEL_DIR on http://127.0.0.1:8000 (--host, --port): POST /translate, "
                     "POST /score, POST /attention, GET /info, GET /health, the OpenAPI schema at "
                     "/openapi.json and a web page at /. Another address than loopback needs an "
                     "API key (--api-key or $TRANSFORMER_API_KEY). Concurrent requests are "
                     "decoded together; --decode.* sets the default search. SIGTERM or Ctrl-C "
                     "finishes the requests in flight, then exits 0.", skip=TRAINING_ONLY),
    "export": Command("export a model for deployment (CTranslate2, optionally int8) or to the "
                      "Hugging Face format", (), _export_options, _export,
                      "Writes the checkpoint as a CTranslate2 model into OUT, with its "
                      "SentencePiece models: transformer export MODEL_DIR --to ctranslate2 OUT "
                      "[--quantization int8]; or as a Hugging Face Marian model (MarianMTModel, "
                      "MarianTokenizer): --to huggingface. OUT must be new, empty or an earlier "
                      "export."),
    "import": Command("import a Hugging Face Marian model (OPUS-MT) as a model directory",
                      ("decode",), _import_options, _import,
                      "Reads SOURCE, a Marian model's folder or a Hugging Face Hub name (e.g. "
                      "Helsinki-NLP/opus-mt-fr-en), and writes OUT, a model directory every "
                      "command takes; --decode.* options become its default search (e.g. "
                      "--target_language fra for a model with several target languages). OUT "
                      "must be new, empty or an earlier import."),
    "average": Command("average the last N checkpoints into one", (), _average_options, _average),
    "explain": Command("the notes' worked examples, or one sentence through a model, step by step",
                       ("decode", "runtime"), _explain_options, _explain,
                       "Without MODEL_DIR: the lecture notes' worked examples in the terminal "
                       "(--topic). With MODEL_DIR SENTENCE --html OUT: SENTENCE through the "
                       "model, step by step in the notes' terms, with the model's own numbers, "
                       "as one self-contained HTML file (an existing OUT only with --force)."),
    "attention": Command("heatmaps of every attention layer and head for one sentence",
                         ("decode", "runtime"), _attention_options, _attention,
                         "Translates SENTENCE and draws the encoder self-attention, decoder masked "
                         "self-attention and encoder-decoder attention of every layer and head "
                         "(rows: queries, columns: keys), head-averaged alignments and "
                         "positional-encoding plots.", skip=TRAINING_ONLY),
    "compare": Command("trained runs side by side: BLEU by sentence length, speed, size",
                       ("decode", "runtime"), _compare_options, _compare,
                       "Translates the test split shared by RUNS and writes into --out a report "
                       "(report.md, PNG and SVG plots, compare.json): BLEU by source-length "
                       "bucket, training tokens per second and seconds per epoch (from each run's "
                       "metrics.jsonl), the time of a forward pass against sentence length, and "
                       "parameters. --decode.* options apply to every run.", skip=TRAINING_ONLY),
}  # fmt: skip
