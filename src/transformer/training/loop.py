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

``run_job`` is the loop, top to bottom; ``_build`` makes what it trains with (hardware, model,
optimizer, log), ``_update`` is one optimizer step, ``_validate`` and ``_checkpoint`` are what
happens at their intervals. A process that stops answering ends the job with one line
(``LostContact``): the collectives say so by raising ``distributed.PeerLost``.
"""

from __future__ import annotations

import logging
import math
import random
import shlex
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from ..config import RunConfig, TrainConfig
from ..data.batching import example_lengths
from ..device import autocast, grad_scaler, prepare_runtime, resolve_precision
from ..errors import Interrupted, LostContact
from ..files import check_replaceable, remove_tree
from ..model.base import EncoderDecoder
from ..model.build import build_model
from ..model_dir.checkpoints import (
    load_trainer_state,
    prune_checkpoints,
    resolve_checkpoint,
    resume_point,
    save_checkpoint,
    update_index,
)
from ..model_dir.layout import TRAINER, WEIGHTS, step_name
from ..model_dir.runs import Destination, RunDir
from ..model_dir.weights import load_weights
from .chunked_loss import TrainingLoss
from .distributed import PeerLost, World, finish, init, shard, world_from_env
from .divergence import Divergence, diverged
from .loss import impossible_tokens
from .metrics import Meter, MetricsLog, NoLog
from .optimizer import clip_gradients, make_optimizer
from .prepare import Prepared, prepare, save
from .progress import Progress
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
    out_dir: Path | str,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    made_by: str = "train",
) -> TrainResult:
    """Trains a model into ``out_dir`` (a run's folder: ``model_dir/runs.py``), in this process
    or, when started by torchrun, in several (distributed.py).

    Nothing the user has is lost: ``out_dir`` is locked against a second training, everything
    is validated before anything is written, and ``overwrite`` keeps the old run until the new
    one has its first checkpoint.

    Args:
        config: the run's configuration (vocabulary sizes: the tokenizers trained here).
        resume: continue from ``out_dir``'s newest intact checkpoint (from step 0 with the
            saved config and tokenizers if it stopped before its first checkpoint).
        overwrite: start afresh even if ``out_dir`` already holds a run (otherwise an error).
        progress: show a tqdm progress bar.
        made_by: what a new run's marker says made it ("demo": a run the demo may replace).
    """
    if not isinstance(config, RunConfig):  # a dict stopped inside with an AttributeError
        raise TypeError(f"config must be a RunConfig (transformer.config.build_config makes one "
                        f"from a dict, load_config from a YAML file), got "
                        f"{type(config).__name__}")  # fmt: skip
    out_dir = Path(out_dir)
    world = world_from_env()
    threads = torch.get_num_threads()  # runtime.threads applies to this training only
    device = prepare_runtime(config.runtime, world.local_rank)  # before anything is written
    init(world, device, config.runtime.timeout_minutes)
    try:
        if not world.main:  # rank 0 prepares the data; the others use what it wrote
            config, root, folder = world.broadcast(None)
            saved = (folder, load_trainer_state(folder)) if folder is not None else None
            run = RunDir(root)
            result = run_job(Job(Prepared.written(config, run), Destination(run, False), saved,
                                 resume, False, world, device))  # fmt: skip
        else:
            result = _prepare_and_run(config, RunDir(out_dir), resume, overwrite, progress, world,
                                      device, made_by)  # fmt: skip
        world.barrier()  # all leave together, after rank 0's last write: no half-closed links
        return result
    except (PeerLost, torch.distributed.DistError) as error:
        cause = error.__cause__ or error  # what gloo or NCCL said
        reason = str(cause).strip().splitlines()[0].split("] ")[-1]  # gloo's source path cut
        raise LostContact(
            f"lost contact with the other processes of the job ({reason[:160]}); the first "
            f"rank that failed says why, and runtime.timeout_minutes="
            f"{config.runtime.timeout_minutes:g} bounds the wait"
        ) from error
    finally:
        finish(world)
        torch.set_num_threads(threads)


def _prepare_and_run(
    config: RunConfig, run: RunDir, resume: bool, overwrite: bool, progress: bool,
    world: World, device: torch.device, made_by: str,
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
        out = run.destination(resume, data.config.to_dict())
        try:
            if resume:
                run.adopt_data(run.scratch)  # a training set made again for this run
            else:
                save(data, out, run.scratch, made_by)
            world.broadcast((data.config, out.current.root, saved[0] if saved else None))
            return run_job(Job(data, out, saved, resume, progress, world, device))
        finally:
            out.discard()  # stopped before its first checkpoint: the old run stays


def run_job(job: Job) -> TrainResult:
    """The loop itself, the same on every rank; only rank 0 writes."""
    data, world, device = job.data, job.world, job.device
    config, t = data.config, data.config.train
    p = _build(job)
    state = p.state
    first_step = state.step
    stream = index_stream(data.train, t.max_tokens, t.seed, state.position)
    target_lengths = example_lengths(data.train)[1]  # decoder-input lengths: tokens per batch
    console = Progress(t, state.step, job.progress and world.main)
    if config.runtime.precision == "auto" and world.main:
        console.say(p.why)  # what auto chose, on the console as in metrics.jsonl
    if job.saved is None and t.init_from and world.main:  # where fine-tuning starts: step 0
        validated = validate(p.model, data, config)
        p.log.write(step=0, **validated)
        console.validated(0, validated)
    meter = Meter(device)
    started = time.perf_counter() - state.elapsed
    p.model.train()
    with StopRequests() as stop:
        # A new run takes its first step whatever its time limit: a run without a checkpoint
        # would be no model at all.
        while state.step == 0 or not (
            _finished(state.step, state.position, t, time.perf_counter() - started)
            or _out_of_patience(state, t)  # a resumed run that had stopped early stays stopped
        ):
            state.step += 1
            lr = learning_rate(state.step, time.perf_counter() - started, p.model.width, t)
            set_learning_rate(p.optimizer, lr)
            group = []  # the step's batches, the same on every rank
            for _ in range(t.accumulate * world.size):
                state.position, indices = next(stream)
                group.append(indices)
            # The step's target tokens, counted on the CPU (no device sync), over every rank.
            n_tokens = sum(int(target_lengths[indices].sum()) for indices in group)
            grad_norm = _update(job, p, shard(group, world), n_tokens, meter)
            console.stepped()
            if state.step % t.log_every == 0:
                p.watch.check(job.out.current.checkpoints, world)
                row = {"step": state.step, "epoch": state.position.epoch,
                       **meter.summary(world), "lr": lr, "grad_norm": float(grad_norm)}  # fmt: skip
                p.log.write(**row)
                console.logged(row, lr)
                meter = Meter(device)

            done = _finished(state.step, state.position, t, time.perf_counter() - started)
            done = world.any(done, device)  # a time limit: every rank stops at the same step
            stopping = world.any(stop.requested, device)
            improved = False
            if state.step % t.validate_every == 0 or done:
                improved = _validate(job, p, console)
                done = done or _out_of_patience(state, t)
            if state.step % t.save_every == 0 or done or improved or stopping:
                state.elapsed = time.perf_counter() - started
                saved_to = _checkpoint(job, p, is_best=improved)
            if stopping:
                console.close()
                p.log.write(event="interrupted", step=state.step, signal=stop.name)
                p.log.close()
                raise Interrupted(
                    f"{stop.name} at step {state.step}: saved {saved_to}; continue with: "
                    f"transformer train --out {shlex.quote(str(job.out.run.root))} --resume",
                    128 + (stop.signum or signal.SIGTERM),
                )
    console.close()
    state.elapsed = time.perf_counter() - started
    p.log.write(event="end", step=state.step, seconds=state.elapsed,
                best_valid_nll=state.best_valid_nll)  # fmt: skip
    p.log.close()
    return TrainResult(job.out.run.root, state.step, first_step, state.best_valid_nll,
                       state.elapsed, _out_of_patience(state, t))  # fmt: skip


@dataclass
class Parts:
    """What the loop trains with, made once by ``_build``."""

    model: EncoderDecoder
    forward: torch.nn.Module  # the loss fused with the output layer, under DDP when distributed
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    precision: str
    why: str  # why that precision (what runtime.precision auto chose)
    state: TrainerState
    log: MetricsLog | NoLog
    watch: Divergence  # NaN and infinity in the loss and the gradients


def _build(job: Job) -> Parts:
    """The hardware, chosen once (device.py: precision, scaler, compile, DDP), the model (its
    starting weights: fine-tuning's, or the checkpoint resumed), the optimizer and the log."""
    data, world, device = job.data, job.world, job.device
    config, t, runtime = data.config, data.config.train, data.config.runtime
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
        state = TrainerState.restore(trainer, optimizer, scaler, world, folder / TRAINER)
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
    # No broadcast of buffers at every forward: the model's only buffers are the sinusoidal
    # position tables, the same on every rank, and that broadcast was a collective outside
    # ``world.talking()`` (a rank that hung during it ended rank 0 with a traceback).
    forward = DDP(with_loss, device_ids=[device] if device.type == "cuda" else None,
                  broadcast_buffers=False) if world.distributed else with_loss  # fmt: skip
    watch = Divergence(device, check_grad_norm=not scaler.is_enabled())
    return Parts(model, forward, optimizer, scaler, precision, why, state, log_file, watch)


def _update(job: Job, p: Parts, mine: list, n_tokens: int, meter: Meter) -> torch.Tensor:
    """One optimizer step: forward and backward over this rank's batches (``mine``), the loss
    divided by the step's target tokens on every rank, then clipping and AdamW. Returns the
    gradient norm (a tensor: read at log steps only)."""
    world, device, t = job.world, job.device, job.data.config.train
    p.optimizer.zero_grad(set_to_none=True)
    for j, indices in enumerate(mine):
        batch = job.data.train.batch(indices).to(device)
        last = j == len(mine) - 1  # DDP averages the gradients after the last one only
        with nullcontext() if last or not world.distributed else p.forward.no_sync():
            with autocast(device, p.precision):
                sums = p.forward(batch.src, batch.tgt_in, batch.tgt_out)
            with world.talking():  # DDP's all-reduce waits for the other ranks
                p.scaler.scale(sums.loss * world.size / n_tokens).backward()
        p.watch.loss(p.state.step, sums.loss)
        meter.add(sums, batch.n_padded)
    p.scaler.unscale_(p.optimizer)
    grad_norm = clip_gradients(p.model, t.clip_norm)
    p.watch.grad_norm(p.state.step, grad_norm)
    p.scaler.step(p.optimizer)
    p.scaler.update()
    return grad_norm


def _validate(job: Job, p: Parts, console: Progress) -> bool:
    """Rank 0 validates and keeps the score (the best, patience); every rank learns whether it
    improved, which makes this step's checkpoint the best."""
    config, t, state, world = job.data.config, job.data.config.train, p.state, job.world
    p.watch.weights(state.step, p.model)
    p.watch.check(job.out.current.checkpoints, world)
    improved, lost = False, None
    if world.main:
        validated = validate(p.model, job.data, config)
        lost = None if math.isfinite(validated["valid_nll"]) else validated["valid_nll"]
        score = selection_score(validated, t.best_metric)
        improved = score >= state.best_score  # ties: the later checkpoint
        # Patience counts validations without a strictly better score (fairseq's --patience
        # does the same); a tie still moves `best` to the later one.
        better = score > state.best_score
        state.stale_validations = 0 if better else state.stale_validations + 1
        state.best_score = max(state.best_score, score)
        state.best_valid_nll = min(state.best_valid_nll, validated["valid_nll"])
        p.log.write(step=state.step, **validated)
        console.validated(state.step, validated)
        if _out_of_patience(state, t):
            p.log.write(event="early_stop", step=state.step, patience=t.patience,
                        best_metric=t.best_metric, best_score=state.best_score)  # fmt: skip
            console.say(f"step {state.step}: no better {t.best_metric} in {t.patience} "
                        "validations; stopping early (train.patience)")  # fmt: skip
        p.model.train()
    improved, state.stale_validations, lost = world.broadcast(
        (improved, state.stale_validations, lost)
    )
    if lost is not None:  # weights grown too large to compute with, though finite
        diverged(state.step, f"the validation loss is {lost}", job.out.current.checkpoints)
    return improved


def _checkpoint(job: Job, p: Parts, is_best: bool) -> Path:
    """Saves this step's checkpoint (rank 0), points the index at it, prunes the oldest."""
    world, state, checkpoints = job.world, p.state, job.out.current.checkpoints
    p.watch.weights(state.step, p.model)
    p.watch.check(checkpoints, world)  # never save weights a NaN has reached
    name = step_name(state.step)
    trainer = state.to_dict(p.optimizer, p.scaler, world)  # every rank's random state
    if world.main:
        save_checkpoint(checkpoints, name, p.model, job.data.config, trainer)
        update_index(checkpoints, last=name, **({"best": name} if is_best else {}))
        job.out.checkpoint_saved()  # an --overwrite run now replaces the old one
        prune_checkpoints(job.out.current.checkpoints, job.data.config.train.keep_checkpoints)
    world.barrier()  # the others wait for the checkpoint
    return job.out.current.checkpoints / name


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
