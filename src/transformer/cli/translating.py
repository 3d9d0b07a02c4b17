"""The commands that use a trained model: translate, evaluate, score, attention, compare, serve,
export,
explain."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jsonargparse import ArgumentParser

from ..errors import UserError
from ..files import STDOUT, check_output, check_replaceable
from ..serve.config import ServeConfig
from .options import checkpoint_option, engine_options, model_options, runtime_of

if TYPE_CHECKING:
    from ..inference.glossary import Glossary


def translate_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)
    p.add_argument("--input", "-i", help="file to translate, or - (default: standard input)")
    p.add_argument("--output", "-o", help="write translations to this file, or - (default: "
                   "standard output); not a device, nor a file in a model's folder")  # fmt: skip
    p.add_argument("--prefix", help="target prefixes, line-aligned with the input: each "
                   "translation starts with its line (an empty line: none)")  # fmt: skip
    p.add_argument("--document", action="store_true", help="the input is a document: "
                   "paragraphs (separated by blank lines) split into sentences and put back "
                   "as given (docs/translating.md)")  # fmt: skip
    p.add_argument("--output_format", default="text", choices=["text", "jsonl"],
                   help="jsonl: one JSON object per line (per paragraph with --document) with "
                   "the log-probability and each word's probability")  # fmt: skip
    p.add_argument("--flag_below", type=float, help="mark the words less likely than this "
                   "probability as [[word]] in the text")  # fmt: skip
    p.add_argument("--markup", default="text", choices=["text", "html", "xml"],
                   help="html or xml: each line (or the --document) is marked up; its tags are "
                   "put back around the words they belong to (docs/translating.md)")  # fmt: skip
    p.add_argument("--glossary", help="terms to enforce, source<TAB>target one a line: a "
                   "sentence containing a source term gets its target term (constrained beam "
                   "search; a beam of 1 too); torch engine only")  # fmt: skip


def translate_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.confidence import check_threshold
    from ..inference.engine import load_engine
    from ..inference.jobs import standard_streams, translate_file
    from ..inference.text_jobs import translate_texts_file

    source = None if ns.input in (None, STDOUT) else ns.input
    reads = {"--input": source, "--prefix": ns.prefix, "--glossary": ns.glossary,
             "MODEL_DIR": ns.model_dir}  # fmt: skip
    output = check_output(ns.output, "--output", reads)
    stdin, stdout = standard_streams(source, output)
    if ns.flag_below is not None:
        check_threshold(ns.flag_below)  # before the model is loaded
    glossary = _glossary(ns.glossary, ns.engine)
    texts = (ns.document or ns.output_format == "jsonl" or ns.flag_below is not None
             or ns.markup != "text")  # fmt: skip
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, runtime_of(given),
                         **given.get("decode", {}))  # fmt: skip
    if texts:
        translate_texts_file(engine, source, output, stdin, stdout, _warn("translate"),
                             ns.document, ns.output_format == "jsonl", ns.flag_below,
                             ns.prefix, ns.markup, glossary)  # fmt: skip
        return
    translate_file(engine, source, output, stdin, stdout, _warn("translate"), ns.prefix, glossary)


def _glossary(path: str | None, engine: str) -> Glossary | None:
    """The ``--glossary`` file, read and checked before the model is loaded."""
    from ..inference.glossary import NO_CONSTRAINED_SEARCH, Glossary

    if path is None:
        return None
    if engine == "ctranslate2":
        raise UserError(NO_CONSTRAINED_SEARCH)
    return Glossary.read(path)


def _warn(command: str) -> Callable[[str], None]:
    def warn(message: str) -> None:
        print(f"transformer {command}: warning: {message}", file=sys.stderr)

    return warn


def score_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)
    p.add_argument("--src", required=True, help="source sentences, one per line")
    p.add_argument("--ref", required=True, help="their translations, line-aligned with --src")
    p.add_argument("--output", "-o", help="write the scores to this file, or - (default: "
                   "standard output); not a device, nor a file in a model's folder")  # fmt: skip


def score_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_engine
    from ..inference.jobs import score_file, standard_streams

    reads = {"--src": ns.src, "--ref": ns.ref, "MODEL_DIR": ns.model_dir}
    output = check_output(ns.output, "--output", reads)
    _, stdout = standard_streams("-", output)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, runtime_of(given),
                         **given.get("decode", {}))  # fmt: skip
    score_file(engine, ns.src, ns.ref, output, stdout, _warn("score"))


def evaluate_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)
    p.add_argument("--src", help="source sentences, one per line (default: the run's test split)")
    p.add_argument("--ref", help="reference translations, line-aligned with --src")
    p.add_argument("--output", "-o", help="where to write the hypotheses (default: SRC.hyp "
                   "beside --src; for the run's test split MODEL.test.hyp here; a file there "
                   "that evaluate did not write is refused, not replaced)")  # fmt: skip
    p.add_argument("--lowercase", action="store_true", help="also report lowercased BLEU")


def evaluate_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_engine
    from ..inference.jobs import evaluate, hypotheses_path, remember_made

    output = hypotheses_path(ns.output, ns.src, ns.ref, ns.model_dir)
    engine = load_engine(ns.model_dir, ns.engine, ns.checkpoint, runtime_of(given),
                         **given.get("decode", {}))  # fmt: skip
    found = evaluate(engine, ns.src, ns.ref, output, ns.lowercase)
    remember_made(output, default=ns.output is None)  # replaced next time while unchanged
    if found.truncated:
        print(f"warning: {found.truncated} source lines were truncated", file=sys.stderr)
    print("\n".join(found.lines()))


def export_options(p: ArgumentParser) -> None:
    from ..export.folder import QUANTIZATIONS

    model_options(p)
    p.add_argument("--to", required=True, choices=["ctranslate2", "huggingface"],
                   help="the format: CTranslate2, or Hugging Face's Marian")  # fmt: skip
    p.add_argument("out", help="the export's folder: new, empty, or an earlier export")
    p.add_argument("--quantization", default="float32", choices=list(QUANTIZATIONS),
                   help="the weights' type (int8: 4x smaller, faster on a CPU); ctranslate2 "
                   "only")  # fmt: skip


def export_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..export.folder import export_model

    if ns.to == "huggingface":
        from ..hub.huggingface_export import export_huggingface

        if ns.quantization != "float32":
            raise UserError(f"--quantization {ns.quantization} is for --to ctranslate2; a "
                            "Hugging Face export is float32")  # fmt: skip
        source = export_huggingface(ns.model_dir, ns.out, ns.checkpoint)
        print(f"exported {source} to {ns.out} (Hugging Face Marian); load it with "
              f"MarianMTModel.from_pretrained and MarianTokenizer.from_pretrained")  # fmt: skip
        return
    info = export_model(ns.model_dir, ns.out, ns.quantization, ns.checkpoint)
    print(f"exported {info.source} to {ns.out} (CTranslate2, {info.quantization}); translate with "
          f"--engine ctranslate2")  # fmt: skip


def explain_options(p: ArgumentParser) -> None:
    from ..inspect.worked_examples import TOPICS

    p.add_argument("model_dir", nargs="?", help="a model directory: step SENTENCE through it "
                   "and write the view to --html (none: the notes' worked examples)")  # fmt: skip
    p.add_argument("sentence", nargs="?", help="the source sentence to step through")
    checkpoint_option(p)
    p.add_argument("--html", help="write the step-through view here: one HTML file, offline")
    p.add_argument("--force", action="store_true", help="replace the --html file if it exists "
                   "(never one inside a model's folder)")  # fmt: skip
    p.add_argument("--topic", choices=TOPICS, help="one part of the notes' examples (default: all)")
    p.add_argument("--no-color", action="store_true", help="no ANSI colours on a terminal")


def explain_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    if ns.model_dir is None:
        if ns.html or ns.force or given:
            raise UserError("--html, --force and the search options need MODEL_DIR and SENTENCE: "
                            "transformer explain MODEL_DIR SENTENCE --html OUT")  # fmt: skip
        from ..inspect.worked_examples import explain

        print(explain(ns.topic, color=sys.stdout.isatty() and not ns.no_color))
        return
    if ns.sentence is None or ns.html is None:
        raise UserError("give a sentence and where to write the view: "
                        f"transformer explain {ns.model_dir} SENTENCE --html OUT")  # fmt: skip
    if ns.topic:
        raise UserError("--topic picks one of the notes' examples; leave it out with MODEL_DIR")
    from ..inference.engine import load_torch_engine
    from ..inspect.step_page import check_destination, step_through_job

    check_destination(Path(ns.html), ns.force, ns.model_dir)  # before the model is loaded
    engine = load_torch_engine(ns.model_dir, ns.checkpoint, runtime_of(given),
                               **given.get("decode", {}))  # fmt: skip
    written = step_through_job(engine, ns.sentence, ns.html, ns.force)
    size = f"{written.bytes / 1e6:.2f} MB" if written.bytes >= 100_000 else f"{written.bytes} B"
    print(f"source:      {ns.sentence}")
    print(f"translation: {written.translation}")
    print(f"wrote {written.path} ({size}) in {written.seconds:.2f} s; open it in a browser")
    for cut in written.truncated:
        print(f"  (cut to fit: {cut})")


def attention_options(p: ArgumentParser) -> None:
    model_options(p)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("--out", default="attention", help="the figures' folder: new, empty, or an "
                   "earlier one of attention's or compare's (replaced whole)")  # fmt: skip
    p.add_argument("--layer", type=int, help="only this layer (counted from 1)")
    p.add_argument("--head", type=int, help="only this head (counted from 1)")
    p.add_argument("--html", action="store_true", help="also write a single-file HTML report")


def attention_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inference.engine import load_torch_engine
    from ..inspect.attention import attention_job

    check_replaceable(ns.out, "report", "--out", {"MODEL_DIR": ns.model_dir})
    engine = load_torch_engine(ns.model_dir, ns.checkpoint, runtime_of(given),
                               **given.get("decode", {}))  # fmt: skip
    layer, head = (None if n is None else n - 1 for n in (ns.layer, ns.head))  # indices from 0
    lines = attention_job(engine, ns.sentence, Path(ns.out), layer, head, ns.html)
    print("\n".join(lines))


def compare_options(p: ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", help="the training runs (model directories) to compare")
    p.add_argument("--out", required=True, help="the report's folder: new, empty, or an earlier "
                   "report (replaced)")  # fmt: skip
    checkpoint_option(p, "each run")


def compare_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inspect.compare import compare_runs
    from ..inspect.compare_report import check_report_folder, write_report

    out = Path(ns.out)
    check_report_folder(out)  # before hours of measuring
    found = compare_runs([Path(run) for run in ns.runs], ns.checkpoint, runtime_of(given),
                         given.get("decode", {}))  # fmt: skip
    files = write_report(found, out)
    print(f"compared {len(found.runs)} runs on the {found.test}; report: {files[0]}")


def serve_options(p: ArgumentParser) -> None:
    model_options(p)
    engine_options(p)


def serve_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    try:
        from ..serve.server import serve
    except ModuleNotFoundError as error:  # the optional extra is not installed
        raise UserError(f"transformer serve needs {error.name}: pip install "
                        "'transformer[serve]' (fastapi, uvicorn)") from None  # fmt: skip

    config = ServeConfig(**given.get("serve", {}))
    decode = given.get("decode", {})
    serve(ns.model_dir, ns.checkpoint, config, runtime_of(given), decode, ns.engine)
