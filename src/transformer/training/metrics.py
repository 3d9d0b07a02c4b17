"""Training metrics: the running sums between two log lines, and one JSON object per line in
the run's ``metrics.jsonl`` (and TensorBoard if installed); ``model_dir/runs.py`` reads it."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from ..files import open_log
from .distributed import World
from .loss import LossSums


class MetricsLog:
    """Appends rows such as ``{"step": 100, "loss": 3.2, ...}`` to ``OUT/metrics.jsonl``."""

    def __init__(self, path: Path, tensorboard_dir: Path, resume: bool = False) -> None:
        self.path = path
        self.file = open_log(self.path, owner=path.parent, fresh=not resume)
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


class NoLog:
    """The log of a process that does not write one (ranks other than 0)."""

    def write(self, **row: object) -> None:
        pass

    def close(self) -> None:
        pass


class Meter:
    """Running sums between two log lines, kept on the device (read once, at the log line)."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), device=device)
        self.nll = torch.zeros((), device=device)
        self.tokens = torch.zeros((), dtype=torch.long, device=device)
        self.padded = 0
        self.start = time.perf_counter()

    def add(self, sums: LossSums, padded: int) -> None:
        self.loss += sums.loss.detach().float()
        self.nll += sums.nll.detach().float()
        self.tokens += sums.n_tokens
        self.padded += padded

    def summary(self, world: World = World()) -> dict[str, float]:  # noqa: B008 (frozen)
        """Mean loss, perplexity, and tokens per second (source + target, padding included),
        over every rank."""
        sums = torch.stack([self.loss, self.nll, self.tokens.float(),
                            torch.tensor(float(self.padded), device=self.loss.device)])  # fmt: skip
        loss, nll, tokens, padded = world.sum(sums).tolist()
        tokens = max(tokens, 1.0)
        seconds = time.perf_counter() - self.start
        return {
            "loss": loss / tokens,
            "ppl": math.exp(min(nll / tokens, 50)),
            "tokens_per_s": padded / seconds,
        }
