"""The command line: each subcommand parses its arguments and makes one call into the library.

Errors a user can cause (a bad file, a bad value) end with one line on stderr and exit code 2;
set TRANSFORMER_DEBUG=1 to see the traceback instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from .config import MODEL_PRESETS, ModelConfig, RunConfig, load_config, parse_overrides
from .errors import Terminated, UserError
from .files import describe_os_error

Subparsers = argparse._SubParsersAction


# ---------------------------------------------------------------------------------------- info
def _cmd_info(args: argparse.Namespace) -> None:
    from .info import format_table, parameter_table
    from .model import Transformer

    overrides: dict[str, object] = {"norm_first": args.pre_norm}
    if args.src_vocab is not None:
        overrides["src_vocab_size"] = args.src_vocab
    if args.tgt_vocab is not None:
        overrides["tgt_vocab_size"] = args.tgt_vocab
    if args.share_embeddings:
        overrides["share_embeddings"] = True
    config = ModelConfig.preset(args.preset, **overrides)
    print(format_table(parameter_table(Transformer(config)), config))


def _add_info(sub: Subparsers) -> None:
    p = sub.add_parser("info", help="parameter counts per part of a model preset")
    p.add_argument("--preset", default="base", choices=sorted(MODEL_PRESETS))
    p.add_argument("--src-vocab", type=int, help="source vocabulary size")
    p.add_argument("--tgt-vocab", type=int, help="target vocabulary size")
    p.add_argument(
        "--share-embeddings",
        action="store_true",
        help="one embedding table for source and target (needs equal vocabularies)",
    )
    p.add_argument(
        "--pre-norm", action="store_true", help="pre-norm instead of the paper's post-norm"
    )
    p.set_defaults(func=_cmd_info)


# --------------------------------------------------------------------------------------- train
def builtin_config(name: str) -> Path | None:
    """The path of a config shipped with the package (``configs/NAME.yaml``), if there is one."""
    path = Path(__file__).parent / "configs" / f"{name}.yaml"
    return path if path.exists() else None


def run_config_from_args(args: argparse.Namespace, extra: list[str]) -> tuple[RunConfig, Path]:
    """The RunConfig and output folder from --config, --src/--tgt, --out and --key value pairs."""
    overrides = parse_overrides(extra)
    for flag in ("src", "tgt"):
        if getattr(args, flag) is not None:
            overrides[f"data.{flag}"] = getattr(args, flag)
    if "data.src" in overrides and not any(k in overrides for k in ("corpus", "data.corpus")):
        overrides["data.corpus"] = "null"  # files given: no named corpus
    path, base = args.config, None
    if path is not None and not Path(path).exists() and builtin_config(path) is not None:
        path = str(builtin_config(path))
    if path is not None and not Path(path).exists():
        configs = (Path(__file__).parent / "configs").glob("*.yaml")
        names = ", ".join(sorted(p.stem for p in configs))
        raise UserError(f"config file not found: {path} (built-in configs: {names})")
    if args.resume and path is None:
        from .prepare import saved_config
        from .rundir import RunDir

        if args.out is None:
            raise UserError("--resume needs --out DIR (the run to continue)")
        base = saved_config(RunDir(args.out)).to_dict()
    config = load_config(path, overrides, base)
    if args.out is not None:
        return config, Path(args.out)
    d = config.data
    return config, Path("runs") / f"{d.corpus or 'custom'}-{d.src_lang}-{d.tgt_lang}"


def _cmd_train(args: argparse.Namespace, extra: list[str]) -> None:
    from .train import train

    config, out = run_config_from_args(args, extra)
    result = train(
        config, out, resume=args.resume, overwrite=args.overwrite, progress=not args.quiet
    )
    print(
        f"trained {result.step} steps in {result.seconds:.0f} s; model directory: {result.out_dir}"
    )


TRAIN_EPILOG = """\
any config key can be set with --key value (or --section.key value), e.g.
  --preset tiny  --d_model 128  --train.max_steps 2000  --label_smoothing 0  --bf16 true
