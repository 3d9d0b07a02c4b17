"""Translate, evaluate and score as jobs on files: what those commands do.

A job runs an ``Engine`` (inference/engine.py) over files or standard input and output, and
reads and writes them the safe way: every output passes ``files.check_output`` before anything
is read (never a device, a FIFO, an input, or a file inside a model or project folder), a closed
standard input or output is a one-line error, and outputs appear complete or not at all
(``files.atomic_write``). Input lines are translated in chunks (bounded memory) and stay
aligned with the output lines; n-best lists come out Moses-style, word alignments after ``|||``
in Pharaoh format. ``evaluate`` writes its hypotheses beside ``--src`` (the run's test split:
``MODEL.test.hyp`` in the current folder), never into the model's folder, and replaces a file
at that default place only while it holds what an earlier evaluate wrote there (its SHA-256,
recorded beside it): a file of the user's of that name is refused, not replaced.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO

from ..config import DecodeConfig
from ..data.corpora import load_splits
from ..data.download import sha256_of
from ..data.readers import decoded_lines, read_lines, read_parallel
from ..errors import UserError
from ..files import STDOUT, atomic_write, check_output, write_json_atomic
from ..model_dir.layout import model_dir_of
from ..reading import read_json
from .alignment import pharaoh
from .engine import Engine
from .evaluate import (
    ExactMatch,
    Score,
    exact_match,
    references_by_source,
    score_translations,
)
from .glossary import Glossary
from .score import TargetTooLong
from .translation import Translation, TranslationResult, prefix_problem

# an engine's translate: (sentences, search or None for its own, prefixes or None)
Translate = Callable[[list[str], DecodeConfig | None, list[str] | None], TranslationResult]


def translate_file(
    engine: Engine,
    input: str | None,
    output: str | Path | None,
    stdin: IO[bytes] | None,
    stdout: IO[str] | None,
    warn: Callable[[str], None],
    prefix: str | None = None,
    glossary: Glossary | None = None,
) -> int:
    """Translates ``input`` (or ``stdin``; interactively on a terminal) into ``output`` (or
    ``stdout``), line by line; returns the number of lines. The streams are those
    ``standard_streams`` gave: None where a file is used instead. ``prefix``: a file of target
    prefixes, line-aligned with the input (an empty line for none); ``glossary``: terms to
    enforce, checked against the model before any line is read."""
    translate: Translate = engine.translate
    if glossary is not None:
        glossary.check(engine.tokenizers, engine.config.model.max_positions)
        translate = partial(engine.translate, glossary=glossary)
    interactive = input is None and stdin is not None and stdin.isatty()
    if input is not None:
        lines: Iterable[str] = read_lines(input)
    elif interactive:
        if prefix is not None:
            raise UserError("--prefix needs the sentences in a file (--input) or piped in")
        print("Type a sentence and press Enter (Ctrl-D to quit).", file=sys.stderr)
        lines = _prompted_lines()
    else:
        assert stdin is not None, "standard_streams gives stdin when there is no input file"
        lines = decoded_lines(stdin, "<stdin>")
    prefixes = None
    if prefix is not None:
        lines = list(lines)
        prefixes = read_prefixes(engine, prefix, len(lines), input or "standard input")
    chunk = 1 if interactive else 2000
    nbest = engine.decode.nbest
    if output is None:
        assert stdout is not None, "standard_streams gives stdout when there is no output file"
        write = _printer(stdout, interactive)
        return translate_lines(translate, lines, nbest, write, warn, chunk, prefixes)
    with atomic_write(output) as out:  # the file appears complete, at the end
        return translate_lines(translate, lines, nbest, _printer(out, False), warn, chunk,
                               prefixes)  # fmt: skip


def read_prefixes(engine: Engine, path: str, count: int, input: str) -> list[str]:
    """The prefix file's lines, checked against the input and the model before any work."""
    prefixes = read_lines(path)
    if len(prefixes) != count:
        raise UserError(f"--prefix {path} has {len(prefixes)} lines but {input} has {count}; "
                        "give one prefix per line (an empty line for none)")  # fmt: skip
    for number, text in enumerate(prefixes, 1):
        problem = prefix_problem(engine.tokenizers, text, engine.config.model.max_positions)
        if problem:
            raise UserError(f"{path}: line {number} {problem}")
    return prefixes


def format_nbest(index: int, options: list[Translation]) -> list[str]:
    """Moses-style n-best lines: ``sentence index ||| translation ||| score``, then
    ``||| alignment`` when there is one."""
    return [f"{index} ||| {t.text} ||| {t.score:.4f}" + _aligned(t) for t in options]


def _aligned(t: Translation) -> str:
    """`` ||| i-j ...`` for a translation with a word alignment, else nothing."""
    return "" if t.alignment is None else f" ||| {pharaoh(t.alignment)}"


