"""The training loop: reads top to bottom, lives in ``train()``, and resumes exactly.

One update = ``accumulate`` batches of teacher-forced forward passes, label-smoothed
cross-entropy normalised by the number of target tokens (fused with the final linear layer,
chunked_loss.py), backpropagation, gradient clipping, and an AdamW step at the learning rate of
the warmup / inverse-square-root schedule.

Everything a resumed run needs is saved with each checkpoint: weights, optimizer moments, step,
RNG states and the position in the epoch's batch order; so a run stopped at any point (even by
SIGKILL) and resumed ends with the same weights, bit for bit on CPU, as an uninterrupted run.

``train`` prepares (rank 0: lock, validate, tokenizers, binarized data; the other ranks read
what it wrote), then every rank runs the same ``run_job``. Fine-tuning (``train.init_from``)
starts from that model directory's weights with a fresh optimizer and schedule, and validates
once before the first step, so the log shows where it started (step 0).
"""

from __future__ import annotations

import logging
import random
import shlex
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from ..config import RunConfig, TrainConfig
from ..data.batching import example_lengths
from ..device import autocast, grad_scaler, prepare_runtime, resolve_precision
from ..errors import Interrupted, LostContact
from ..files import check_replaceable, remove_tree
from ..model.build import build_model
from ..model_dir import (
    WEIGHTS,
    load_weights,
    resolve_checkpoint,
    save_checkpoint,
    update_index,
)
from .checkpoint import load_trainer_state, prune_checkpoints, resume_point
from .chunked_loss import TrainingLoss
from .distributed import World, finish, init, shard, world_from_env
from .divergence import Divergence
from .loss import impossible_tokens
from .metrics import Meter, MetricsLog, NoLog
from .optimizer import clip_gradients, make_optimizer
from .prepare import Prepared, prepare, save
from .rundir import Destination, RunDir
from .schedule import learning_rate, set_learning_rate
from .signals import StopRequests
from .state import TrainerState, selection_score
from .stream import Position, index_stream
from .validate import validate

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    out_dir: Path
    step: int  # the run's step count at the end
    first_step: int  # where this process started (0, or the step it resumed from)
    best_valid_nll: float
    seconds: float  # of training in total, resumed parts included
    stopped_early: bool = False  # train.patience validations brought no better score

    @property
    def steps_here(self) -> int:
        """Steps this process trained."""
        return self.step - self.first_step


@dataclass
class Job:
    """What every rank needs once the data is prepared."""

    data: Prepared
    out: Destination  # where checkpoints go (rank 0 writes, the others only read)
    saved: tuple[Path, dict] | None  # the checkpoint to resume from and its trainer state
    resume: bool
    progress: bool
    world: World
    device: torch.device


