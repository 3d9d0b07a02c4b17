"""Where and how the computation runs: device, precision, compile, threads."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadValue
from .checks import check_finite, check_ranges, check_types, ranged

PRECISIONS = ("fp32", "bf16", "fp16", "auto")


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how the computation runs (device.py). Not part of the model: a run may change
    it when resumed, and translate / evaluate take it from the command line, not the checkpoint."""

    device: str = "auto"
    """auto (CUDA when there is a GPU, else the CPU), cpu, cuda or cuda:N."""
    precision: str = "fp32"
    """fp32, bf16 (autocast), fp16 (autocast and a GradScaler) or auto: bf16 for training where
    it pays (a GPU that has it; a CPU with native bf16 products, AVX-512 BF16 or AMX, for
    d_model >= 192), else fp32; the log says which. Translating on a CPU, bf16 (or auto on a
    CPU with native bf16, d_model >= 256) runs the packed linear layers (pack_weights) in bf16
    instead of autocast: 1.2-1.4x faster than fp32 on an AMD EPYC, the same BLEU, 94-95% of
    the outputs the same (docs/speed.md)."""
    compile: bool = False
    """torch.compile, once for any batch shape: for training the model and the loss (on a
    GPU; on the 2-core CPUs training ran at 0.8-0.9x the eager speed, on the Zen 5 0.6x in
    fp32 and 0.9x in bf16: inductor multiplies through MKL); for translate, evaluate
    and serve the decoder's step (one batch at a time; on the 2-core CPU 0.52-1.37x the eager
    speed now, after 7-55 s of compiling: docs/speed.md; a search with word alignments runs
    its steps uncompiled, as they return the attention). Without a C++ compiler on a CPU, or
    Triton on a GPU: uncompiled, with a warning."""
    pack_weights: bool = True
    """For translate, evaluate and serve on a CPU: the linear layers at least 256 wide (in and
    out) multiply with a copy of their weights packed once for oneDNN (model/linear.py): the
    same outputs, faster (Multi30k test2016 on an AMD EPYC: 1.01-1.11x greedy, 1.07-1.11x beam
    4). The packed layers' own weights are then dropped, except one another layer shares (an
    output layer tied to the embedding), so the memory it adds is about that layer's weights.
    False: the plain weights' products (MKL's, or oneDNN's where it is the faster:
    model/products.py)."""
    loss_chunk: int = 1024
    """Target positions whose logits the training loss makes at once (the final linear layer
    fused into the label-smoothed loss, so the whole (N, V) logits never exist); 0: all at
    once, through the model's logits."""
    threads: int = 0
    """Threads on the CPU; 0: torch's default (one per core). Training and one batch use them
    all within each operation; translating many batches shares them out (``inter_threads``)."""
    inter_threads: int = 0
    """Batches translated at once on the CPU, each on threads ÷ inter_threads threads
    (CTranslate2's inter_threads); 0: one per thread. Never more than there are batches."""
    # Under a millisecond c10d waits 0 ms and fails at once; above timedelta's range (10^12
    # minutes) is an OverflowError. The ranks wait for rank 0 to prepare the data, which may
    # take hours on a large corpus, so the bound is a week.
    timeout_minutes: float = ranged(30.0, 0.01, 10_080)
    """Under torchrun: how long a process waits for the others before the job fails; in
    [0.01, 10080] (0.6 s to a week)."""

    def __post_init__(self) -> None:
        check_types(self)
        check_finite(self)
        check_ranges(self)
        if self.precision not in PRECISIONS:
            raise BadValue(
                f"RuntimeConfig.precision must be one of {PRECISIONS}, got {self.precision!r}"
            )
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise BadValue(
                f"RuntimeConfig.device must be auto, cpu, cuda or cuda:N, got {self.device!r}"
            )
        if self.loss_chunk < 0:
            raise BadValue(f"RuntimeConfig.loss_chunk must be >= 0, got {self.loss_chunk!r}")
        for name in ("threads", "inter_threads"):
            if getattr(self, name) < 0:
                raise BadValue(f"RuntimeConfig.{name} must be >= 0, got {getattr(self, name)!r}")
