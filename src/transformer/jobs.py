"""Translate, evaluate and draw attention as jobs on files: what those commands do.

A job loads a model directory (or one of its checkpoint folders), applies the search options it
was given on top of the model's own decode config, and reads and writes files the safe way: an
output that is also an input is refused before anything is read, and outputs appear complete
or not at all (``files.atomic_write``).

Translate and evaluate run on an ``Engine``: our torch model (``Translator``), or CTranslate2
on an exported model (``export/engine.py``). Both go through ``translate_with``, so empty lines,
truncation and line alignment are the same whichever runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from .config import DecodeConfig, RunConfig, RuntimeConfig
from .data.corpora import load_splits
from .data.readers import read_lines, read_parallel
from .data.tokenizer import Tokenizers
from .device import autocast, prepare_runtime
from .errors import UserError
from .files import atomic_write, check_not_an_input
from .inference.evaluate import ExactMatch, Score, exact_match, score_translations
from .inference.translator import (
    TranslationResult,
    inspect_sentence,
    translate,
    translate_lines,
)
from .inspect.report import write_html_report
from .inspect.visualize import save_positional_plots, write_attention_figures
from .model.transformer import Transformer
from .training.checkpoint import load_checkpoint, model_dir_of


@dataclass
class Translator:
    """A model ready to translate: weights (on their device), tokenizers, the search to use."""

    model: Transformer
    tokenizers: Tokenizers
    decode: DecodeConfig
    config: RunConfig  # saved with the checkpoint
    path: Path  # the checkpoint folder
    runtime: RuntimeConfig = RuntimeConfig()
    name = "torch"

    def precision(self) -> AbstractContextManager:
        """The runtime's precision (autocast) around a search."""
        return autocast(next(self.model.parameters()).device, self.runtime.precision)

    @property
    def device(self) -> str:
        return str(next(self.model.parameters()).device)

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def translate(
        self, sentences: list[str], decode: DecodeConfig | None = None
    ) -> TranslationResult:
        """Translates with the torch model, in the runtime's precision, with ``decode`` (default:
        this translator's own search)."""
        with self.precision():
            return translate(self.model, self.tokenizers, sentences, decode or self.decode)


class Engine(Protocol):
    """What translate, evaluate and serve need of a model: a ``Translator`` (torch) or a
    ``CTranslate2Engine`` (export/engine.py)."""

    name: str  # "torch" or "ctranslate2"
    tokenizers: Tokenizers
    decode: DecodeConfig  # the default search
    config: RunConfig  # the run's config (data, model, decode)
    path: Path  # the checkpoint folder or the exported model

    @property
    def device(self) -> str: ...  # "cpu", "cuda:0", ...

    @property
    def parameters(self) -> int: ...  # the model's parameter count

    def translate(
        self, sentences: list[str], decode: DecodeConfig | None = None
    ) -> TranslationResult: ...


ENGINES = ("torch", "ctranslate2")


def load_translator(
    model_dir: str | Path,
    checkpoint: str = "best",
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    **search: object,
) -> Translator:
    """A model directory (or checkpoint folder) on the runtime's device (not the one it was
    trained on), with ``search`` options (DecodeConfig fields) on top of its saved decode
    config; an ``nbest`` larger than the beam widens it."""
    device = prepare_runtime(runtime)
    loaded = load_checkpoint(Path(model_dir), checkpoint, device)
    decode = loaded.config.decode.with_search(**search)
    tokenizers = Tokenizers.load(model_dir_of(loaded.path))
    return Translator(loaded.model, tokenizers, decode, loaded.config, loaded.path, runtime)


def load_engine(
    model_dir: str | Path,
    engine: str = "torch",
    checkpoint: str = "best",
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    **search: object,
) -> Engine:
    """The engine that translates: ``torch`` (``load_translator``) or ``ctranslate2``, which
    loads an exported model or converts a model directory on the fly (``export/engine.py``)."""
    from .export.folder import is_export

    if engine == "ctranslate2":
        from .export.engine import load_ctranslate2

        return load_ctranslate2(model_dir, checkpoint, runtime, **search)
    if engine != "torch":
        raise UserError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if is_export(Path(model_dir)):
        raise UserError(f"{model_dir} is a CTranslate2 export; use it with --engine ctranslate2")
    return load_translator(model_dir, checkpoint, runtime, **search)


