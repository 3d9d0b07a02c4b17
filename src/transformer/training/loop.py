"""The training loop: reads top to bottom, lives in ``train()``, and resumes exactly.

One update = ``accumulate`` batches of teacher-forced forward passes, label-smoothed
cross-entropy normalised by the number of target tokens, backpropagation, gradient clipping,
and an AdamW step at the learning rate of the warmup / inverse-square-root schedule.

Everything a resumed run needs is saved with each checkpoint: weights, optimizer moments, step,
RNG states and the position in the epoch's batch order; so a run stopped at any point (even by
SIGKILL) and resumed ends with the same weights, bit for bit on CPU, as an uninterrupted run.
"""

from __future__ import annotations

import logging
import random
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from ..config import RunConfig, TrainConfig
from ..device import autocast, grad_scaler, prepare_runtime, resolve_device
from ..errors import Interrupted, UserError
from ..model.transformer import Transformer
from .checkpoint import (
    WEIGHTS,
    load_trainer_state,
    load_weights,
    prune_checkpoints,
    read_index,
    read_weights,
    resume_candidates,
    save_checkpoint,
    update_index,
)
from .loss import label_smoothed_nll
from .metrics import MetricsLog
from .optimizer import clip_gradients, make_optimizer
from .prepare import Prepared, prepare, save
from .rundir import RunDir
from .schedule import (
    cooldown,
    inverse_sqrt_lr,
    run_progress,
    schedule_factor,
    set_learning_rate,
)
from .signals import StopRequests
from .state import Meter, Position, TrainerState, batch_stream, selection_score
from .validate import validate

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_valid_nll: float
    seconds: float