examples:
  transformer train --config numbers                        # the built-in default task
  transformer train --config multi30k-de-en --data_dir ../shared/data
  transformer train --src train.de --tgt train.en --src_lang de --tgt_lang en --out runs/de-en
  transformer train --src fra-eng.zip --src_lang en --tgt_lang fr      # Tatoeba/Anki TSV pairs
  transformer train --out runs/de-en --resume --max_steps 20000        # continue a run
"""


def _add_train(sub: Subparsers) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on parallel text",
        epilog=TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # so that --key value overrides are never taken for abbreviations
    )
    p.add_argument("--config", help="YAML file, or a built-in name: numbers, multi30k-de-en")
    p.add_argument("--src", help="training source file (.gz ok), or a TSV/zip of pairs")
    p.add_argument("--tgt", help="training target file, line-aligned with --src")
    p.add_argument("--out", help="model directory (default: runs/CORPUS-SRC-TGT)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_train, takes_overrides=True)


# ---------------------------------------------------------------------------------------- demo
def _cmd_demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    run_demo(Path(args.out), progress=not args.quiet)


def _add_demo(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo", help="train the built-in number-words model and translate its test set"
    )
    p.add_argument("--out", default="runs/numbers-en-fr", help="model directory (replaced)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_demo)


# ------------------------------------------------------------------ translate, evaluate, average
def _load(model_dir: str, which: str):
    """(model, tokenizers, config) from a model directory or one of its checkpoint folders."""
    from .checkpoint import load_checkpoint, model_dir_of
    from .tokenizer import Tokenizers

    loaded = load_checkpoint(Path(model_dir), which)
    return loaded.model, Tokenizers.load(model_dir_of(loaded.path)), loaded.config


# DecodeConfig fields that translate / evaluate take from the command line.
SEARCH_OPTIONS = ("beam_size", "nbest", "length_penalty", "max_len_a", "max_len_b", "batch_size",
                  "max_source_tokens", "temperature", "top_k")  # fmt: skip


def _decode_config(args: argparse.Namespace, config: RunConfig):
    """The run's DecodeConfig with the command-line search options applied."""
    from dataclasses import replace

    changes = {
        name: getattr(args, name)
        for name in SEARCH_OPTIONS
        if getattr(args, name, None) is not None
    }
    if getattr(args, "sampling", False):
        changes["sampling"] = True
    if changes.get("nbest", 1) > config.decode.beam_size and "beam_size" not in changes:
        changes["beam_size"] = changes["nbest"]
    return replace(config.decode, **changes)


def _add_decode_options(p: argparse.ArgumentParser, nbest: bool) -> None:
    g = p.add_argument_group("search (defaults: the model's decode config)")
    g.add_argument("--beam", dest="beam_size", type=int, help="beam size; 1 = greedy search")
    if nbest:
        g.add_argument("--nbest", type=int, help="print the N best translations with scores")
    g.add_argument("--length-penalty", type=float, help="GNMT length penalty alpha (0 = none)")
    g.add_argument("--max-len-a", type=float, help="output length limit a*source_length + b")
    g.add_argument("--max-len-b", type=int, help="output length limit a*source_length + b")
    g.add_argument("--batch-size", type=int, help="sentences per batch")
    g.add_argument(
        "--max-tokens", dest="max_source_tokens", type=int, help="source tokens per batch"
    )
    g.add_argument("--sampling", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, help="sampling temperature")
    g.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    p.add_argument(
        "--checkpoint", default="best", choices=["best", "last"], help="which checkpoint to load"
    )


def _cmd_translate(args: argparse.Namespace) -> None:
    from .data import read_lines
    from .files import atomic_write, check_not_an_input
    from .translator import translate_lines

    if args.output is not None:
        check_not_an_input(args.output, {"--input": args.input}, "--output")
    model, tokenizers, config = _load(args.model_dir, args.checkpoint)
    decode = _decode_config(args, config)
    interactive = args.input is None and sys.stdin.isatty()

    def warn(message: str) -> None:
        print(f"transformer translate: warning: {message}", file=sys.stderr)

    if args.input is not None:
        lines = read_lines(args.input)
    elif interactive:
        print("Type a sentence and press Enter (Ctrl-D to quit).", file=sys.stderr)
        lines = _prompted_lines()
    else:
        lines = _stdin_lines()
    chunk = 1 if interactive else 2000
    if args.output is None:
        translate_lines(model, tokenizers, lines, decode, _printer(sys.stdout, interactive), warn,
                        chunk)  # fmt: skip
        return
    with atomic_write(args.output) as out:  # the file appears, complete, only at the end
        translate_lines(model, tokenizers, lines, decode, _printer(out, False), warn, chunk)


