"""The command line: each subcommand parses its arguments and makes one call into the library.

Options are derived from the typed config by jsonargparse, which reads the dataclasses, their
types and the docstring under each field: every key is in ``--help`` with its type, default and
help, and the names are those of the YAML files (``--train.max_steps 20`` on the command line is
``train: {max_steps: 20}`` in a file). A key that is unique across sections may drop its section
(``--max_steps``), ``-`` may stand for ``_`` (``--max-steps``), and a true/false option given
alone means true. Older spellings (``--beam``, ``--pre-norm``, ...) are translated; a spelling
that now means something else is an error that names the new one.

Only ``UserError`` (and the OSError of a full disk or a missing permission) ends in a one-line
message and exit code 2 (130 / 143 for Ctrl-C / SIGTERM); anything else is a bug and shows its
traceback. ``TRANSFORMER_DEBUG=1`` shows the traceback of a UserError too.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from jsonargparse import ArgumentParser, set_parsing_settings

from .config import COMMAND_SECTIONS, SECTIONS, RunConfig, RuntimeConfig, ServeConfig
from .config_files import build_config, builtin_configs, load_config
from .errors import Terminated, UserError
from .files import describe_os_error
from .options import parse

set_parsing_settings(docstring_parse_attribute_docstrings=True)


@dataclass
class Command:
    """One subcommand: its help line, the config sections it takes, its own options, its run."""

    help: str
    sections: tuple[str, ...]
    options: Callable[[ArgumentParser], None]
    run: Callable[[argparse.Namespace, dict[str, dict]], None]
    description: str = ""


# ---------------------------------------------------------------------------------- commands
def _info_options(p: ArgumentParser) -> None:
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")


def _info(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .inspect.info import describe

    print(describe(load_config(None, given).model))


def _train_options(p: ArgumentParser) -> None:
    p.add_argument("--config", help=f"a YAML file, or a built-in config: {builtin_configs()}")
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")
    p.add_argument("--out", help="model directory (default: runs/CORPUS-SRC-TGT)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _train(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .training.loop import train

    config, out = run_config(ns, given)
    result = train(config, out, resume=ns.resume, overwrite=ns.overwrite, progress=not ns.quiet)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for the job
        print(f"trained {result.step} steps in {result.seconds:.0f} s; model directory: {out}")


def run_config(ns: argparse.Namespace, given: dict[str, dict]) -> tuple[RunConfig, Path]:
    """The run's config (--config, or the saved one on --resume, with the options on top) and
    its model directory."""
    from .training.rundir import RunDir

    data = given.get("data", {})
    if "src" in data and "corpus" not in data:
        data["corpus"] = None  # files given: no named corpus
    if ns.resume and ns.config is None:
        if ns.out is None:
            raise UserError("--resume needs --out DIR (the run to continue)")
        base = RunDir(ns.out).saved_config().to_dict()
        config = build_config(_merged(base, given), f"{ns.out} with the options")
    else:
        config = load_config(ns.config, given)
    if ns.out is not None:
        return config, Path(ns.out)
    d = config.data
    return config, Path("runs") / f"{d.corpus or 'custom'}-{d.src_lang}-{d.tgt_lang}"


def _runtime(given: dict[str, dict]) -> RuntimeConfig:
    """The runtime options given on the command line (not those a checkpoint was trained with)."""
    return RuntimeConfig(**given.get("runtime", {}))


def _merged(values: dict, given: dict) -> dict:
    return {s: {**values.get(s, {}), **given.get(s, {})} for s in {*values, *given}}


def _demo_options(p: ArgumentParser) -> None:
    p.add_argument("--out", default="runs/numbers-en-fr", help="model directory (a demo run there "
                   "is replaced; any other run is refused)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _demo(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .demo import run_demo

    run_demo(Path(ns.out), progress=not ns.quiet, overrides={"runtime": given.get("runtime", {})})


def _model_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", help="model directory (or one of its checkpoint folders)")
    p.add_argument("--checkpoint", default="best", choices=["best", "last"],
                   help="which checkpoint of a model directory")  # fmt: skip


def _engine_options(p: ArgumentParser) -> None:
    p.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"],
                   help="torch: our decoder; ctranslate2: CTranslate2 on an exported model (a "
                   "model directory is converted on the fly); pip install '.[ct2]'")  # fmt: skip


def _translate_options(p: ArgumentParser) -> None:
    _model_options(p)
    _engine_options(p)
    p.add_argument("--input", "-i", help="file to translate (default: standard input)")
    p.add_argument("--output", "-o", help="write translations here (default: standard output)")


def _translate(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .jobs import check_outputs, load_engine, translate_file

    check_outputs(ns.output, input=ns.input)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, _runtime(given),
                         **given.get("decode", {}))  # fmt: skip

    def warn(message: str) -> None:
        print(f"transformer translate: warning: {message}", file=sys.stderr)

    translate_file(engine, ns.input, ns.output, sys.stdin.buffer, sys.stdout, warn)


def _evaluate_options(p: ArgumentParser) -> None:
    _model_options(p)
    _engine_options(p)
    p.add_argument("--src", help="source sentences, one per line (default: the run's test split)")
    p.add_argument("--ref", help="reference translations, line-aligned with --src")
    p.add_argument("--output", "-o", help="where to write the hypotheses (default: MODEL_DIR)")
    p.add_argument("--lowercase", action="store_true", help="also report lowercased BLEU")


def _evaluate(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .jobs import check_outputs, evaluate, load_engine

    check_outputs(ns.output, src=ns.src, ref=ns.ref)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, _runtime(given),
                         **given.get("decode", {}))  # fmt: skip
    found = evaluate(engine, ns.src, ns.ref, ns.output, ns.lowercase, Path(ns.model_dir))
    if found.truncated:
        print(f"warning: {found.truncated} source lines were truncated", file=sys.stderr)
    print("\n".join(found.lines()))


def _average_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", help="model directory")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints")


def _average(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .training.average import average_last

    folder = average_last(Path(ns.model_dir), ns.last)
    print(f"averaged the last {ns.last} checkpoints into {folder}")


def _export_options(p: ArgumentParser) -> None:
    from .export.folder import QUANTIZATIONS

    _model_options(p)
    p.add_argument("--to", required=True, choices=["ctranslate2"], help="the format")
    p.add_argument("out", help="the export's folder: new, empty, or an earlier export")
    p.add_argument("--quantization", default="float32", choices=list(QUANTIZATIONS),
                   help="the weights' type (int8: 4x smaller, faster on a CPU)")  # fmt: skip


def _export(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .export.folder import export_model

    info = export_model(ns.model_dir, ns.out, ns.quantization, ns.checkpoint)
    print(f"exported {info.source} to {ns.out} (CTranslate2, {info.quantization}); translate with "
          f"--engine ctranslate2")  # fmt: skip


def _explain_options(p: ArgumentParser) -> None:
    from .inspect.explain import TOPICS

    p.add_argument("--topic", choices=TOPICS, help="one part only (default: all)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colours on a terminal")


def _explain(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .inspect.explain import explain

    print(explain(ns.topic, color=sys.stdout.isatty() and not ns.no_color))


def _attention_options(p: ArgumentParser) -> None:
    _model_options(p)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="output folder")
    p.add_argument("--layer", type=int, help="only this layer (counted from 0)")
    p.add_argument("--head", type=int, help="only this head (counted from 0)")
    p.add_argument("--html", action="store_true", help="also write a single-file HTML report")


def _attention(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from .jobs import attention_job, load_translator

    translator = load_translator(ns.model_dir, ns.checkpoint, _runtime(given),
                                 **given.get("decode", {}))  # fmt: skip
    lines = attention_job(translator, ns.sentence, Path(ns.out), ns.layer, ns.head, ns.html)
    print("\n".join(lines))


def _serve_options(p: ArgumentParser) -> None:
    _model_options(p)
    _engine_options(p)


def _serve(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    try:
        from .serve import serve
    except ModuleNotFoundError as error:  # the optional extra is not installed
        raise UserError(f"transformer serve needs {error.name}: pip install "
                        "'transformer[serve]' (fastapi, uvicorn)") from None  # fmt: skip

    config = ServeConfig(**given.get("serve", {}))
    serve(ns.model_dir, ns.checkpoint, config, _runtime(given), given.get("decode", {}), ns.engine)


COMMANDS = {
    "info": Command("parameter counts per part of a model", ("model",), _info_options, _info),
    "train": Command("train a model on parallel text", tuple(SECTIONS), _train_options, _train,
                     "Trains from a YAML config (--config), files (--data.src, --data.tgt) or a "
                     "named corpus (--data.corpus). Precedence: defaults < preset < --config < "
                     "options; on --resume the saved config replaces --config."),
    "demo": Command("train the built-in number-words model and translate its test set",
                    ("runtime",),
                    _demo_options, _demo),
    "translate": Command("translate sentences (stdin, a file, or interactively)",
                         ("decode", "runtime"),
                         _translate_options, _translate,
                         "One sentence per line. Empty lines stay empty; a line longer than the "
                         "model accepts is truncated with a warning on stderr. Search options "
                         "default to the model's decode config."),
    "evaluate": Command("translate a test set and score it with sacreBLEU", ("decode", "runtime"),
                        _evaluate_options, _evaluate),
    "serve": Command("serve translations over HTTP, with a web page",
                     ("serve", "decode", "runtime"), _serve_options, _serve,
                     "Serves MODEL_DIR on http://127.0.0.1:8000 (--host, --port): POST /translate, "
                     "POST /attention, GET /info, GET /health, the OpenAPI schema at "
                     "/openapi.json and a web page at /. Another address than loopback needs an "
                     "API key (--api-key or $TRANSFORMER_API_KEY). Concurrent requests are "
                     "decoded together; --decode.* sets the default search. SIGTERM or Ctrl-C "
                     "finishes the requests in flight, then exits 0."),
    "export": Command("export a model for deployment (CTranslate2, optionally int8)", (),
                      _export_options, _export,
                      "Writes the checkpoint as a CTranslate2 model into OUT, with its "
                      "SentencePiece models: transformer export MODEL_DIR --to ctranslate2 OUT "
                      "[--quantization int8]. OUT must be new, empty or an earlier export."),
    "average": Command("average the last N checkpoints into one", (), _average_options, _average),
    "explain": Command("the lecture notes' worked examples, step by step", (), _explain_options,
                       _explain),
    "attention": Command("heatmaps of every attention layer and head for one sentence",
                         ("decode", "runtime"), _attention_options, _attention,
                         "Translates SENTENCE and draws the encoder self-attention, decoder masked "
                         "self-attention and encoder-decoder attention of every layer and head "
                         "(rows: queries, columns: keys), head-averaged alignments and "
                         "positional-encoding plots."),
}  # fmt: skip


# ------------------------------------------------------------------------------- parsing
def build_parser(name: str) -> ArgumentParser:
    """The parser of one command: its own options, then its config sections' keys."""
    command = COMMANDS[name]
    parser = ArgumentParser(prog=f"transformer {name}", description=command.description or
                            command.help, exit_on_error=False, allow_abbrev=False)  # fmt: skip
    command.options(parser)
    for section in command.sections:
        parser.add_class_arguments(
            COMMAND_SECTIONS[section], section, sub_configs=False, instantiate=False
        )
    return parser


