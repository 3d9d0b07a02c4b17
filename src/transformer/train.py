"""The training loop: reads top to bottom, lives in ``train()``, and resumes exactly.

One update = ``accumulate`` batches of teacher-forced forward passes, label-smoothed
cross-entropy normalised by the number of target tokens, backpropagation, gradient clipping,
and an Adam step at the learning rate of the warmup / inverse-square-root schedule.

Everything a resumed run needs is saved with each checkpoint: weights, optimizer moments, step,
RNG states and the position in the epoch's batch order; so a run stopped at any point (even by
SIGKILL) and resumed ends with the same weights, bit for bit on CPU, as an uninterrupted run.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .batching import Batch, Example, collate, make_batches
from .checkpoint import (
    load_trainer_state,
    load_weights,
    prune_checkpoints,
    read_index,
    save_checkpoint,
    update_index,
)
from .config import RunConfig, TrainConfig
from .errors import UserError
from .loss import LossSums, label_smoothed_nll
from .metrics import MetricsLog
from .model import Transformer
from .prepare import Prepared, prepare
from .schedule import inverse_sqrt_lr, schedule_factor, set_learning_rate
from .validate import validate


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_valid_nll: float
    seconds: float


class Meter:
    """Running sums between two log lines."""

    def __init__(self) -> None:
        self.loss = self.nll = 0.0
        self.tokens = self.padded = 0
        self.start = time.perf_counter()

    def add(self, sums: LossSums, padded: int) -> None:
        self.loss += sums.loss.item()
        self.nll += sums.nll.item()
        self.tokens += sums.n_tokens
        self.padded += padded

    def summary(self) -> dict[str, float]:
        """Mean loss, perplexity, and tokens per second (source + target, padding included)."""
        tokens = max(self.tokens, 1)
        seconds = time.perf_counter() - self.start
        return {
            "loss": self.loss / tokens,
            "ppl": math.exp(min(self.nll / tokens, 50)),
            "tokens_per_s": self.padded / seconds,
        }


@dataclass
class Position:
    """Where the data stream is: the next batch is number ``batch`` of epoch ``epoch``."""

    epoch: int = 0
    batch: int = 0


def batch_stream(
    examples: list[Example], max_tokens: int, seed: int, start: Position
) -> Iterator[tuple[Position, Batch]]:
    """Yields (position of the next batch, batch) forever, epoch after epoch, from ``start``.

    After the last batch of epoch e the next position is (e + 1, 0): the epoch is complete.
    """
    epoch, first = start.epoch, start.batch
    while True:
        order = make_batches(examples, max_tokens, seed, epoch)
        for i in range(first, len(order)):
            after = Position(epoch, i + 1) if i + 1 < len(order) else Position(epoch + 1, 0)
            yield after, collate([examples[j] for j in order[i]])
        epoch, first = epoch + 1, 0


def make_optimizer(model: Transformer, config: RunConfig) -> torch.optim.Adam:
    t = config.train
    return torch.optim.Adam(
        model.parameters(),
        lr=0.0,  # set every step by the schedule
        betas=(t.adam_beta1, t.adam_beta2),
        eps=t.adam_eps,
        weight_decay=t.weight_decay,
    )


def train(
    config: RunConfig,
    out_dir: Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Trains a model into ``out_dir`` (see checkpoint.py for its layout).

    Args:
        config: the run's configuration; the model's vocabulary sizes are filled in from the
            tokenizers trained here.
        resume: continue from ``out_dir``'s last checkpoint.
        overwrite: start afresh even if ``out_dir`` already holds a run (otherwise an error).
        progress: show a tqdm progress bar.
    """
    t = config.train
    if t.threads:
        torch.set_num_threads(t.threads)
    data: Prepared = prepare(config, out_dir, resume=resume, overwrite=overwrite)
    config = data.config
    checkpoints = out_dir / "checkpoints"
    log = MetricsLog(out_dir, resume=resume)

    torch.manual_seed(t.seed)
    random.seed(t.seed)
    model = Transformer(config.model)
    optimizer = make_optimizer(model, config)
    step, position, best, elapsed = 0, Position(), math.inf, 0.0
    if resume:
        last = read_index(checkpoints).get("last")
        if last is None:
            raise UserError(f"--resume: {checkpoints} has no checkpoint to resume from")
        state = load_trainer_state(checkpoints / last)
        load_weights(model, checkpoints / last / "model.safetensors")
        optimizer.load_state_dict(state["optimizer"])
        step, best, elapsed = state["step"], state["best_valid_nll"], state["elapsed"]
        position = Position(**state["position"])
        torch.set_rng_state(state["rng_torch"])
        random.setstate(state["rng_python"])
        log.write(event="resume", step=step, checkpoint=last)
    else:
        log.write(
            event="start", **data.stats, parameters=sum(p.numel() for p in model.parameters())
        )

    def trainer_state() -> dict:
        return {
            "step": step,
            "position": {"epoch": position.epoch, "batch": position.batch},
            "optimizer": optimizer.state_dict(),
            "best_valid_nll": best,
            "elapsed": elapsed,
            "rng_torch": torch.get_rng_state(),
            "rng_python": random.getstate(),
        }

    def checkpoint(is_best: bool) -> None:
        name = f"step_{step:08d}"
        save_checkpoint(checkpoints, name, model, config, trainer_state())
        update_index(checkpoints, last=name, **({"best": name} if is_best else {}))
        prune_checkpoints(checkpoints, t.keep_checkpoints)

    factor = schedule_factor(config.model.d_model, t.warmup_steps, t.lr_factor, t.peak_lr)
    stream = batch_stream(data.train, t.max_tokens, t.seed, position)
    limit = f"train, at most {t.max_minutes:g} min" if t.max_minutes else "train"
    bar = tqdm(total=t.max_steps, initial=step, disable=not progress, unit="step", desc=limit,
               dynamic_ncols=True)  # fmt: skip
    meter = Meter()
    started = time.perf_counter() - elapsed
    model.train()
    while not _finished(step, position, t, time.perf_counter() - started):
        step += 1
        lr = inverse_sqrt_lr(step, config.model.d_model, t.warmup_steps, factor)
        set_learning_rate(optimizer, lr)
        batches = []
        for _ in range(t.accumulate):
            position, batch = next(stream)
            batches.append(batch)
        n_tokens = sum(b.n_tokens for b in batches)
        optimizer.zero_grad(set_to_none=True)
        for batch in batches:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=t.bf16):
                logits = model(batch.src, batch.tgt_in)  # (B, T, V)
            sums = label_smoothed_nll(logits, batch.tgt_out, t.label_smoothing)
            if not torch.isfinite(sums.loss):
                _diverged(step, f"loss is {sums.loss.item()}", checkpoints)
            (sums.loss / n_tokens).backward()
            meter.add(sums, batch.n_padded)
        grad_norm = _clip(model, t.clip_norm)
        if not math.isfinite(grad_norm):
            _diverged(step, f"gradient norm is {grad_norm}", checkpoints)
        optimizer.step()
        bar.update(1)

        if step % t.log_every == 0:
            row = {
                "step": step,
                "epoch": position.epoch,
                **meter.summary(),
                "lr": lr,
                "grad_norm": grad_norm,
            }
            log.write(**row)
            bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{row['ppl']:.2f}", lr=f"{lr:.2e}",
                            tok_s=f"{row['tokens_per_s']:.0f}")  # fmt: skip
            meter = Meter()

        done = _finished(step, position, t, time.perf_counter() - started)
        improved = False
        if step % t.validate_every == 0 or done:
            validated = validate(model, data, config)
            improved = validated["valid_nll"] < best
            best = min(best, validated["valid_nll"])
            log.write(step=step, **validated)
            bar.write(_describe(step, validated))
            model.train()
        if step % t.save_every == 0 or done or improved:
            elapsed = time.perf_counter() - started
            checkpoint(is_best=improved)
    bar.close()
    elapsed = time.perf_counter() - started
    log.write(event="end", step=step, seconds=elapsed, best_valid_nll=best)
    log.close()
    return TrainResult(out_dir, step, best, elapsed)


def _finished(step: int, position: Position, t: TrainConfig, seconds: float) -> bool:
    """Whether a limit is reached: steps, complete epochs, or minutes."""
    if step >= t.max_steps:
        return True
    if t.max_epochs and position.epoch >= t.max_epochs:
        return True
    return bool(t.max_minutes) and seconds >= 60 * t.max_minutes


def _clip(model: Transformer, clip_norm: float) -> float:
    """Clips the global gradient norm (if asked) and returns it before clipping."""
    params = [p for p in model.parameters() if p.grad is not None]
    if clip_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, clip_norm))
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])))


def _diverged(step: int, what: str, checkpoints: Path) -> None:
    last = read_index(checkpoints).get("last")
    kept = (
        f"the last good checkpoint is {checkpoints / last}" if last else "no checkpoint was saved"
    )
    raise UserError(f"{what} at step {step}: training stopped; {kept}")


def _describe(step: int, v: dict) -> str:
    parts = [f"step {step}", f"valid loss {v['valid_loss']:.3f}", f"ppl {v['valid_ppl']:.2f}"]
    if "valid_bleu" in v:
        parts += [f"BLEU {v['valid_bleu']:.1f}", f"exact {100 * v['valid_exact']:.1f}%"]
    return " | ".join(parts)
