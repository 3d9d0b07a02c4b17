"""The hardware, chosen once: the device, the precision, and what moves data onto them.

``runtime.device`` is ``auto`` (CUDA when there is a GPU, else the CPU), ``cpu``, ``cuda`` or
``cuda:N``; asking for CUDA where there is none is a one-line error. ``runtime.precision`` is
``fp32``, ``bf16`` (autocast; no scaler needed), ``fp16`` (autocast with a GradScaler, so that
small gradients do not underflow) or ``auto`` (``resolve_precision``: bf16 for training where it
pays, fp32 elsewhere). Autocast follows the device type. Batches are built on the CPU, pinned
when they go to a GPU, and copied without blocking the host.

Checkpoints hold CPU tensors only, so a model trained on a GPU translates on a CPU and the
reverse (``map_location``: the weights are read on the CPU, then moved).

``runtime.threads`` is checked against this machine here, not in the config (which is saved
with a run and may be resumed elsewhere): more than ``THREADS_PER_CORE`` threads per core this
process may use is refused before torch or CTranslate2 sees it (OpenMP crashed with 100,000, a
segmentation fault, and failed to create 20,000).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch

from .config import RuntimeConfig
from .errors import BadValue

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
THREADS_PER_CORE = 4  # a sane maximum of runtime.threads: 4 x the cores (oversubscribed already)


def cores() -> int:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):  # Linux: the affinity mask, as a container limits it
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory free for a new allocation on this machine (None where unknown)."""
    try:  # Linux: MemAvailable counts the page cache that can be dropped too
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_threads(threads: int, name: str = "threads") -> None:
    """Refuses a ``runtime.threads`` (or ``runtime.inter_threads``: ``name``) above
    ``THREADS_PER_CORE`` x ``cores()`` (one line)."""
    limit = THREADS_PER_CORE * cores()
    if threads > limit:
        raise BadValue(
            f"--runtime.{name} {threads} is more than {limit} ({THREADS_PER_CORE} per CPU core "
            f"this process may use, {cores()}); 0 lets the library choose"
        )


@contextmanager
def torch_on_one_thread() -> Iterator[None]:
    """Torch on one thread, around loading and converting a model for CTranslate2 in the same
    process. Measured on 2 cores: once torch had run an op on 2 threads in the process,
    CTranslate2 on 2 threads took 1.56 s instead of 0.34 s for the demo's test set (the two
    libraries' OpenMP threads get in each other's way; OMP_WAIT_POLICY and GOMP_SPINCOUNT changed
    nothing). On one thread torch starts no pool, and loading a checkpoint gains nothing from
    threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# The narrowest model for which ``auto`` trains in bf16 on a CPU with native bf16 products:
# bf16 against fp32 steps, measured on AVX-512 BF16 (docs/speed.md), took the same time at
# d_model 128, 0.83x at 192 and 0.69x at 256; narrower, the casts cost what the faster
# products save.
BF16_MIN_D_MODEL = 192
# Translation in bf16 on such a CPU: the linear layers packed for oneDNN in bf16, 1.2-1.4x
# faster than packed in fp32 with the same BLEU (docs/speed.md); a model narrower than
# model/linear.py's MIN_FEATURES has no layer packed, and stays in fp32.
BF16_MIN_D_MODEL_TRANSLATION = 256
# /proc/cpuinfo flags of x86 instructions that multiply bf16 matrices natively (oneDNN uses
# them for torch's bf16 matmuls); without them bf16 products are emulated and slower.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def resolve_device(spec: str) -> torch.device:
    """The torch.device that ``runtime.device`` names, checked against the machine."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", spec)
    if match is None:
        raise BadValue(f"runtime.device must be auto, cpu, cuda or cuda:N, got {spec!r}")
    if not torch.cuda.is_available():
        raise BadValue(
            f"runtime.device is {spec!r} but this machine has no CUDA device "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False); use --device cpu"
        )
    index = int(match.group(1) or 0)
    if index >= torch.cuda.device_count():
        raise BadValue(
            f"runtime.device is {spec!r} but this machine has {torch.cuda.device_count()} "
            "CUDA device(s)"
        )
    return torch.device("cuda", index)


def native_bf16_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU flag that says this machine multiplies bf16 matrices natively (``amx_bf16`` or
    ``avx512_bf16``), or None: no such flag, or no /proc/cpuinfo to read (not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):  # the same on every core: the first line says it
            flags = set(line.partition(":")[2].split())
            break
    return next((flag for flag in NATIVE_BF16_FLAGS if flag in flags), None)


