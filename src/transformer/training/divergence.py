"""A non-finite loss, gradient norm or weight stops training at once, naming its step and keeping
the last good checkpoint, without reading anything back from the device on every step."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..model_dir.checkpoints import read_index
from ..model_dir.weights import non_finite
from .distributed import World

KINDS = {1: "loss", 2: "gradient norm", 3: "a weight"}


class Divergence:
    """Watches for a non-finite loss or gradient norm without stopping the device every step:
    the first bad step is kept on the device and read at log, validation and save points, so a
    NaN never reaches a saved checkpoint. (With fp16 the GradScaler skips steps with infinite
    gradients itself, so only the loss is watched.)"""

    def __init__(self, device: torch.device, check_grad_norm: bool) -> None:
        self.check_grad_norm = check_grad_norm
        self.first = torch.zeros((), dtype=torch.long, device=device)  # 0: none yet
        self.what = torch.zeros((), dtype=torch.long, device=device)  # KINDS' index
        self.value = torch.zeros((), device=device)

    def _see(self, step: int, value: Tensor, kind: int) -> None:
        new = (self.first == 0) & ~torch.isfinite(value)
        self.first = torch.where(new, step, self.first)
        self.what = torch.where(new, kind, self.what)
        self.value = torch.where(new, value.detach().float(), self.value)

    def loss(self, step: int, value: Tensor) -> None:
        self._see(step, value, 1)

    def grad_norm(self, step: int, value: Tensor) -> None:
        if self.check_grad_norm:
            self._see(step, value, 2)

    def weights(self, step: int, model: nn.Module) -> None:
        """Watches the weights after ``step``'s update, read at validation and save points: an
        update can make them infinite or NaN (a learning rate of 1e30) while the loss and the
        gradient norm that led to it were finite."""
        bad = [non_finite(p.detach(), name).any() for name, p in model.named_parameters()]
        self._see(step, torch.where(torch.stack(bad).any(), float("nan"), 0.0), 3)

    def check(self, checkpoints: Path, world: World = World()) -> None:  # noqa: B008
        """Stops training (UserError) if a step went bad on any rank, naming the first such
        step and the last good checkpoint."""
        seen = world.gather((int(self.first), int(self.what), float(self.value)))
        bad = [s for s in seen if s[0]]
        if bad:
            step, what, value = min(bad)
            diverged(step, f"{KINDS[what]} is {value}", checkpoints)


def diverged(step: int, what: str, checkpoints: Path) -> None:
    """Raises the UserError that stops a training that went bad at ``step``."""
    last = read_index(checkpoints).get("last")
    kept = (
        f"the last good checkpoint is {checkpoints / last}" if last else "no checkpoint was saved"
    )
    raise UserError(f"{what} at step {step}: training stopped; {kept}")
