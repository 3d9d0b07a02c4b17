"""The learning-rate schedule of Vaswani et al. §5.3 ("Noam"): linear warmup, then 1/√step.

    lrate = factor · d_model^−0.5 · min(step^−0.5, step · warmup_steps^−1.5)

It rises linearly for ``warmup_steps`` updates, peaks at factor · (d_model · warmup)^−0.5, and
then decays with the inverse square root of the step number. The paper uses factor 1 and
warmup 4000 with Adam(β1 = 0.9, β2 = 0.98, ε = 1e−9).
"""

from __future__ import annotations

import torch


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The learning rate for update number ``step`` (counted from 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def schedule_factor(d_model: int, warmup_steps: int, lr_factor: float, peak_lr: float) -> float:
    """The factor to use: ``lr_factor``, or the one that makes the peak (at step = warmup)
    equal ``peak_lr`` when that is set; small models need a much lower peak than the
    formula's (d_model · warmup)^−0.5."""
    if peak_lr > 0:
        return peak_lr * (d_model * warmup_steps) ** 0.5
    return lr_factor


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Applies ``lr`` to every parameter group (the schedule's only state is the step count)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