def resolve_precision(
    precision: str, device: torch.device, d_model: int, training: bool = True
) -> tuple[str, str]:
    """What ``runtime.precision`` means on this machine, and why (for the log).

    ``auto`` is bf16 for training on a CUDA GPU that supports it, and on a CPU with native bf16
    products (``native_bf16_cpu``) for models at least ``BF16_MIN_D_MODEL`` wide; fp32
    otherwise. Translation on such a CPU is bf16 for models at least
    ``BF16_MIN_D_MODEL_TRANSLATION`` wide: their linear layers packed in bf16 (the engine
    takes auto's bf16 only that way; model/linear.py).

    Args:
        precision: fp32, bf16, fp16 or auto.
        d_model: the model's width.
        training: False for translation.
    Returns:
        (fp32, bf16 or fp16; a sentence saying why).
    """
    if precision != "auto":
        return precision, f"precision {precision}, as asked"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", f"precision auto: bf16, {torch.cuda.get_device_name(device)} has it"
        return "fp32", f"precision auto: fp32, {torch.cuda.get_device_name(device)} lacks bf16"
    flag = native_bf16_cpu()
    if flag is None:
        return "fp32", "precision auto: fp32, this CPU has no native bf16 (avx512_bf16, amx_bf16)"
    if not training:
        if d_model < BF16_MIN_D_MODEL_TRANSLATION:
            return "fp32", (
                f"precision auto: fp32 for translation, d_model {d_model} < "
                f"{BF16_MIN_D_MODEL_TRANSLATION} (no linear layer packed)"
            )
        why = f"this CPU has {flag} and d_model {d_model} >= {BF16_MIN_D_MODEL_TRANSLATION}"
        return "bf16", f"precision auto: bf16 in the packed linear layers, {why}"
    if d_model < BF16_MIN_D_MODEL:
        return "fp32", (
            f"precision auto: fp32, d_model {d_model} < {BF16_MIN_D_MODEL} gains nothing from "
            f"bf16 on this CPU ({flag})"
        )
    why = f"this CPU has {flag} and d_model {d_model} >= {BF16_MIN_D_MODEL}"
    return "bf16", f"precision auto: bf16, {why}"


def why_not_compiled(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot run on ``device`` here, or None: on a CPU its inductor
    backend builds C++ (a compiler on PATH: $CXX, g++, c++ or clang++); on a GPU, Triton."""
    if device.type == "cpu":
        names = [os.environ.get("CXX", ""), "g++", "c++", "clang++"]
        if not any(shutil.which(name) for name in names if name):
            return "no C++ compiler ($CXX, g++, c++ or clang++) on PATH"
        return None
    try:
        import triton  # noqa: F401  (bundled with PyTorch's CUDA wheels)
    except ImportError:
        return "Triton is not installed"
    return None


def compiled(fn: Callable, device: torch.device, what: str) -> Callable:
    """``torch.compile(fn, dynamic=True)``, or ``fn`` itself with one line on stderr where
    ``why_not_compiled`` says it cannot be (the same numbers, eagerly)."""
    why = why_not_compiled(device)
    if why is not None:
        print(f"transformer: {what} runs uncompiled: {why}", file=sys.stderr)
        return fn
    return torch.compile(fn, dynamic=True)


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """Mixed precision for the forward pass (and the loss), or nothing for fp32."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A GradScaler that works for fp16 and is a no-op otherwise."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on ``device``: pinned and copied without blocking the host for a GPU."""
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def rng_state() -> dict:
    """Every random state a run depends on: Python, torch CPU, and CUDA when there is one."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restores ``rng_state()``; a CUDA state is restored where CUDA is available."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])


def prepare_runtime(runtime: RuntimeConfig, local_rank: int = 0) -> torch.device:
    """Applies the thread count and returns the device (one call at the top of a command).

    Under torchrun, ``auto`` and ``cuda`` give each process on a machine its own GPU (its
    LOCAL_RANK); ``cuda:N`` keeps the GPU named.
    """
    check_threads(runtime.threads)
    check_threads(runtime.inter_threads, "inter_threads")
    if runtime.threads:
        torch.set_num_threads(runtime.threads)
    device = resolve_device(runtime.device)
    if device.type == "cuda" and runtime.device in ("auto", "cuda"):
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device