def translate_file(
    engine: Engine,
    input: str | None,
    output: str | None,
    stdin: IO[bytes],
    stdout: IO[str],
    warn: Callable[[str], None],
) -> int:
    """Translates ``input`` (or standard input; interactively on a terminal) into ``output``
    (or standard output), line by line; returns the number of lines."""
    interactive = input is None and stdin.isatty()
    if input is not None:
        lines: Iterable[str] = read_lines(input)
    elif interactive:
        print("Type a sentence and press Enter (Ctrl-D to quit).", file=sys.stderr)
        lines = _prompted_lines()
    else:
        lines = _stdin_lines(stdin)
    chunk = 1 if interactive else 2000
    nbest = engine.decode.nbest
    if output is None:
        write = _printer(stdout, interactive)
        return translate_lines(engine.translate, lines, nbest, write, warn, chunk)
    with atomic_write(output) as out:  # the file appears complete, at the end
        return translate_lines(engine.translate, lines, nbest, _printer(out, False), warn, chunk)


def check_outputs(output: str | None, **inputs: str | None) -> None:
    """Refuses an output that is one of the inputs (before anything is loaded or read)."""
    if output is not None:
        check_not_an_input(output, {f"--{k}": v for k, v in inputs.items()}, "--output")


def _printer(stream: IO[str], flush: bool) -> Callable[[str], None]:
    def write(line: str) -> None:
        print(line, file=stream, flush=flush)

    return write


def _prompted_lines() -> Iterator[str]:
    while True:
        try:
            yield input("> ")
        except EOFError:
            return


def _stdin_lines(stdin: IO[bytes]) -> Iterator[str]:
    """Lines of standard input, decoded strictly as UTF-8 (errors name the line)."""
    for number, raw in enumerate(stdin, 1):
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as error:
            raise UserError(
                f"<stdin>: line {number} is not valid UTF-8 (byte {raw[error.start]:#04x} at "
                f"position {error.start + 1} of the line)"
            ) from None


@dataclass
class Evaluation:
    """What ``evaluate`` found."""

    scores: list[Score]  # BLEU, chrF (and lowercased BLEU)
    exact: list[ExactMatch] | None  # per class, for a corpus that has classes
    note: str  # what the test split is (e.g. which classes are also trained on)
    hypotheses: Path
    truncated: int  # source lines cut to fit the model

    def lines(self) -> list[str]:
        out = [str(score) for score in self.scores]
        if self.exact is not None:
            out.append(f"by class ({self.note}):" if self.note else "by class:")
            out += [f"  {row}" for row in self.exact]
        return [*out, f"hypotheses: {self.hypotheses}"]


def evaluate(
    engine: Engine,
    src: str | None,
    ref: str | None,
    output: str | None,
    lowercase: bool,
    default_dir: Path,
) -> Evaluation:
    """Translates a test set (files, or the run's own test split) and scores it.

    Args:
        src, ref: line-aligned files, or both None for the run's test split.
        output: where the hypotheses go (default: ``default_dir/NAME.hyp``).
        lowercase: also report lowercased BLEU.
    """
    if (src is None) != (ref is None):
        raise UserError("give both --src and --ref, or neither (to use the run's test split)")
    groups, note = None, ""
    if src is not None and ref is not None:
        pairs, name = read_parallel(src, ref), Path(src).name
        if not pairs:
            raise UserError(f"nothing to evaluate: {src} and {ref} are empty")
    else:
        splits, name = load_splits(engine.config.data), "test"
        pairs, groups, note = splits.test, splits.test_groups, splits.test_note
        if not pairs:
            raise UserError("the run's corpus has no test split; pass --src and --ref")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    result = engine.translate(sources)
    hypotheses = Path(output) if output else default_dir / f"{name}.hyp"
    with atomic_write(hypotheses) as f:
        f.write("".join(h + "\n" for h in result.best))
    scores = score_translations(result.best, references, lowercase=lowercase)
    exact = exact_match(result.best, references, groups) if groups is not None else None
    return Evaluation(scores, exact, note, hypotheses, len(result.truncated))


def attention_job(
    translator: Translator,
    sentence: str,
    out: Path,
    layer: int | None,
    head: int | None,
    html_report: bool,
) -> list[str]:
    """What ``transformer attention`` does: translate ``sentence``, draw every attention map
    (or one layer / head) and the positional-encoding plots into ``out``, and optionally the
    HTML report. Returns the lines to show."""
    model = translator.model
    with translator.precision():
        seen = inspect_sentence(model, translator.tokenizers, sentence, translator.decode)
    files = write_attention_figures(seen.maps, seen.src_labels, seen.tgt_labels, out, layer, head)
    files += save_positional_plots(model.config.d_model, min(model.config.max_positions, 100), out)
    lines = [f"source:      {seen.source}", f"translation: {seen.translation}",
             f"wrote {len(files)} figures (PNG and SVG) to {out}"]  # fmt: skip
    if html_report:
        numbers = {"checkpoint": str(translator.path)}
        report = write_html_report(
            out / "report.html", seen.source, seen.translation, seen.maps,
            seen.src_labels, seen.tgt_labels, numbers,
        )  # fmt: skip
        lines.append(f"HTML report: {report}")
    return lines