def translate_lines(
    translate: Translate,
    lines: Iterable[str],
    nbest: int,
    write: Callable[[str], None],
    warn: Callable[[str], None],
    chunk: int = 2000,
    prefixes: list[str] | None = None,
) -> int:
    """Translates a stream of lines in chunks (bounded memory), keeping line alignment.

    Args:
        translate: an engine's (sentences, prefixes) -> TranslationResult.
        nbest: lines written per input line; > 1 writes Moses-style n-best lines.
        prefixes: one target prefix per line ("" for none), or None.
    Each input line gives one output line (``nbest`` lines with ``nbest`` > 1); an empty line
    gives an empty line (one with a prefix is decoded from it: ``translate.decoded``). A
    translation with a word alignment is followed by `` ||| i-j ...``.
    Returns the number of input lines.
    """
    done = 0
    buffer: list[str] = []

    def flush() -> None:
        forced = prefixes[done : done + len(buffer)] if prefixes is not None else None
        result = translate(buffer, None, forced)
        for i in result.truncated:
            warn(f"line {done + i + 1}: longer than the model accepts; translated its beginning")
        for i, missing in result.unmet.items():
            terms = ", ".join(repr(term) for term in missing)
            warn(f"line {done + i + 1}: the translation lacks the glossary's {terms}: the length "
                 "limit left no room")  # fmt: skip
        for i, options in enumerate(result.nbest):
            if nbest > 1:
                for line in format_nbest(done + i, options[:nbest]):
                    write(line)
            else:
                write(options[0].text + _aligned(options[0]))

    for line in lines:
        buffer.append(line.rstrip("\n"))
        if len(buffer) == chunk:
            flush()
            done, buffer = done + len(buffer), []
    if buffer:
        flush()
        done += len(buffer)
    return done


def standard_streams(
    input: str | None, output: Path | None
) -> tuple[IO[bytes] | None, IO[str] | None]:
    """(standard input, standard output) where the job uses them instead of files, else None;
    a closed one (``<&-``, ``>&-``) is a one-line error before anything is loaded."""
    stdin = stdout = None
    if input is None:
        if sys.stdin is None:
            raise UserError("standard input is closed: give --input FILE, or pipe the sentences in")
        stdin = sys.stdin.buffer
    if output is None:
        if sys.stdout is None:
            raise UserError("standard output is closed: give --output FILE")
        stdout = sys.stdout
    return stdin, stdout


def hypotheses_path(output: str | None, src: str | None, ref: str | None, model_dir: str) -> Path:
    """Where ``evaluate`` writes its hypotheses, checked (``files.check_output``): ``output``,
    else beside ``src`` (``SRC.hyp``), else ``MODEL.test.hyp`` in the current folder."""
    reads = {"--src": src, "--ref": ref, "MODEL_DIR": model_dir}
    if output == STDOUT:
        raise UserError("--output -: evaluate prints its scores on standard output; give the "
                        "hypotheses a file")  # fmt: skip
    if output is not None:
        return check_output(output, "--output", reads) or Path(output)
    name = Path(model_dir).resolve().name
    default = Path(f"{src}.hyp") if src is not None else Path(f"{name}.test.hyp")
    try:
        checked = check_output(default, "--output", reads) or default
    except UserError as error:
        raise UserError(f"{error} (the hypotheses' default place; give --output)") from None
    if (default.exists() or default.is_symlink()) and not made_by_evaluate(default):
        raise UserError(f"{default} exists, and evaluate did not write it there (or it changed "
                        "since): nothing is replaced at the hypotheses' default place; give "
                        f"--output {default} to replace it, or another file")  # fmt: skip
    return checked


def _made_record(hypotheses: Path) -> Path:
    """Where evaluate records the hypotheses it wrote at their default place: beside them,
    hidden, ``.NAME.transformer-made``, their SHA-256."""
    return hypotheses.with_name(f".{hypotheses.name}.transformer-made")


def made_by_evaluate(hypotheses: Path) -> bool:
    """Whether ``hypotheses`` (a default place) holds what evaluate wrote there, unchanged: a
    file of the user's of that name (another system's output, say) is never replaced."""
    record = _made_record(hypotheses)
    if hypotheses.is_symlink() or not hypotheses.is_file() or not record.is_file():
        return False
    try:
        return read_json(record).get("sha256") == sha256_of(hypotheses)
    except UserError:  # a damaged record: not known to be evaluate's
        return False


def remember_made(hypotheses: Path, default: bool) -> None:
    """Records that evaluate wrote ``hypotheses`` (``made_by_evaluate``), so that the next
    evaluate may replace them at their default place while they are unchanged: where they are
    at the default place (``default``), or were before (an earlier record, now out of date)."""
    record = _made_record(hypotheses)
    if default or record.is_file():
        write_json_atomic(record, {"sha256": sha256_of(hypotheses),
                                   "written_by": "transformer evaluate"})  # fmt: skip


def _printer(stream: IO[str], flush: bool) -> Callable[[str], None]:
    def write(line: str) -> None:
        print(line, file=stream, flush=flush)

    return write


def _prompted_lines() -> Iterator[str]:
    """Lines typed at the prompt; a NUL byte is binary data, refused as a file's would be."""
    for number in itertools.count(1):
        try:
            line = input("> ")
        except EOFError:
            return
        if "\x00" in line:
            raise UserError(f"<stdin>: line {number} holds a NUL byte: binary data, not text")
        yield line