def _usage() -> str:
    lines = ["usage: transformer COMMAND [options]   (transformer COMMAND --help for more)", ""]
    lines += [f"  {name:<10} {command.help}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; choose from {', '.join(COMMANDS)}"
        print(f"transformer: error: unknown command {name!r}{hint}", file=sys.stderr)
        return 2
    prefix = f"transformer {name}{_rank()}"
    with _warnings_to_stderr(prefix), _sigterm_raises():
        try:
            if "-h" in rest or "--help" in rest:
                build_parser(name).print_help()
                return 0
            ns, given = parse(build_parser(name), rest, COMMANDS[name].sections)
            COMMANDS[name].run(ns, given)
        except BrokenPipeError:  # the reader went away (`... | head -1`): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except (UserError, OSError) as error:
            if os.environ.get("TRANSFORMER_DEBUG"):
                raise
            message = error if isinstance(error, UserError) else describe_os_error(error)
            print(f"{prefix}: error: {message}", file=sys.stderr)
            return error.exit_code if isinstance(error, UserError) else 2
        except Terminated:
            print(f"{prefix}: terminated (SIGTERM)", file=sys.stderr)
            return 143
        except KeyboardInterrupt:
            print(f"{prefix}: interrupted", file=sys.stderr)
            return 130
    return 0


def _rank() -> str:
    """`` [rank r of W]`` under torchrun, so that every message says which process wrote it."""
    size = os.environ.get("WORLD_SIZE", "1")
    return f" [rank {os.environ.get('RANK', '?')} of {size}]" if size != "1" else ""


def config_from_args(argv: list[str]) -> RunConfig:
    """The RunConfig that ``transformer train ARGV`` would train (for Python callers, tests)."""
    ns, given = parse(build_parser("train"), argv, COMMANDS["train"].sections)
    return run_config(ns, given)[0]


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
