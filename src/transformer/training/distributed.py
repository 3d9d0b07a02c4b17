"""Several processes training one model: who is who, and how they stay in step.

``torchrun --nproc_per_node=N -m transformer train ...`` starts N copies of the same command;
each learns its place from the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK), so
the user's config does not change. The processes talk through gloo on CPUs and NCCL on GPUs,
and every collective has a timeout (``runtime.timeout_minutes``): a process that dies or
hangs makes the others fail instead of waiting forever, and torchrun ends the job with the
failed rank's exit code.

Rank 0 prepares the data, logs, validates and writes checkpoints; the others wait for it at a
barrier. Each optimizer step reads ``world_size × accumulate`` batches of one global stream,
the same on every rank (it depends only on the seed and the epoch): rank r trains on every
world_size-th of them (``shard``). Each rank divides its loss by the global number of target
tokens and multiplies it by world_size, so that DDP's average of the gradients is exactly the
gradient of one process that saw every batch of the step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


class PeerLost(Exception):
    """Another process of the job stopped answering while this one waited for it (it crashed or
    was killed, or a collective timed out); the error that said so is its ``__cause__``."""


@dataclass(frozen=True)
class World:
    """This process's place among the processes of one training (one process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """Whether this process logs, validates and writes (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.size}"

    @contextmanager
    def talking(self) -> Iterator[None]:
        """A block that waits for the other processes (a collective, DDP's gradient all-reduce
        in ``backward``). gloo and NCCL report a rank that died or timed out as a RuntimeError
        (``torch.distributed.DistError`` is one), so one raised here is ``PeerLost``; running out
        of memory is still itself."""
        if not self.distributed:
            yield
            return
        try:
            yield
        except torch.OutOfMemoryError:
            raise
        except RuntimeError as error:
            raise PeerLost(str(error)) from error

    def barrier(self) -> None:
        if self.distributed:
            with self.talking():
                dist.barrier()

    def broadcast(self, value: T) -> T:
        """Rank 0's ``value``, on every rank (any picklable object)."""
        if not self.distributed:
            return value
        box = [value]
        with self.talking():
            dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if not self.distributed:
            return [value]
        values: list[Any] = [None] * self.size
        with self.talking():
            dist.all_gather_object(values, value)
        return values

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` is true on any rank (so that all ranks stop at the same step)."""
        if not self.distributed:
            return flag
        tensor = torch.tensor([int(flag)], device=device)
        with self.talking():
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return bool(tensor.item())

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum of ``tensor`` over the ranks (a new tensor)."""
        if not self.distributed:
            return tensor
        total = tensor.clone()
        with self.talking():
            dist.all_reduce(total)
        return total


def world_from_env() -> World:
    """The world torchrun describes in the environment, or a single process."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return World()
    return World(
        int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
        int(os.environ.get("LOCAL_RANK", 0)),
    )  # fmt: skip


def init(world: World, device: torch.device, timeout_minutes: float) -> None:
    """Joins the process group: NCCL on GPUs, gloo on CPUs, collectives time out."""
    if not world.distributed or dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timedelta(minutes=timeout_minutes),
                            device_id=device if device.type == "cuda" else None)  # fmt: skip


def finish(world: World) -> None:
    """Leaves the process group (at the end of training)."""
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def shard(group: list[T], world: World) -> list[T]:
    """This rank's share of one step's batches: every world.size-th, starting at its rank."""
    return group[world.rank :: world.size]
