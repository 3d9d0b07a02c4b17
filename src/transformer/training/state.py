"""What a training run carries from step to step: where the data stream is, the trainer state
saved with every checkpoint, and the running sums of the log lines.

Shapes: none; plain numbers and the optimizer's own state.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..data.batching import Batch, Example, collate, make_batches
from ..device import rng_state, set_rng_state
from ..errors import UserError
from .distributed import World
from .loss import LossSums

log = logging.getLogger(__name__)


@dataclass
class Position:
    """Where the data stream is: the next batch is number ``batch`` of epoch ``epoch``."""

    epoch: int = 0
    batch: int = 0


def index_stream(
    examples: Sequence[Example], max_tokens: int, seed: int, start: Position
) -> Iterator[tuple[Position, np.ndarray]]:
    """Yields (position of the next batch, a batch's example indices) forever, epoch after
    epoch, from ``start``: the one global stream of batches every rank reads.

    After the last batch of epoch e the next position is (e + 1, 0): the epoch is complete.
    """
    epoch, first = start.epoch, start.batch
    while True:
        order = make_batches(examples, max_tokens, seed, epoch)
        for i in range(first, len(order)):
            after = Position(epoch, i + 1) if i + 1 < len(order) else Position(epoch + 1, 0)
            yield after, order[i]
        epoch, first = epoch + 1, 0


def batch_stream(
    examples: Sequence[Example], max_tokens: int, seed: int, start: Position
) -> Iterator[tuple[Position, Batch]]:
    """``index_stream`` with each batch padded into tensors."""
    for position, indices in index_stream(examples, max_tokens, seed, start):
        yield position, collate([examples[j] for j in indices])


@dataclass
class TrainerState:
    """Everything besides the weights that a resumed run needs; saved as ``trainer.pt``.

    ``best_score`` ranks validations (higher is better, see ``selection_score``); the checkpoint
    index's ``best`` points at the latest of the best-scoring ones.
    """

    step: int = 0
    position: Position = field(default_factory=Position)
    elapsed: float = 0.0  # seconds of training so far (max_minutes counts them)
    best_score: float = -math.inf
    best_valid_nll: float = math.inf

    def to_dict(
        self,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None = None,
        world: World = World(),  # noqa: B008 (frozen)
    ) -> dict:
        return {
            "step": self.step,
            "position": {"epoch": self.position.epoch, "batch": self.position.batch},
            "elapsed": self.elapsed,
            "best_score": self.best_score,
            "best_valid_nll": self.best_valid_nll,
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else {},
            "rng": rng_state(),  # Python, torch CPU and CUDA (of rank 0)
            "rng_ranks": world.gather(rng_state()) if world.distributed else [],
            "world_size": world.size,
        }

    @classmethod
    def restore(
        cls,
        saved: dict,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None = None,
        world: World = World(),  # noqa: B008 (frozen)
    ) -> TrainerState:
        """The state in ``saved``; the optimizer, the scaler and the RNGs are restored as a side
        effect. Checkpoints written before ``best_score`` existed rank by validation loss. Each
        rank takes back its own random state; with another number of processes than the run
        was saved with, each step reads world_size × accumulate batches of the same stream, so
        the run goes on with a different global batch (a warning says so)."""
        if saved.get("world_size", 1) != world.size:
            log.warning(
                f"resuming a run saved with {saved.get('world_size', 1)} process(es) with "
                f"{world.size}: each step now takes {world.size} x accumulate batches instead"
            )
        try:
            optimizer.load_state_dict(saved["optimizer"])
        except ValueError as error:  # e.g. one parameter group (Adam) before the AdamW groups
            raise UserError(
                f"the optimizer state was written by an older version ({error}); the weights "
                "still translate, but the run cannot be resumed: start it again"
            ) from None
        if scaler is not None and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        ranks = saved.get("rng_ranks") or []
        if world.rank < len(ranks) and saved.get("world_size") == world.size:
            set_rng_state(ranks[world.rank])
        elif "rng" in saved:
            set_rng_state(saved["rng"])
        else:  # written before the CUDA state was saved too
            set_rng_state({"python": saved["rng_python"], "torch": saved["rng_torch"]})
        best_nll = saved["best_valid_nll"]
        return cls(
            step=saved["step"],
            position=Position(**saved["position"]),
            elapsed=saved["elapsed"],
            best_score=saved.get("best_score", -best_nll),
            best_valid_nll=best_nll,
        )


def selection_score(validated: dict[str, float], metric: str) -> float:
    """How good a validation is, higher is better: BLEU when asked for and measured, else the
    negative validation NLL."""
    if metric == "bleu" and "valid_bleu" in validated:
        return validated["valid_bleu"]
    return -validated["valid_nll"]


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
