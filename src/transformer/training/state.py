"""The trainer state: everything besides the weights that a resumed run needs, saved with every
checkpoint as ``trainer.pt``, and how validations are ranked for the ``best`` checkpoint.

Shapes: none; plain numbers and the optimizer's own state.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..device import rng_state, set_rng_state
from ..errors import UserError
from ..model_dir.layout import TRAINER
from .distributed import World
from .stream import Position

log = logging.getLogger(__name__)


@dataclass
class TrainerState:
    """Everything besides the weights that a resumed run needs; saved as ``trainer.pt``.

    ``best_score`` ranks validations (higher is better, see ``selection_score``); the checkpoint
    index's ``best`` points at the latest of the best-scoring ones. ``stale_validations`` counts
    the validations since the score last rose strictly (``train.patience`` stops the run).
    """

    step: int = 0
    position: Position = field(default_factory=Position)
    elapsed: float = 0.0  # seconds of training so far (max_minutes counts them)
    best_score: float = -math.inf
    best_valid_nll: float = math.inf
    stale_validations: int = 0

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
            "stale_validations": self.stale_validations,
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
        source: Path | str = TRAINER,
    ) -> TrainerState:
        """The state in ``saved`` (read from ``source`` by ``load_trainer_state``, which checked
        its structure); the optimizer, the scaler and the RNGs are restored as a side
        effect. Each rank takes back its own random state; with another number of processes
        than the run was saved with, each step reads world_size × accumulate batches of the
        same stream, so the run goes on with a different global batch (a warning says so)."""
        if saved.get("world_size", 1) != world.size:
            log.warning(
                f"resuming a run saved with {saved.get('world_size', 1)} process(es) with "
                f"{world.size}: each step now takes {world.size} x accumulate batches instead"
            )
        try:  # torch checks that the saved parameter groups fit this model's
            optimizer.load_state_dict(saved["optimizer"])
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{source} is damaged: its optimizer state does not fit the model "
                            f"({str(error)[:120]}); it cannot be resumed") from None  # fmt: skip
        if scaler is not None and saved.get("scaler"):
            scaler.load_state_dict(saved["scaler"])
        ranks = saved.get("rng_ranks") or []
        if world.rank < len(ranks) and saved.get("world_size") == world.size:
            set_rng_state(ranks[world.rank])
        else:
            set_rng_state(saved["rng"])
        return cls(
            step=saved["step"],
            position=Position(**saved["position"]),
            elapsed=saved["elapsed"],
            best_score=saved["best_score"],
            best_valid_nll=saved["best_valid_nll"],
            stale_validations=saved.get("stale_validations", 0),  # none before early stopping
        )


def selection_score(validated: dict[str, float], metric: str) -> float:
    """How good a validation is, higher is better: BLEU when asked for and measured, else the
    negative validation NLL."""
    if metric == "bleu" and "valid_bleu" in validated:
        return validated["valid_bleu"]
    return -validated["valid_nll"]
