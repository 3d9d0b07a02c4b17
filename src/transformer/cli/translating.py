"""The commands that use a trained model: translate, evaluate, attention, serve, export, explain."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jsonargparse import ArgumentParser

from ..errors import UserError
from ..files import STDOUT, check_output
from ..serve.config import ServeConfig
from .options import engine_options, model_options, runtime_of


def _translate_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)
    p.add_argument("--input", "-i", help="file to translate (default or -: standard input)")
    p.add_argument("--output", "-o", help="write translations to this file (default or -: "
                   "standard output); not a device, nor a file in a model's folder")  # fmt: skip


def _translate(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_engine
    from .jobs import standard_streams, translate_file

    source = None if ns.input in (None, STDOUT) else ns.input
    output = check_output(ns.output, "--output", {"--input": source, "MODEL_DIR": ns.model_dir})
    stdin, stdout = standard_streams(source, output)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, runtime_of(given),
                         **given.get("decode", {}))  # fmt: skip

    def warn(message: str) -> None:
        print(f"transformer translate: warning: {message}", file=sys.stderr)

    translate_file(engine, source, output, stdin, stdout, warn)


def _evaluate_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)
    p.add_argument("--src", help="source sentences, one per line (default: the run's test split)")
    p.add_argument("--ref", help="reference translations, line-aligned with --src")
    p.add_argument("--output", "-o", help="where to write the hypotheses (default: SRC.hyp "
                   "beside --src; for the run's test split MODEL.test.hyp here)")  # fmt: skip
    p.add_argument("--lowercase", action="store_true", help="also report lowercased BLEU")


def _evaluate(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_engine
    from .jobs import evaluate, hypotheses_path

    output = hypotheses_path(ns.output, ns.src, ns.ref, ns.model_dir)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, runtime_of(given),
                         **given.get("decode", {}))  # fmt: skip
    found = evaluate(engine, ns.src, ns.ref, output, ns.lowercase)
    if found.truncated:
        print(f"warning: {found.truncated} source lines were truncated", file=sys.stderr)
    print("\n".join(found.lines()))


def _export_options(p: ArgumentParser) -> None:
    from ..export.folder import QUANTIZATIONS

    model_options(p)
    p.add_argument("--to", required=True, choices=["ctranslate2"], help="the format")
    p.add_argument("out", help="the export's folder: new, empty, or an earlier export")
    p.add_argument("--quantization", default="float32", choices=list(QUANTIZATIONS),
                   help="the weights' type (int8: 4x smaller, faster on a CPU)")  # fmt: skip


def _export(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..export.folder import export_model

    info = export_model(ns.model_dir, ns.out, ns.quantization, ns.checkpoint)
    print(f"exported {info.source} to {ns.out} (CTranslate2, {info.quantization}); translate with "
          f"--engine ctranslate2")  # fmt: skip


def _explain_options(p: ArgumentParser) -> None:
    from ..inspect.explain import TOPICS

    p.add_argument("--topic", choices=TOPICS, help="one part only (default: all)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colours on a terminal")


def _explain(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inspect.explain import explain

    print(explain(ns.topic, color=sys.stdout.isatty() and not ns.no_color))


def _attention_options(p: ArgumentParser) -> None:
    model_options(p)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="output folder (not inside a model's)")
    p.add_argument("--layer", type=int, help="only this layer (counted from 0)")
    p.add_argument("--head", type=int, help="only this head (counted from 0)")
    p.add_argument("--html", action="store_true", help="also write a single-file HTML report")


def _attention(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_torch_engine
    from ..inspect.attention import attention_job

    check_output(ns.out, "--out", {"MODEL_DIR": ns.model_dir}, folder=True)
    engine = load_torch_engine(ns.model_dir, ns.checkpoint, runtime_of(given),
                               **given.get("decode", {}))  # fmt: skip
    lines = attention_job(engine, ns.sentence, Path(ns.out), ns.layer, ns.head, ns.html)
    print("\n".join(lines))


def _serve_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)


def _serve(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    try:
        from ..serve.server import serve
    except ModuleNotFoundError as error:  # the optional extra is not installed
        raise UserError(f"transformer serve needs {error.name}: pip install "
                        "'transformer[serve]' (fastapi, uvicorn)") from None  # fmt: skip

    config = ServeConfig(**given.get("serve", {}))
    decode = given.get("decode", {})
    serve(ns.model_dir, ns.checkpoint, config, runtime_of(given), decode, ns.engine)
