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

from .checkpoint import load_checkpoint
from .config import load_config
from .data import load_splits
from .tokenizer import Tokenizers
from .train import train
from .translator import translate

DEMO_CONFIG = Path(__file__).parent / "configs" / "numbers.yaml"


@dataclass
class DemoResult:
    out_dir: Path
    accuracy: float  # exact match on the test split
    n_test: int
    train_seconds: float
    total_seconds: float


def run_demo(
    out_dir: Path, progress: bool = True, show: int = 8, overrides: dict[str, str] | None = None
) -> DemoResult:
    """Trains into ``out_dir`` (replacing an earlier demo there) and evaluates on the test split.

    ``overrides`` change the built-in config (``{"max_steps": "10"}``), e.g. for a quick check.
    """
    start = time.perf_counter()
    config = load_config(str(DEMO_CONFIG), overrides)
    d, minutes = config.data, config.train.max_minutes
    print(f"Training the built-in task ({d.src_lang} -> {d.tgt_lang} number words) into {out_dir},")
    print(f"from scratch, for at most {minutes:g} minutes on this CPU.")
    result = train(config, out_dir, overwrite=True, progress=progress)

    loaded = load_checkpoint(out_dir)
    tokenizers = Tokenizers.load(out_dir)
    test = load_splits(loaded.config.data).test
    sources, references = [s for s, _ in test], [t for _, t in test]
    hypotheses = translate(loaded.model, tokenizers, sources, loaded.config.decode).best
    correct = [h == r for h, r in zip(hypotheses, references, strict=True)]
    accuracy = sum(correct) / max(len(test), 1)

    print(f"\nTest translations (checkpoint {loaded.path.name}):")
    for src, hyp, ref, ok in list(zip(sources, hypotheses, references, correct, strict=True))[
        :show
    ]:
        print(f"  {src}\n    -> {hyp}" + ("" if ok else f"   (reference: {ref})"))
    total = time.perf_counter() - start
    print(f"\nExact-match accuracy on {len(test)} held-out test numbers: {100 * accuracy:.1f}%")
    print(f"Training {result.seconds:.0f} s, total {total:.0f} s. Model directory: {out_dir}")
    print(f'Try: transformer translate {out_dir} <<< "four hundred and twelve"')
    return DemoResult(out_dir, accuracy, len(test), result.seconds, total)
