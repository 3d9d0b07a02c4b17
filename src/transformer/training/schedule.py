"""The learning-rate schedule of Vaswani et al. §5.3 ("Noam"): linear warmup, then 1/√step.

    lrate = factor · d_model^−0.5 · min(step^−0.5, step · warmup_steps^−1.5)

It rises linearly for ``warmup_steps`` updates, peaks at factor · (d_model · warmup)^−0.5, and
then decays with the inverse square root of the step number. The paper uses factor 1 and
warmup 4000 with Adam(β1 = 0.9, β2 = 0.98, ε = 1e−9).

An optional cool-down (not in the paper) multiplies the rate by a factor falling linearly from 1
to 0 over the last ``cooldown`` share of the run. A short run ends still at a high rate, where
consecutive checkpoints can differ a lot; cooling down lets the last one settle (the effect the
paper gets by averaging the last checkpoints of a long run). The share is of ``max_steps``, or
of ``max_minutes`` when that limit comes first, so a run with a time budget ends cooled down on
a fast machine and a slow one alike.
"""

from __future__ import annotations

import torch

from ..config import TrainConfig


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The learning rate for update number ``step`` (counted from 1)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def run_progress(step: int, seconds: float, max_steps: int, max_minutes: float) -> float:
    """How far the run is, 0..1: by steps, or by time when a time budget is nearer its end."""
    by_time = seconds / (60 * max_minutes) if max_minutes else 0.0
    return max(step / max_steps, by_time)


def cooldown(progress: float, share: float) -> float:
    """The cool-down multiplier: 1 until the last ``share`` of the run, then linearly to 0."""
    if share <= 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - progress) / share))


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


def learning_rate(step: int, seconds: float, d_model: int, t: TrainConfig) -> float:
    """The rate of update ``step`` (from 1) after ``seconds`` of training: the warmup /
    inverse-square-root schedule with ``t``'s factor (or peak), times the cool-down."""
    factor = schedule_factor(d_model, t.warmup_steps, t.lr_factor, t.peak_lr)
    progress = run_progress(step, seconds, t.max_steps, t.max_minutes)
    return inverse_sqrt_lr(step, d_model, t.warmup_steps, factor) * cooldown(progress, t.cooldown)
