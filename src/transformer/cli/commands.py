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
from .hub import import_command, import_options
from .training import (
    average_command,
    average_options,
    demo_command,
    demo_options,
    info_command,
    info_options,
    train_command,
    train_options,
)
from .translating import (
    attention_command,
    attention_options,
    compare_command,
    compare_options,
    evaluate_command,
    evaluate_options,
    explain_command,
    explain_options,
    export_command,
    export_options,
    score_command,
    score_options,
    serve_command,
    serve_options,
    translate_command,
    translate_options,
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


# A command neither offers nor accepts a config key it has no use for: an option taken and then
# ignored would answer as if it had been honoured (tests/test_cli.py holds the table).


def _keys(section: str, *names: str) -> frozenset[str]:
    return frozenset(f"{section}.{name}" for name in names)


TRAINING = _keys("runtime", "timeout_minutes", "loss_chunk")  # what only training uses
# training, and the decoding of many batches (inference/compiled.py)
COMPILED = _keys("runtime", "compile")
MANY_BATCHES = _keys("runtime", "inter_threads")  # batches decoded at once (inference/parallel.py)
# one sentence's search: no batches
ONE_SENTENCE = MANY_BATCHES | _keys("decode", "batch_size", "max_source_tokens")
ALIGNMENTS = _keys("decode", "alignment", "alignment_method")
# a translation's text only: one a sentence, no alignments
TEXT_ONLY = _keys("decode", "nbest") | ALIGNMENTS
SAMPLES = _keys("decode", "temperature", "top_k", "top_p", "sampling_seed")  # sampling's options
# what a search is: a score (teacher-forced) searches for nothing
LIMITS = _keys("decode", "max_len_a", "max_len_b", "min_len")
RULES = _keys("decode", "beam_size", "sampling", "no_repeat_ngram", "repetition_penalty")
SEARCH = TEXT_ONLY | SAMPLES | LIMITS | RULES


COMMANDS = {
    "info": Command("parameter counts per part of a model", ("model",), info_options, info_command),
    "train": Command("train a model on parallel text", tuple(SECTIONS), train_options,
                     train_command,
                     "Trains from a YAML config (--config), files (--data.src, --data.tgt) or a "
                     "named corpus (--data.corpus). Precedence: defaults < preset < --config < "
                     "options; on --resume the saved config replaces --config."),
    "demo": Command("train a built-in model (number words, or French to English) and score it",
                    ("runtime",),
                    demo_options, demo_command,
                    skip=_keys("runtime", "timeout_minutes") | MANY_BATCHES),
    "translate": Command("translate sentences (stdin, a file, or interactively)",
                         ("decode", "runtime"),
                         translate_options, translate_command,
                         "One sentence per line. Empty lines stay empty; a line longer than the "
                         "model accepts is truncated with a warning on stderr. Search options "
                         "default to the model's decode config.", skip=TRAINING),
    "evaluate": Command("translate a test set and score it with sacreBLEU", ("decode", "runtime"),
                        evaluate_options, evaluate_command, skip=TRAINING | TEXT_ONLY),
    "score": Command("the model's log-probability of given translations", ("decode", "runtime"),
                     score_options, score_command,
                     "Scores each line of --ref as a translation of the same line of --src, "
                     "teacher-forced: one line per pair, tab-separated: the total log-probability "
                     "(pieces and </s>), per token, and divided by the GNMT length penalty "
                     "(--decode.length_penalty), the score beam search ranks by.",
                     skip=TRAINING | COMPILED | MANY_BATCHES | SEARCH),
    "serve": Command("serve translations over HTTP, with a web page",
                     ("serve", "decode", "runtime"), serve_options, serve_command,
                     "Serves MODEL_DIR on http://127.0.0.1:8000 (--host, --port): POST /translate, "
                     "POST /score, POST /attention, GET /info, GET /health, the OpenAPI schema at "
                     "/openapi.json and a web page at /. Another address than loopback needs an "
                     "API key (--api-key or $TRANSFORMER_API_KEY). Concurrent requests are "
                     "decoded together; --decode.* sets the default search. SIGTERM or Ctrl-C "
                     "finishes the requests in flight, then exits 0.", skip=TRAINING),
    "export": Command("export a model for deployment (CTranslate2, optionally int8) or to the "
                      "Hugging Face format", (), export_options, export_command,
                      "Writes the checkpoint as a CTranslate2 model into OUT, with its "
                      "SentencePiece models: transformer export MODEL_DIR --to ctranslate2 OUT "
                      "[--quantization int8]; or as a Hugging Face Marian model (MarianMTModel, "
                      "MarianTokenizer): --to huggingface. OUT must be new, empty or an earlier "
                      "export."),
    "import": Command("import a Hugging Face Marian model (OPUS-MT) as a model directory",
                      ("decode",), import_options, import_command,
                      "Reads SOURCE, a Marian model's folder or a Hugging Face Hub name (e.g. "
                      "Helsinki-NLP/opus-mt-fr-en), and writes OUT, a model directory every "
                      "command takes; --decode.* options become its default search (e.g. "
                      "--target_language fra for a model with several target languages). OUT "
                      "must be new, empty or an earlier import."),
    "average": Command("average the last N checkpoints into one", (), average_options,
                       average_command),
    "explain": Command("the notes' worked examples, or one sentence through a model, step by step",
                       ("decode", "runtime"), explain_options, explain_command,
                       "Without MODEL_DIR: the lecture notes' worked examples in the terminal "
                       "(--topic). With MODEL_DIR SENTENCE --html OUT: SENTENCE through the "
                       "model, step by step in the notes' terms, with the model's own numbers, "
                       "as one self-contained HTML file (an existing OUT only with --force).",
                       # sampling stays, refused in one line: the view shows a beam search
                       skip=TRAINING | COMPILED | ONE_SENTENCE | SAMPLES | ALIGNMENTS),
    "attention": Command("heatmaps of every attention layer and head for one sentence",
                         ("decode", "runtime"), attention_options, attention_command,
                         "Translates SENTENCE and draws the encoder self-attention, decoder masked "
                         "self-attention and encoder-decoder attention of every layer and head "
                         "(rows: queries, columns: keys), head-averaged alignments and "
                         "positional-encoding plots.",
                         skip=TRAINING | COMPILED | ONE_SENTENCE | TEXT_ONLY),
    "compare": Command("trained runs side by side: BLEU by sentence length, speed, size",
                       ("decode", "runtime"), compare_options, compare_command,
                       "Translates the test split shared by RUNS and writes into --out a report "
                       "(report.md, PNG and SVG plots, compare.json): BLEU by source-length "
                       "bucket, training tokens per second and seconds per epoch (from each run's "
                       "metrics.jsonl), the time of a forward pass against sentence length, and "
                       "parameters. --decode.* options apply to every run.",
                       skip=TRAINING | COMPILED | TEXT_ONLY),
}  # fmt: skip