def _printer(stream, flush: bool):
    def write(line: str) -> None:
        print(line, file=stream, flush=flush)

    return write


def _prompted_lines():
    while True:
        try:
            yield input("> ")
        except EOFError:
            return


def _stdin_lines():
    """Lines of standard input, decoded strictly as UTF-8 (errors name the line)."""
    for number, raw in enumerate(sys.stdin.buffer, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise UserError(
                f"<stdin>: line {number} is not valid UTF-8 (byte {raw[error.start]:#04x} at "
                f"position {error.start + 1} of the line)"
            ) from None


def _add_translate(sub: Subparsers) -> None:
    p = sub.add_parser(
        "translate",
        help="translate sentences (stdin, a file, or interactively)",
        description="Translates one sentence per line. Empty lines stay empty; a line longer "
        "than the model accepts is truncated with a warning on stderr.",
    )
    p.add_argument("model_dir", help="model directory (or one of its checkpoint folders)")
    p.add_argument("--input", "-i", help="file to translate (default: standard input)")
    p.add_argument("--output", "-o", help="write translations here (default: standard output)")
    _add_decode_options(p, nbest=True)
    p.set_defaults(func=_cmd_translate)


def _cmd_evaluate(args: argparse.Namespace) -> None:
    from .data import load_splits, read_parallel
    from .evaluate import exact_match, score_translations
    from .files import atomic_write, check_not_an_input
    from .translator import translate

    if (args.src is None) != (args.ref is None):
        raise UserError("give both --src and --ref, or neither (to use the run's test split)")
    if args.output is not None:
        check_not_an_input(args.output, {"--src": args.src, "--ref": args.ref}, "--output")
    model, tokenizers, config = _load(args.model_dir, args.checkpoint)
    decode = _decode_config(args, config)
    groups, note = None, ""
    if args.src is not None:
        pairs, name = read_parallel(args.src, args.ref), Path(args.src).name
        if not pairs:
            raise UserError(f"nothing to evaluate: {args.src} and {args.ref} are empty")
    else:
        splits, name = load_splits(config.data), "test"
        pairs, groups, note = splits.test, splits.test_groups, splits.test_note
        if not pairs:
            raise UserError("the run's corpus has no test split; pass --src and --ref")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    result = translate(model, tokenizers, sources, decode)
    output = Path(args.output) if args.output else Path(args.model_dir) / f"{name}.hyp"
    with atomic_write(output) as f:
        f.write("".join(h + "\n" for h in result.best))
    if result.truncated:
        print(f"warning: {len(result.truncated)} source lines were truncated", file=sys.stderr)
    for score in score_translations(result.best, references, lowercase=args.lowercase):
        print(score)
    if groups is not None:
        print(f"by class ({note}):" if note else "by class:")
        for row in exact_match(result.best, references, groups):
            print(f"  {row}")
    print(f"hypotheses: {output}")


def _add_evaluate(sub: Subparsers) -> None:
    p = sub.add_parser("evaluate", help="translate a test set and score it with sacreBLEU")
    p.add_argument("model_dir", help="model directory (or one of its checkpoint folders)")
    p.add_argument("--src", help="source sentences, one per line (default: the run's test split)")
    p.add_argument("--ref", help="reference translations, line-aligned with --src")
    p.add_argument("--output", "-o", help="where to write the hypotheses (default: MODEL_DIR)")
    p.add_argument("--lowercase", action="store_true", help="also report lowercased BLEU")
    _add_decode_options(p, nbest=False)
    p.set_defaults(func=_cmd_evaluate)


def _cmd_average(args: argparse.Namespace) -> None:
    from .average import average_last

    folder = average_last(Path(args.model_dir), args.last)
    print(f"averaged the last {args.last} checkpoints into {folder}")


def _add_average(sub: Subparsers) -> None:
    p = sub.add_parser("average", help="average the last N checkpoints into one")
    p.add_argument("model_dir", help="model directory")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints (default 5)")
    p.set_defaults(func=_cmd_average)


# ------------------------------------------------------------------------- explain, attention
def _cmd_explain(args: argparse.Namespace) -> None:
    from .explain import explain

    print(explain(args.topic, color=sys.stdout.isatty() and not args.no_color))


def _add_explain(sub: Subparsers) -> None:
    from .explain import TOPICS

    p = sub.add_parser(
        "explain",
        help="the lecture notes' worked examples, step by step, computed by the real modules",
    )
    p.add_argument("--topic", choices=TOPICS, help="one part only (default: all)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colours on a terminal")
    p.set_defaults(func=_cmd_explain)


def _cmd_attention(args: argparse.Namespace) -> None:
    from .report import write_html_report
    from .translator import inspect_sentence
    from .visualize import save_positional_plots, write_attention_figures

    model, tokenizers, config = _load(args.model_dir, args.checkpoint)
    seen = inspect_sentence(model, tokenizers, args.sentence, _decode_config(args, config))
    out = Path(args.out)
    files = write_attention_figures(
        seen.maps, seen.src_labels, seen.tgt_labels, out, args.layer, args.head
    )
    positions = min(model.config.max_positions, 100)
    files += save_positional_plots(model.config.d_model, positions, out)
    print(f"source:      {seen.source}\ntranslation: {seen.translation}")
    print(f"wrote {len(files)} figures (PNG and SVG) to {out}")
    if args.html:
        numbers = {"model": str(args.model_dir), "checkpoint": args.checkpoint}
        report = write_html_report(
            out / "report.html", seen.source, seen.translation, seen.maps,
            seen.src_labels, seen.tgt_labels, numbers,
        )  # fmt: skip
        print(f"HTML report: {report}")


def _add_attention(sub: Subparsers) -> None:
    p = sub.add_parser(
        "attention",
        help="heatmaps of every attention layer and head for one sentence (+ HTML report)",
        description="Translates SENTENCE and draws the encoder self-attention, decoder masked "
        "self-attention and encoder-decoder attention of every layer and head (rows: queries, "
        "columns: keys; decoder rows are the decoder inputs <s> y1 y2 ..., each predicting the "
        "next token), head-averaged alignments, and positional-encoding plots.",
    )
    p.add_argument("model_dir", help="model directory (or one of its checkpoint folders)")
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="output folder (default: ./attention)")
    p.add_argument("--layer", type=int, help="only this layer (counted from 0)")
    p.add_argument("--head", type=int, help="only this head (counted from 0)")
    p.add_argument("--html", action="store_true", help="also write a single-file HTML report")
    _add_decode_options(p, nbest=False)
    p.set_defaults(func=_cmd_attention)