def train(
    config: RunConfig,
    out_dir: Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Trains a model into ``out_dir`` (see rundir.py for its layout).

    Nothing the user has is lost: ``out_dir`` is locked against a second training, everything
    is validated before anything is written, and ``overwrite`` keeps the old run until the new
    one has its first checkpoint.

    Args:
        config: the run's configuration; the model's vocabulary sizes are filled in from the
            tokenizers trained here.
        resume: continue from ``out_dir``'s newest intact checkpoint (from step 0 with the
            saved config and tokenizers if it stopped before its first checkpoint).
        overwrite: start afresh even if ``out_dir`` already holds a run (otherwise an error).
        progress: show a tqdm progress bar.
    """
    resolve_device(config.runtime.device)  # no CUDA where CUDA is asked for: say so, write nothing
    run = RunDir(out_dir)
    with run.locked():
        run.recover()
        run.check_start(resume, overwrite)
        data = prepare(config, run, resume)
        saved = _resume_point(run) if resume else None
        target = run.staging() if run.has_run() and not resume else run
        try:
            if not resume:
                save(data, target)
            return _train(data, run, target, saved, resume, progress)
        finally:
            if target is not run:  # stopped before its first checkpoint: the old run stays
                shutil.rmtree(target.root, ignore_errors=True)


def _resume_point(run: RunDir) -> tuple[Path, dict] | None:
    """The newest checkpoint whose files all load, and its trainer state; damaged ones are
    skipped with a warning. None: the run has no checkpoint yet (it starts from step 0)."""
    candidates = resume_candidates(run.checkpoints) if run.checkpoints.exists() else []
    if not candidates:
        log.warning(f"{run.root} has no checkpoint yet: starting again from step 0 with its "
                    "saved config")  # fmt: skip
        return None
    problems = []
    for folder in candidates:
        try:
            state = load_trainer_state(folder)
            read_weights(folder / WEIGHTS)
        except UserError as error:
            problems.append(str(error))
            log.warning(f"{error}; trying an older checkpoint")
            continue
        if problems:
            log.warning(f"resuming from {folder}, the newest intact checkpoint")
        return folder, state
    raise UserError(f"--resume: no checkpoint in {run.checkpoints} is intact: {problems[0]}")


def _train(
    data: Prepared,
    run: RunDir,
    target: RunDir,
    saved: tuple[Path, dict] | None,
    resume: bool,
    progress: bool,
) -> TrainResult:
    """The loop itself, writing into ``target`` (``run`` itself, or its staging folder until the
    first checkpoint is saved)."""
    config, t, runtime = data.config, data.config.train, data.config.runtime
    # The hardware, chosen once (device.py): device, precision, scaler, compile.
    device = prepare_runtime(runtime)
    scaler = grad_scaler(device, runtime.precision)
    torch.manual_seed(t.seed)
    random.seed(t.seed)
    model = Transformer(config.model).to(device)
    forward = torch.compile(model, dynamic=True) if runtime.compile else model
    optimizer = make_optimizer(model, t)
    log_file = MetricsLog(target.metrics, target.tensorboard, resume=resume)
    state = TrainerState()
    if saved is not None:
        folder, trainer = saved
        load_weights(model, folder / WEIGHTS)
        state = TrainerState.restore(trainer, optimizer, scaler)
        log_file.write(event="resume", step=state.step, checkpoint=folder.name)
    else:
        parameters = sum(p.numel() for p in model.parameters())
        log_file.write(event="start", **data.stats, parameters=parameters, device=str(device))
    watch = Divergence(device, check_grad_norm=not scaler.is_enabled())

    def checkpoint(is_best: bool) -> Path:
        nonlocal target
        watch.check(target.checkpoints)  # never save weights that a NaN has reached
        name = f"step_{state.step:08d}"
        trainer = state.to_dict(optimizer, scaler)
        save_checkpoint(target.checkpoints, name, model, config, trainer)
        update_index(target.checkpoints, last=name, **({"best": name} if is_best else {}))
        if target is not run:  # the new run has a checkpoint: now it may replace the old one
            run.adopt(target)
            target = run
        prune_checkpoints(target.checkpoints, t.keep_checkpoints)
        return target.checkpoints / name

    factor = schedule_factor(config.model.d_model, t.warmup_steps, t.lr_factor, t.peak_lr)
    stream = batch_stream(data.train, t.max_tokens, t.seed, state.position)
    limit = f"train, at most {t.max_minutes:g} min" if t.max_minutes else "train"
    bar = tqdm(total=t.max_steps, initial=state.step, disable=not progress, unit="step",
               desc=limit, dynamic_ncols=True)  # fmt: skip
    meter = Meter(device)
    started = time.perf_counter() - state.elapsed
    model.train()
    with StopRequests() as stop:
        while not _finished(state.step, state.position, t, time.perf_counter() - started):
            state.step += 1
            lr = inverse_sqrt_lr(state.step, config.model.d_model, t.warmup_steps, factor)
            seconds = time.perf_counter() - started
            lr *= cooldown(
                run_progress(state.step, seconds, t.max_steps, t.max_minutes), t.cooldown
            )
            set_learning_rate(optimizer, lr)
            batches = []
            for _ in range(t.accumulate):
                state.position, batch = next(stream)
                batches.append(batch)
            n_tokens = sum(b.n_tokens for b in batches)  # counted on the CPU: no device sync
            optimizer.zero_grad(set_to_none=True)
            for batch in batches:
                batch = batch.to(device)
                with autocast(device, runtime.precision):
                    logits = forward(batch.src, batch.tgt_in)  # (B, T, V)
                    sums = label_smoothed_nll(logits, batch.tgt_out, t.label_smoothing)
                watch.loss(state.step, sums.loss)
                scaler.scale(sums.loss / n_tokens).backward()
                meter.add(sums, batch.n_padded)
            scaler.unscale_(optimizer)
            grad_norm = clip_gradients(model, t.clip_norm)  # a tensor: read at log steps only
            watch.grad_norm(state.step, grad_norm)
            scaler.step(optimizer)
            scaler.update()
            bar.update(1)

            if state.step % t.log_every == 0:
                watch.check(target.checkpoints)
                row = {"step": state.step, "epoch": state.position.epoch, **meter.summary(),
                       "lr": lr, "grad_norm": float(grad_norm)}  # fmt: skip
                log_file.write(**row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{row['ppl']:.2f}",
                                lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}")  # fmt: skip
                meter = Meter(device)

            done = _finished(state.step, state.position, t, time.perf_counter() - started)
            improved = False
            if state.step % t.validate_every == 0 or done:
                watch.check(target.checkpoints)
                validated = validate(model, data, config)
                score = selection_score(validated, t.best_metric)
                improved = score >= state.best_score  # ties: the later checkpoint
                state.best_score = max(state.best_score, score)
                state.best_valid_nll = min(state.best_valid_nll, validated["valid_nll"])
                log_file.write(step=state.step, **validated)
                bar.write(_describe(state.step, validated))
                model.train()
            if state.step % t.save_every == 0 or done or improved or stop.requested:
                state.elapsed = time.perf_counter() - started
                saved_to = checkpoint(is_best=improved)
            if stop.requested:
                bar.close()
                log_file.write(event="interrupted", step=state.step, signal=stop.name)
                log_file.close()
                raise Interrupted(
                    f"{stop.name} at step {state.step}: saved {saved_to}; continue with: "
                    f"transformer train --out {shlex.quote(str(run.root))} --resume",
                    128 + stop.signum,
                )
    bar.close()
    state.elapsed = time.perf_counter() - started
    log_file.write(event="end", step=state.step, seconds=state.elapsed,
                   best_valid_nll=state.best_valid_nll)  # fmt: skip
    log_file.close()
    return TrainResult(run.root, state.step, state.best_valid_nll, state.elapsed)


class Divergence:
    """Watches for a non-finite loss or gradient norm without stopping the device every step:
    the first bad step is kept on the device and read at log, validation and save points, so a
    NaN never reaches a saved checkpoint. (With fp16 the GradScaler skips steps with infinite
    gradients itself, so only the loss is watched.)"""

    def __init__(self, device: torch.device, check_grad_norm: bool) -> None:
        self.check_grad_norm = check_grad_norm
        self.first = torch.zeros((), dtype=torch.long, device=device)  # 0: none yet
        self.what = torch.zeros((), dtype=torch.long, device=device)  # 1: loss, 2: grad norm
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

    def check(self, checkpoints: Path) -> None:
        """Stops training (UserError) if a step went bad, naming it and the last good checkpoint."""
        step = int(self.first)
        if step:
            what = "loss" if int(self.what) == 1 else "gradient norm"
            _diverged(step, f"{what} is {float(self.value)}", checkpoints)


def _finished(step: int, position: Position, t: TrainConfig, seconds: float) -> bool:
    """Whether a limit is reached: steps, complete epochs, or minutes."""
    if step >= t.max_steps:
        return True
    if t.max_epochs and position.epoch >= t.max_epochs:
        return True
    return bool(t.max_minutes) and seconds >= 60 * t.max_minutes


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
