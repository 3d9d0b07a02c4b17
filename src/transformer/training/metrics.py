"""Training metrics: one JSON object per line in ``metrics.jsonl``, and TensorBoard if installed."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .rundir import RunDir


class MetricsLog:
    """Appends rows such as ``{"step": 100, "loss": 3.2, ...}`` to ``OUT/metrics.jsonl``."""

    def __init__(self, path: Path, tensorboard_dir: Path, resume: bool = False) -> None:
        self.path = path
        self.file = open(self.path, "a" if resume else "w", encoding="utf-8")  # noqa: SIM115
        self.tensorboard = None
        try:  # optional: only when the user has installed tensorboard
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(tensorboard_dir))
        except ImportError:
            pass

    def write(self, **row: object) -> None:
        row = {"time": round(time.time(), 3), **row}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        step = row.get("step")
        if self.tensorboard is not None and isinstance(step, int):
            for key, value in row.items():
                if key not in ("step", "time") and isinstance(value, int | float):
                    self.tensorboard.add_scalar(key, value, step)

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def read_metrics(out_dir: Path) -> list[dict]:
    """All rows of ``OUT/metrics.jsonl``."""
    path = RunDir(out_dir).metrics
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class NoLog:
    """The log of a process that does not write one (ranks other than 0)."""

    def write(self, **row: object) -> None:
        pass

    def close(self) -> None:
        pass
