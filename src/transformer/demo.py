"""The demos: train a built-in model from scratch, then translate what a person types first and
score the held-out test set.

- ``numbers`` (``make demo``, the default): English number words -> French number words
  ("seven hundred and seventy-one" -> "sept cent soixante et onze"), small enough to learn on a
  laptop CPU in minutes, yet real translation: words reorder ("ninety-one" ->
  "quatre-vingt-onze"), forms are irregular ("quatre-vingts" but "quatre-vingt-un"), and the
  test numbers never occur in training. Scored by exact match per magnitude class.
- ``tatoeba-fr-en``: French -> English on the Tatoeba pairs for an hour, the notes' own example
  ("Je suis étudiant" -> "I am a student"). Scored by BLEU against all the translations of each
  test sentence (docs/french.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import DataConfig, load_config
from .data.corpora import load_splits
from .data.numbers import number_pairs
from .data.splits import Splits
from .device import resolve_device
from .errors import UserError
from .inference.engine import load_torch_engine
from .inference.evaluate import (
    ExactMatch,
    Score,
    exact_match,
    references_by_source,
    score_translations,
)
from .inference.translation import translate
from .model_dir.runs import RunDir
from .training.loop import train

# What a person tries first with the numbers model: small numbers, the README's examples, a
# round number.
TYPED_FIRST = (0, 1, 4, 12, 17, 21, 71, 80, 99, 100, 200, 771, 1000, 2021, 80_080, 412_080)
# The notes' sentence, then everyday sentences a student might type (references: the usual
# translation; the test split's own references score the model, not these).
NOTES_SENTENCES = (
    ("Je suis étudiant.", "I am a student."),
    ("Je suis étudiant", "I am a student"),
    ("Il fait beau aujourd'hui.", "The weather is nice today."),
    ("Où est la gare ?", "Where is the station?"),
    ("J'aime lire des livres.", "I like reading books."),
)


@dataclass(frozen=True)
class Demo:
    """One built-in demo: its config, where it trains by default, what it is."""

    config: str  # a built-in config (config/builtin/NAME.yaml)
    out: str  # the default model directory
    task: str  # what the model learns, for the first line
    typed_first: Callable[[DataConfig], list[tuple[str, str]]]

    def try_line(self, out_dir: Path) -> str:
        example = self.typed_first(load_config(self.config).data)[0][0]
        return f'Try: transformer translate {out_dir} <<< "{example}"'


DEMOS = {
    "numbers": Demo("numbers", "runs/numbers-en-fr", "en -> fr number words",
                    lambda data: number_pairs(data, [n for n in TYPED_FIRST
                                                     if n <= data.numbers_max])),
    "tatoeba-fr-en": Demo("tatoeba-fr-en", "runs/fr-en", "fr -> en everyday sentences (Tatoeba)",
                          lambda data: list(NOTES_SENTENCES)),
}  # fmt: skip


@dataclass
class DemoResult:
    out_dir: Path
    exact: list[ExactMatch] | None  # numbers: per magnitude class, then "all"
    bleu: list[Score] | None  # tatoeba: against all references, then one per line
    train_seconds: float
    total_seconds: float

    @property
    def accuracy(self) -> float:
        """Exact match over the whole test split (the numbers demo)."""
        assert self.exact is not None, "only the numbers demo scores exact matches"
        return self.exact[-1].accuracy


def run_demo(
    out_dir: Path | None = None, progress: bool = True,
    overrides: dict[str, dict] | None = None, corpus: str = "numbers",
) -> DemoResult:  # fmt: skip
    """Trains the demo of ``corpus`` into ``out_dir`` (its default if None; replacing an earlier
    demo of the same corpus there), then translates and scores its test split.

    A folder holding any other run is refused: the demo replaces only its own kind of run.
    ``overrides`` change the built-in config (``{"train": {"max_steps": 10}}``), e.g. for a
    quick check, or give ``{"data": {"data_dir": ...}}`` a local copy of the corpus.
    """
    if corpus not in DEMOS:
        raise UserError(f"no demo for {corpus!r}; the demos are {', '.join(DEMOS)}")
    demo = DEMOS[corpus]
    out_dir = Path(out_dir if out_dir is not None else demo.out)
    start = time.perf_counter()
    config = load_config(demo.config, overrides)
    _check_replaceable(RunDir(out_dir), config.data.corpus)
    minutes = config.train.max_minutes
    print(f"Training the built-in task ({demo.task}) into {out_dir},")
    device = resolve_device(config.runtime.device)
    print(f"from scratch, for at most {minutes:g} minutes on this machine ({device.type}).")
    result = train(config, out_dir, overwrite=True, progress=progress, made_by="demo")

    best = load_torch_engine(out_dir, "best", config.runtime)
    model, tokenizers, decode = best.model, best.tokenizers, best.decode
    splits = load_splits(best.config.data)
    words = demo.typed_first(best.config.data)
    sources, references = references_by_source(splits.test)
    with best.precision():
        hypotheses = translate(model, tokenizers, sources, decode).best
        typed = translate(model, tokenizers, [s for s, _ in words], decode).best

    print(f"\nFirst things people type (checkpoint {best.path.name}):")
    for (src, ref), hyp in zip(words, typed, strict=True):
        print(f"  {src}\n    -> {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    exact, bleu = _report(splits, sources, hypotheses, references)
    total = time.perf_counter() - start
    print(f"Training {result.seconds:.0f} s, total {total:.0f} s. Model directory: {out_dir}")
    print(demo.try_line(out_dir))
    return DemoResult(out_dir, exact, bleu, result.seconds, total)


def _report(
    splits: Splits, sources: list[str], hypotheses: list[str], references: list[list[str]]
) -> tuple[list[ExactMatch] | None, list[Score] | None]:
    """Exact match per class for a corpus with classes (the numbers), else BLEU against every
    translation of each test sentence and against one per line."""
    if splits.test_groups is not None:
        rows = exact_match(hypotheses, [refs[0] for refs in references], splits.test_groups)
        print(f"\nExact match on the {len(splits.test)} test numbers ({splits.test_note}):")
        for row in rows:
            print(f"  {row}")
        return rows, None
    translated = dict(zip(sources, hypotheses, strict=True))
    per_line = [translated[source] for source, _ in splits.test]
    multi = score_translations(hypotheses, references)[0]
    single = score_translations(per_line, [target for _, target in splits.test])[0]
    print(f"\nOn the {len(sources):,} test sentences, none of them trained on:")
    print(f"  against all their {len(splits.test):,} translations: {multi}")
    print(f"  one translation per line:                     {single}")
    return None, [multi, single]


def _check_replaceable(run: RunDir, corpus: str | None) -> None:
    """Only an earlier demo run on the same corpus may be replaced by the demo: its marker says
    the demo made it (a run's marker from before markers said so: its corpus is the demo's).
    ``train --corpus numbers`` writes to the demo's folder by default, and a long training of
    the user's there was replaced by the next ``make demo``."""
    if not run.has_run():
        return
    made_by = run.made_by()
    if made_by not in (None, "demo"):
        maker = "`transformer train` made" if made_by == "train" else "the demo did not make"
        raise UserError(
            f"{run.root} holds a run that {maker}, not a demo run; the demo "
            "replaces only its own runs: choose another --out (or move that run)"
        )
    try:
        saved = run.saved_config().data.corpus
    except UserError:
        saved = None
    if saved != corpus:
        raise UserError(
            f"{run.root} holds a run that is not a demo run of {corpus} (corpus {saved!r}); the "
            "demo replaces only its own runs: choose another --out"
        )