COMMANDS: list[Callable[[Subparsers], None]] = [
    _add_info,
    _add_train,
    _add_demo,
    _add_translate,
    _add_evaluate,
    _add_average,
    _add_explain,
    _add_attention,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer",
        description="The Transformer of 'Attention Is All You Need': train, translate, explain.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    prefix = f"transformer {args.command}"
    with _warnings_to_stderr(prefix), _sigterm_raises():
        try:
            if getattr(args, "takes_overrides", False):
                args.func(args, extra)
            else:
                args.func(args)
        except BrokenPipeError:  # the reader went away (`... | head -1`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except (UserError, OSError) as error:
            if os.environ.get("TRANSFORMER_DEBUG"):
                raise
            message = error if isinstance(error, UserError) else describe_os_error(error, "")
            print(f"{prefix}: error: {message}", file=sys.stderr)
            return error.exit_code if isinstance(error, UserError) else 2
        except Terminated:
            print(f"{prefix}: terminated (SIGTERM)", file=sys.stderr)
            return 143
        except KeyboardInterrupt:
            print(f"{prefix}: interrupted", file=sys.stderr)
            return 130
    return 0


@contextmanager
def _warnings_to_stderr(prefix: str):
    """The library's warnings (logging) as ``transformer CMD: warning: ...`` lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prefix}: warning: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("transformer")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


@contextmanager
def _sigterm_raises():
    """SIGTERM raises ``Terminated`` (like Ctrl-C's KeyboardInterrupt), so that temporary files
    are cleaned up and the exit code is 143 with a message, instead of a silent kill."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
