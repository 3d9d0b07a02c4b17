"""The main job (``make demo``): train the built-in number-words model from scratch, then
translate its held-out test numbers and report exact-match accuracy.

English number words -> French number words ("seven hundred and seventy-one" -> "sept cent
soixante et onze") is small enough to learn on a laptop CPU in minutes, yet it is real
translation: words reorder ("ninety-one" -> "quatre-vingt-onze"), forms are irregular
("quatre-vingts" but "quatre-vingt-un"), and the test numbers never occur in training.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from .config import load_config
from .data.corpora import load_splits
from .data.numbers import number_pairs
from .device import resolve_device
from .errors import UserError
from .inference.engine import load_torch_engine
from .inference.evaluate import ExactMatch, exact_match
from .inference.translate import translate
from .training.loop import train
from .training.rundir import RunDir

DEMO_CONFIG = "numbers"  # the built-in config configs/numbers.yaml


@dataclass
class DemoResult:
    out_dir: Path
    exact: list[ExactMatch]  # per magnitude class, then "all"
    train_seconds: float
    total_seconds: float

    @property
    def accuracy(self) -> float:
        """Exact match over the whole test split."""
        return self.exact[-1].accuracy


def run_demo(
    out_dir: Path, progress: bool = True, overrides: dict[str, dict] | None = None
) -> DemoResult:
    """Trains into ``out_dir`` (replacing an earlier demo there) and evaluates on the test split.

    A folder holding any other run is refused: the demo replaces only its own kind of run.
    ``overrides`` change the built-in config (``{"train": {"max_steps": 10}}``), e.g. for a
    quick check.
    """
    start = time.perf_counter()
    config = load_config(DEMO_CONFIG, overrides)
    _check_replaceable(RunDir(out_dir))
    d, minutes = config.data, config.train.max_minutes
    print(f"Training the built-in task ({d.src_lang} -> {d.tgt_lang} number words) into {out_dir},")
    device = resolve_device(config.runtime.device)
    print(f"from scratch, for at most {minutes:g} minutes on this machine ({device.type}).")
    result = train(config, out_dir, overwrite=True, progress=progress)

    best = load_torch_engine(out_dir, "best", config.runtime)
    model, tokenizers, decode = best.model, best.tokenizers, best.decode
    splits = load_splits(best.config.data)
    sources, references = [s for s, _ in splits.test], [t for _, t in splits.test]
    words = _typed_first(best.config.data)
    with best.precision():
        hypotheses = translate(model, tokenizers, sources, decode).best
        typed = translate(model, tokenizers, [s for s, _ in words], decode).best
    rows = exact_match(hypotheses, references, splits.test_groups)

    print(f"\nFirst things people type (checkpoint {best.path.name}):")
    for (src, ref), hyp in zip(words, typed, strict=True):
        print(f"  {src}\n    -> {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    total = time.perf_counter() - start
    print(f"\nExact match on the {len(splits.test)} test numbers ({splits.test_note}):")
    for row in rows:
        print(f"  {row}")
    print(f"Training {result.seconds:.0f} s, total {total:.0f} s. Model directory: {out_dir}")
    print(f'Try: transformer translate {out_dir} <<< "four hundred and twelve"')
    return DemoResult(out_dir, rows, result.seconds, total)


def _check_replaceable(run: RunDir) -> None:
    """Only an earlier run on the numbers corpus may be replaced by the demo."""
    if not run.has_run():
        return
    try:
        corpus = run.saved_config().data.corpus
    except UserError:
        corpus = None
    if corpus != "numbers":
        raise UserError(
            f"{run.root} holds a run that is not a demo run (corpus {corpus!r}); the demo "
            "replaces only its own runs: choose another --out"
        )


# What a person tries first: small numbers, the README's examples, a round number.
TYPED_FIRST = (0, 1, 4, 12, 17, 21, 71, 80, 99, 100, 200, 771, 1000, 2021, 80_080, 412_080)


def _typed_first(data) -> list[tuple[str, str]]:
    numbers = [n for n in TYPED_FIRST if n <= data.numbers_max]
    return number_pairs(data, numbers)
