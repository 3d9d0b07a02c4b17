"""The learning-rate schedule of Vaswani et al. §5.3 ("Noam"): linear warmup, then 1/√step.

    lrate = factor · d_model^−0.5 · min(step^−0.5, step · warmup_steps^−1.5)

It rises linearly for ``warmup_steps`` updates, peaks at factor · (d_model · warmup)^−0.5, and
then decays with the inverse square root of the step number. The paper uses factor 1 and
warmup 4000 with Adam(β1 = 0.9, β2 = 0.98, ε = 1e−9).

An optional cool-down (not in the paper) multiplies the rate by a factor falling linearly from 1
to 0 over the last ``cooldown_steps`` of ``max_steps``. A short run ends still at a high rate,
where consecutive checkpoints can differ a lot; cooling down lets the last one settle (the
effect the paper gets by averaging the last checkpoints of a long run).
"""

from __future__ import annotations

import torch


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The learning rate for update number ``step`` (counted from 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def cooldown(step: int, max_steps: int, cooldown_steps: int) -> float:
    """The cool-down multiplier: 1 until the last ``cooldown_steps`` steps, then linearly down to
    0 after step ``max_steps``."""
    if cooldown_steps <= 0:
        return 1.0
    return min(1.0, max(0.0, (max_steps - step + 1) / cooldown_steps))


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