def train(
    config: RunConfig,
    out_dir: Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Trains a model into ``out_dir`` (see rundir.py for its layout), in this process or, when
    started by torchrun, in several (distributed.py).

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
    world = world_from_env()
    threads = torch.get_num_threads()  # runtime.threads applies to this training only
    device = prepare_runtime(config.runtime, world.local_rank)  # before anything is written
    init(world, device, config.runtime.timeout_minutes)
    try:
        if not world.main:  # rank 0 prepares the data; the others use what it wrote
            config, root, folder = world.broadcast(None)
            saved = (folder, load_trainer_state(folder)) if folder is not None else None
            run = RunDir(root)
            data = Prepared.written(config, run)
            return run_job(Job(data, Destination(run, False), saved, resume, False, world, device))
        return _prepare_and_run(config, RunDir(out_dir), resume, overwrite, progress, world, device)
    except (torch.distributed.DistError, RuntimeError) as error:
        if not (world.distributed and _lost_contact(error)):
            raise
        reason = str(error).strip().splitlines()[0].split("] ")[-1]  # gloo's source path cut
        raise LostContact(
            f"lost contact with the other processes of the job ({reason[:160]}); the first "
            f"rank that failed says why, and runtime.timeout_minutes="
            f"{config.runtime.timeout_minutes:g} bounds the wait"
        ) from error
    finally:
        finish(world)
        torch.set_num_threads(threads)


def _lost_contact(error: BaseException) -> bool:
    """Whether ``error`` says another process stopped answering (rather than being a bug)."""
    if isinstance(error, torch.distributed.DistError):
        return True
    text = str(error)
    return any(word in text for word in ("gloo", "NCCL", "Timed out", "Connection closed"))


def _prepare_and_run(
    config: RunConfig, run: RunDir, resume: bool, overwrite: bool, progress: bool,
    world: World, device: torch.device,
) -> TrainResult:  # fmt: skip
    """Rank 0: under the run's lock, validate and prepare everything, then train."""
    check_replaceable(run.root, "run")  # before the lock file: OUT may lie inside another run
    with run.locked():
        run.recover()
        run.check_start(resume, overwrite)
        try:
            data = prepare(config, run, resume)
        except BaseException:
            remove_tree(run.scratch, owner=run.root)  # a half-made training set
            raise
        saved = resume_point(run.checkpoints) if resume else None
        out = run.destination(resume)
        try:
            if resume:
                run.adopt_data(run.scratch)  # a training set made again for this run
            else:
                save(data, out.current, run.scratch)
            world.broadcast((data.config, out.current.root, saved[0] if saved else None))
            return run_job(Job(data, out, saved, resume, progress, world, device))
        finally:
            out.discard()  # stopped before its first checkpoint: the old run stays


def run_job(job: Job) -> TrainResult:
    """The loop itself, the same on every rank; only rank 0 writes."""
    data, world, device = job.data, job.world, job.device
    config, t, runtime = data.config, data.config.train, data.config.runtime
    # The hardware, chosen once (device.py): device, precision, scaler, compile, DDP.
    precision, why = resolve_precision(runtime.precision, device, config.model.d_model)
    scaler = grad_scaler(device, precision)
    torch.manual_seed(t.seed)
    random.seed(t.seed)
    model = build_model(config.model).to(device)  # the Transformer, or the RNN (model/build.py)
    if job.saved is None and t.init_from:  # fine-tuning: the starting model's weights
        load_weights(model, resolve_checkpoint(Path(t.init_from)) / WEIGHTS)
    if world.distributed:
        torch.manual_seed(t.seed + 1000 * world.rank)  # each rank its own dropout masks
    optimizer = make_optimizer(model, t)
    log_file = (MetricsLog(job.out.current.metrics, job.out.current.tensorboard, job.resume)
                if world.main else NoLog())  # fmt: skip
    state = TrainerState()
    if job.saved is not None:
        folder, trainer = job.saved
        load_weights(model, folder / WEIGHTS)
        state = TrainerState.restore(trainer, optimizer, scaler, world)
        log_file.write(event="resume", step=state.step, checkpoint=folder.name,
                       precision=precision, precision_reason=why)  # fmt: skip
    else:
        parameters = sum(p.numel() for p in model.parameters())
        log_file.write(event="start", **data.stats, parameters=parameters, device=str(device),
                       world_size=world.size, precision=precision,
                       precision_reason=why)  # fmt: skip
    # Never-produced ids (an imported model's padding row), left out of label smoothing: read
    # from the weights once they are loaded, from --init_from or from the checkpoint resumed.
    with_loss = TrainingLoss(model, t.label_smoothing, runtime.loss_chunk, impossible_tokens(model),
                             compile=runtime.compile)  # fmt: skip
    forward = DDP(with_loss, device_ids=[device] if device.type == "cuda" else None) if (
        world.distributed) else with_loss  # fmt: skip
    first_step = state.step
    watch = Divergence(device, check_grad_norm=not scaler.is_enabled())

    def checkpoint(is_best: bool) -> Path:
        watch.check(job.out.current.checkpoints, world)  # never save weights a NaN has reached
        name = f"step_{state.step:08d}"
        trainer = state.to_dict(optimizer, scaler, world)  # every rank's random state
        if world.main:
            checkpoints = job.out.current.checkpoints
            save_checkpoint(checkpoints, name, model, config, trainer)
            update_index(checkpoints, last=name, **({"best": name} if is_best else {}))
            job.out.checkpoint_saved()  # an --overwrite run now replaces the old one
            prune_checkpoints(job.out.current.checkpoints, t.keep_checkpoints)
        world.barrier()  # the others wait for the checkpoint
        return job.out.current.checkpoints / name

    stream = index_stream(data.train, t.max_tokens, t.seed, state.position)
    target_lengths = example_lengths(data.train)[1]  # decoder-input lengths: tokens per batch
    limit = f"train, at most {t.max_minutes:g} min" if t.max_minutes else "train"
    # A progress bar on a terminal; elsewhere (CI, a log file) a plain line at every log step,
    # not a stream of carriage returns.
    show_bar = job.progress and world.main and sys.stderr.isatty()
    plain_lines = job.progress and world.main and not show_bar
    bar = tqdm(total=t.max_steps, initial=state.step, disable=not show_bar, unit="step",
               desc=limit, dynamic_ncols=True)  # fmt: skip
    if runtime.precision == "auto" and world.main:
        bar.write(why)  # what auto chose, on the console as in metrics.jsonl
    meter = Meter(device)
    if job.saved is None and t.init_from and world.main:  # where fine-tuning starts: step 0
        validated = validate(model, data, config)
        log_file.write(step=0, **validated)
        bar.write(_describe(0, validated))
    started = time.perf_counter() - state.elapsed
    model.train()
    with StopRequests() as stop:
        while not (
            _finished(state.step, state.position, t, time.perf_counter() - started)
            or _out_of_patience(state, t)  # a resumed run that had stopped early stays stopped
        ):
            state.step += 1
            lr = learning_rate(state.step, time.perf_counter() - started, model.width, t)
            set_learning_rate(optimizer, lr)
            group = []  # the step's batches, the same on every rank
            for _ in range(t.accumulate * world.size):
                state.position, indices = next(stream)
                group.append(indices)
            # The step's target tokens, counted on the CPU (no device sync), over every rank.
            n_tokens = sum(int(target_lengths[indices].sum()) for indices in group)
            optimizer.zero_grad(set_to_none=True)
            mine = shard(group, world)
            for j, indices in enumerate(mine):
                batch = data.train.batch(indices).to(device)
                last = j == len(mine) - 1  # DDP averages the gradients after the last one only
                with nullcontext() if last or not world.distributed else forward.no_sync():
                    with autocast(device, precision):
                        sums = forward(batch.src, batch.tgt_in, batch.tgt_out)
                    scaler.scale(sums.loss * world.size / n_tokens).backward()
                watch.loss(state.step, sums.loss)
                meter.add(sums, batch.n_padded)
            scaler.unscale_(optimizer)
            grad_norm = clip_gradients(model, t.clip_norm)  # a tensor: read at log steps only
            watch.grad_norm(state.step, grad_norm)
            scaler.step(optimizer)
            scaler.update()
            bar.update(1)

            if state.step % t.log_every == 0:
                watch.check(job.out.current.checkpoints, world)
                row = {"step": state.step, "epoch": state.position.epoch,
                       **meter.summary(world), "lr": lr, "grad_norm": float(grad_norm)}  # fmt: skip
                log_file.write(**row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", ppl=f"{row['ppl']:.2f}",
                                lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}")  # fmt: skip
                if plain_lines:
                    bar.write(f"step {state.step}/{t.max_steps} | loss {row['loss']:.3f} | "
                              f"ppl {row['ppl']:.2f} | lr {lr:.2e} | "
                              f"{row['tokens_per_s']:,.0f} tokens/s")  # fmt: skip
                meter = Meter(device)

            done = _finished(state.step, state.position, t, time.perf_counter() - started)
            done = world.any(done, device)  # a time limit: every rank stops at the same step
            stopping = world.any(stop.requested, device)
            improved = False
            if state.step % t.validate_every == 0 or done:
                watch.check(job.out.current.checkpoints, world)
                if world.main:
                    validated = validate(model, data, config)
                    score = selection_score(validated, t.best_metric)
                    improved = score >= state.best_score  # ties: the later checkpoint
                    # Patience counts validations without a strictly better score (fairseq's
                    # --patience does the same); a tie still moves `best` to the later one.
                    better = score > state.best_score
                    state.stale_validations = 0 if better else state.stale_validations + 1
                    state.best_score = max(state.best_score, score)
                    state.best_valid_nll = min(state.best_valid_nll, validated["valid_nll"])
                    log_file.write(step=state.step, **validated)
                    bar.write(_describe(state.step, validated))
                    if _out_of_patience(state, t):
                        log_file.write(
                            event="early_stop",
                            step=state.step,
                            patience=t.patience,
                            best_metric=t.best_metric,
                            best_score=state.best_score,
                        )
                        bar.write(
                            f"step {state.step}: no better {t.best_metric} in "
                            f"{t.patience} validations; stopping early (train.patience)"
                        )
                    model.train()
                improved, state.stale_validations = world.broadcast(
                    (improved, state.stale_validations)
                )
                done = done or _out_of_patience(state, t)
            if state.step % t.save_every == 0 or done or improved or stopping:
                state.elapsed = time.perf_counter() - started
                saved_to = checkpoint(is_best=improved)
            if stopping:
                bar.close()
                log_file.write(event="interrupted", step=state.step, signal=stop.name)
                log_file.close()
                raise Interrupted(
                    f"{stop.name} at step {state.step}: saved {saved_to}; continue with: "
                    f"transformer train --out {shlex.quote(str(job.out.run.root))} --resume",
                    128 + (stop.signum or signal.SIGTERM),
                )
    bar.close()
    state.elapsed = time.perf_counter() - started
    log_file.write(event="end", step=state.step, seconds=state.elapsed,
                   best_valid_nll=state.best_valid_nll)  # fmt: skip
    log_file.close()
    return TrainResult(job.out.run.root, state.step, first_step, state.best_valid_nll,
                       state.elapsed, _out_of_patience(state, t))  # fmt: skip


def _out_of_patience(state: TrainerState, t: TrainConfig) -> bool:
    """Whether ``train.patience`` validations in a row brought no better score."""
    return bool(t.patience) and state.stale_validations >= t.patience


def _finished(step: int, position: Position, t: TrainConfig, seconds: float) -> bool:
    """Whether a limit is reached: steps, complete epochs, or minutes."""
    if step >= t.max_steps:
        return True
    if t.max_epochs and position.epoch >= t.max_epochs:
        return True
    return bool(t.max_minutes) and seconds >= 60 * t.max_minutes


def _describe(step: int, v: dict) -> str:
    parts = [f"step {step}", f"valid loss {v['valid_loss']:.3f}", f"ppl {v['valid_ppl']:.2f}"]
    if "valid_bleu" in v:
        parts.append(f"BLEU {v['valid_bleu']:.1f}")
    if "valid_exact" in v:
        parts.append(f"exact {100 * v['valid_exact']:.1f}%")
    return " | ".join(parts)
