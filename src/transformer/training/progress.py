"""What a person watching a training sees: a progress bar on a terminal; elsewhere (CI, a log
file) one plain line per log step, not a stream of carriage returns. Only rank 0 shows anything;
``metrics.jsonl`` (metrics.py) keeps the same numbers for programs."""

from __future__ import annotations

import sys

from tqdm import tqdm

from ..config import TrainConfig


class Progress:
    """The console of one training: the bar, the log lines, the validations."""

    def __init__(self, t: TrainConfig, step: int, show: bool) -> None:
        """Args: ``t`` the train config (its limits), ``step`` the step it starts from, ``show``
        whether this process shows anything (rank 0, without ``--quiet``)."""
        bar = show and sys.stderr.isatty()
        self.plain = show and not bar
        self.max_steps = t.max_steps
        limit = f"train, at most {t.max_minutes:g} min" if t.max_minutes else "train"
        self.bar = tqdm(total=t.max_steps, initial=step, disable=not bar, unit="step",
                        desc=limit, dynamic_ncols=True)  # fmt: skip

    def say(self, line: str) -> None:
        """A line above the bar (or alone, without one)."""
        self.bar.write(line)

    def stepped(self) -> None:
        self.bar.update(1)

    def logged(self, row: dict, lr: float) -> None:
        """A log step's numbers: on the bar, or as one plain line."""
        self.bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{row['ppl']:.2f}", lr=f"{lr:.2e}",
                             tok_s=f"{row['tokens_per_s']:.0f}")  # fmt: skip
        if self.plain:
            self.say(f"step {row['step']}/{self.max_steps} | loss {row['loss']:.3f} | "
                     f"ppl {row['ppl']:.2f} | lr {lr:.2e} | "
                     f"{row['tokens_per_s']:,.0f} tokens/s")  # fmt: skip

    def validated(self, step: int, v: dict) -> None:
        """A validation's scores, one line."""
        parts = [f"step {step}", f"valid loss {v['valid_loss']:.3f}", f"ppl {v['valid_ppl']:.2f}"]
        if "valid_bleu" in v:
            parts.append(f"BLEU {v['valid_bleu']:.1f}")
        if "valid_exact" in v:
            parts.append(f"exact {100 * v['valid_exact']:.1f}%")
        self.say(" | ".join(parts))

    def close(self) -> None:
        self.bar.close()