@dataclass
class Evaluation:
    """What ``evaluate`` found."""

    scores: list[Score]  # BLEU, chrF (and lowercased BLEU): one reference per line (pair)
    exact: list[ExactMatch] | None  # per class, for a corpus that has classes
    note: str  # what the test split is (e.g. which classes are also trained on)
    hypotheses: Path
    truncated: int  # source lines cut to fit the model
    # Where a source has several translations: the same metrics over the distinct sources,
    # each against all its translations, and how many sources and references that is.
    multi_reference: list[Score] | None = None
    sources: int = 0
    references: int = 0

    def lines(self) -> list[str]:
        out = [str(score) for score in self.scores]
        if self.multi_reference is not None:
            out = [f"one reference per line ({self.references:,} lines):"]
            out += [f"  {score}" for score in self.scores]
            out.append(f"all references of each distinct source ({self.sources:,} sources):")
            out += [f"  {score}" for score in self.multi_reference]
        if self.exact is not None:
            out.append(f"by class ({self.note}):" if self.note else "by class:")
            out += [f"  {row}" for row in self.exact]
        every = self.scores + (self.multi_reference or [])
        out += [f"note: {note}" for note in dict.fromkeys(s.note for s in every if s.note)]
        return [*out, f"hypotheses: {self.hypotheses}"]


def evaluate(
    engine: Engine, src: str | None, ref: str | None, output: str | Path, lowercase: bool = False
) -> Evaluation:
    """Translates a test set (files, or the run's own test split) and scores it.

    Args:
        src, ref: line-aligned files, or both None for the run's test split.
        output: where the hypotheses go (``hypotheses_path``).
        lowercase: also report lowercased BLEU.
    """
    if (src is None) != (ref is None):
        raise UserError("give both --src and --ref, or neither (to use the run's test split)")
    groups, note = None, ""
    if src is not None and ref is not None:
        pairs = read_parallel(src, ref)
        if not pairs:
            raise UserError(f"nothing to evaluate: {src} and {ref} are empty")
        for path, side in ((src, 0), (ref, 1)):  # a score of 0 against nothing means nothing
            if not any(pair[side].strip() for pair in pairs):
                raise UserError(f"nothing to evaluate: every line of {path} is blank")
    else:
        data = engine.config.data
        if data.corpus is None and data.src is None:  # an import: "no training data" said
            raise UserError(f"{model_dir_of(engine.path)} has no test split of its own (its "
                            "config names no corpus and no training files): pass --src and "
                            "--ref")  # fmt: skip
        splits = load_splits(data)
        pairs, groups, note = splits.test, splits.test_groups, splits.test_note
        if not pairs:
            raise UserError("the run's corpus has no test split; pass --src and --ref")
    # Each distinct source is translated once; a source with several translations (a line of
    # the test set each) is scored against each line and, once, against all of them.
    sources, all_references = references_by_source(pairs)
    result = engine.translate(sources)
    translated = dict(zip(sources, result.best, strict=True))
    best = [translated[source] for source, _ in pairs]  # (pairs,) line-aligned with the test set
    references = [target for _, target in pairs]
    hypotheses = Path(output)
    with atomic_write(hypotheses) as f:
        f.write("".join(h + "\n" for h in best))
    scores = score_translations(best, references, lowercase=lowercase)
    exact = exact_match(best, references, groups) if groups is not None else None
    evaluation = Evaluation(scores, exact, note, hypotheses, len(result.truncated))
    if len(sources) < len(pairs):
        evaluation.multi_reference = score_translations(result.best, all_references, lowercase)
        evaluation.sources, evaluation.references = len(sources), len(pairs)
    return evaluation


def score_file(
    engine: Engine, src: str, ref: str, output: str | Path | None, stdout: IO[str] | None,
    warn: Callable[[str], None],
) -> int:  # fmt: skip
    """Writes, for each line pair of ``src`` and ``ref``, the model's log-probability of the
    reference: ``total<TAB>per token<TAB>length-penalised`` (inference/score.py), into
    ``output`` (or standard output); returns the number of pairs."""
    pairs = read_parallel(src, ref)  # line counts must agree
    if not pairs:
        raise UserError(f"nothing to score: {src} and {ref} are empty")
    try:
        result = engine.score([s for s, _ in pairs], [t for _, t in pairs])
    except TargetTooLong as error:
        raise error.at(f"{ref}, line {error.index + 1}: the reference") from None
    for i in result.truncated:
        warn(f"line {i + 1}: the source is longer than the model accepts; scored its beginning")
    lines = [f"{p.log_prob:.6f}\t{p.per_token:.6f}\t{p.penalised:.6f}\n" for p in result.scores]
    if output is None:
        assert stdout is not None, "standard_streams gives stdout when there is no output file"
        stdout.write("".join(lines))
    else:
        with atomic_write(output) as out:
            out.write("".join(lines))
    return len(lines)
