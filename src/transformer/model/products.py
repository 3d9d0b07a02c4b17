"""Float32 matrix products on a CPU through oneDNN, where it is the faster library here.

PyTorch multiplies float32 matrices on a CPU with MKL, which picks its kernels by the CPU's
maker: on an AMD CPU it runs its AVX2 kernels even where the CPU has AVX-512. oneDNN, which
PyTorch also carries (``torch.ops.mkldnn._linear_pointwise``), picks them by what the CPU can
do. On a 2-core AMD EPYC of family 26 (Zen 5, whose AVX-512 units are 512 bits wide), 2
threads, oneDNN's products ran 2.2-2.4× as fast as MKL's for a training step's forward
shapes, 1.8-2.9× for dY·W and 1.1-1.9× for dYᵀ·X, and the `small` training step 1.4-1.6×
(docs/speed.md); on the EPYC measured before it, the two were within 1.1-1.5× alone and level
inside a training step. So ``onednn_is_faster`` measures the two once per process and the
products go through oneDNN only where it wins clearly (``MARGIN``).

``product(a, b)`` is a·bᵀ (+ bias) without a gradient (the fused loss makes its own);
``linear(x, weight, bias)`` is ``F.linear`` with its gradients through oneDNN as well (x·Wᵀ + b
forward; dY·W and dYᵀ·X backward), except a small product without a gradient
(``SMALL_PRODUCT``: a decoding step's few rows), which MKL makes faster. The numbers are
those of ``F.linear`` to float32 rounding: the order of the sums differs
(tests/test_products.py). Only float32 on the CPU, outside autocast; anything else is
``F.linear``.

Shapes: M rows, K the shared width, N columns.
"""

from __future__ import annotations

import os
import platform
import re
import threading
import time
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import BadValue

MARGIN = 1.3  # oneDNN's products are used where they take at most 1/1.3 of MKL's time
# Below this many multiply-adds (M·N·K), a product without a gradient goes through MKL even
# where oneDNN is the faster library: a oneDNN call costs about 10 µs more than MKL's, which
# outweighs its faster arithmetic in the small products of a small model's decoding step. On
# the Zen 5 EPYC, one thread, oneDNN's time over MKL's crossed 1 at 0.8-1.05 M multiply-adds
# for eight shapes from 128 → 128 to 1,024 → 256 (4.9 at one row of 128 → 128, 0.5 at 128
# rows of 256 → 1,024); at two threads at 0.5-2.5 M (docs/speed.md).
SMALL_PRODUCT = 1 << 20
# oneDNN keeps a compiled product for each shape it has multiplied (0.2-0.3 ms to compile,
# about 0.5 MB each), 1,024 by default: translating test2016 (a few hundred row counts) they
# held 120-160 MB. A search keeps its batch to a few row counts (inference/search.py,
# ``rows_kept``): 8 for 64 sentences, 4 products each. Each compiled product takes two entries
# (a matrix product nested in it takes one), so 48 do not hold those with each batch's
# encoder's (test2016: 278 compilations a pass, 94 with 64 entries), but 64 or 96 were no faster
# at two threads, for 0-10 MB more. ideep keeps a description of each as well, whose
# number does not change the speed: 16 of those (docs/speed.md).
CACHE_SIZES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": 48, "LRU_CACHE_CAPACITY": 16}
# "mkl" or "onednn" decides without measuring (benchmarks, tests); unset or empty: measured
CHOICE_VARIABLE = "TRANSFORMER_CPU_PRODUCTS"
CHOICES = ("mkl", "onednn")


def chosen_library() -> str | None:
    """The library ``CHOICE_VARIABLE`` names ("mkl" or "onednn"), None where it is unset or
    empty; any other value is refused (one line), before a command starts: a misspelt name
    must not silently leave the choice to the measurement."""
    value = os.environ.get(CHOICE_VARIABLE, "").strip().lower()
    if not value:
        return None
    if value not in CHOICES:
        raise BadValue(
            f"the environment variable {CHOICE_VARIABLE}={os.environ[CHOICE_VARIABLE]!r} is not "
            f"one of {', '.join(CHOICES)} (or unset, to measure which is faster here)"
        )
    return value


def can_pack() -> bool:
    """Whether this PyTorch has oneDNN's product and its packed weights, on an x86-64 CPU
    (where they were measured; elsewhere oneDNN may run on other kernels)."""
    return (
        platform.machine().lower() in ("x86_64", "amd64")
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


# The least each cache size may be where the environment sets it: ideep's cache of 0 entries
# (LRU_CACHE_CAPACITY=0, or any value it reads as 0: empty, "abc") ended the process with a
# segmentation fault at its first product; oneDNN's own may be 0 (no cache)
LEAST_CACHE_SIZES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": 0, "LRU_CACHE_CAPACITY": 1}


def check_cache_sizes() -> None:
    """Refuses (one line) a cache size that the environment sets to anything but a whole number
    of at least ``LEAST_CACHE_SIZES``: checked before a command starts, and before the first
    product of a process that uses the library."""
    for name, least in LEAST_CACHE_SIZES.items():
        value = os.environ.get(name)
        count = re.fullmatch(r"[ \t]*[0-9]+[ \t]*", value or "")  # as C's atoi reads one
        if value is not None and not (count and int(value) >= least):
            raise BadValue(
                f"the environment variable {name}={value!r} is not a whole number of at least "
                f"{least}: PyTorch's oneDNN reads it as the entries of a cache (unset it, and "
                f"{CACHE_SIZES[name]} is used)"
            )


def limit_onednn_caches() -> None:
    """Sets ``CACHE_SIZES`` where the environment has not (and checks those it has): read at
    oneDNN's first product, a value set then stays for the process."""
    check_cache_sizes()
    for name, size in CACHE_SIZES.items():
        os.environ.setdefault(name, str(size))


def onednn_product(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """a·bᵀ + bias through oneDNN: (M, K), (N, K) -> (M, N); either may be a transposed view."""
    return torch.ops.mkldnn._linear_pointwise(a, b, bias, "none", [], "")


@cache
def onednn_is_faster() -> bool:
    """Whether float32 products go through oneDNN in this process: ``CHOICE_VARIABLE`` where
    it is set, else ``_measured_faster``."""
    choice = chosen_library()  # a bad value is refused here as well
    if not can_pack():
        return False
    limit_onednn_caches()  # before oneDNN's first product, however it is chosen
    if choice is not None:
        return choice == "onednn"
    return _measured_faster()


_MEASURING = threading.Lock()
_MEASURED: list[bool] = []  # the measurement's answer, once made


def _measured_faster() -> bool:
    """Whether oneDNN multiplied a (1,024, 512)·(512, 512)ᵀ at least ``MARGIN`` times as fast
    as MKL: the fastest of 5 calls each, on the threads torch has now, about 30 ms once a
    process. Two batches at once make their first products together; the second thread waits
    for the first's answer (measuring beside each other, each took 60-70 ms and could answer
    differently)."""
    with _MEASURING:
        if not _MEASURED:
            _MEASURED.append(_measure())
        return _MEASURED[0]


def _measure() -> bool:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(1024, 512, generator=generator)
    b = torch.randn(512, 512, generator=generator)

    def fastest(multiply) -> float:
        multiply()  # oneDNN compiles the product at its first call
        times = []
        for _ in range(5):
            start = time.perf_counter()
            multiply()
            times.append(time.perf_counter() - start)
        return min(times)

    with torch.no_grad():
        mkl = fastest(lambda: F.linear(a, b))
        onednn = fastest(lambda: onednn_product(a, b, None))
    return mkl >= MARGIN * onednn


def onednn_applies(x: Tensor) -> bool:
    """Whether a product of ``x`` goes through oneDNN: float32 on the CPU, no autocast, not
    inside a compiled function (inductor chooses its own), and oneDNN the faster here."""
    return (
        x.is_cpu and x.dtype is torch.float and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling() and onednn_is_faster()
    )  # fmt: skip


def product(a: Tensor, b: Tensor, bias: Tensor | None = None) -> Tensor:
    """a·bᵀ + bias, (M, K), (N, K) -> (M, N), without a gradient (the callers make their own):
    through oneDNN where ``onednn_applies``, else ``F.linear``."""
    if onednn_applies(a) and b.dtype is torch.float and a.numel() * b.numel():
        return onednn_product(a, b, bias)
    return F.linear(a, b, bias)


def _over_rows(x: Tensor, rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x·Wᵀ + b through oneDNN, from x's rows (M, K): (…, N) in x's leading shape (a decoding
    step's rows are (M, K) already, and take no ``view``: a call into torch fewer)."""
    product = onednn_product(rows, weight, bias)  # (M, N)
    return product if x.dim() == 2 else product.view(*x.shape[:-1], weight.size(0))


class _Linear(torch.autograd.Function):
    """x·Wᵀ + b with every product (forward and backward) through oneDNN."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        rows = x.reshape(-1, x.size(-1))  # (M, K)
        ctx.save_for_backward(rows, weight)
        ctx.has_bias = bias is not None
        return _over_rows(x, rows, weight, bias)  # (…, N)

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, weight = ctx.saved_tensors
        grad_rows = grad.reshape(-1, grad.size(-1))  # (M, N)
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = grad_w = grad_b = None
        if need_x:  # dY·W: (M, N)·(N, K)
            grad_x = onednn_product(grad_rows, weight.t(), None)  # (M, K)
            grad_x = grad_x.view(*grad.shape[:-1], rows.size(1))
        if need_w:  # dYᵀ·X: (N, M)·(M, K)
            grad_w = onednn_product(grad_rows.t(), rows.t(), None)
        if need_b and ctx.has_bias:
            grad_b = grad_rows.sum(0)
        return grad_x, grad_w, grad_b


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, (…, K) -> (…, N), its products (and their gradients)
    through oneDNN where ``onednn_applies``; without a gradient, a product of fewer than
    ``SMALL_PRODUCT`` multiply-adds through MKL (``F.linear``)."""
    if not onednn_applies(x) or weight.dtype is not torch.float or not x.numel() * weight.numel():
        return F.linear(x, weight, bias)  # (also where a side is empty)
    if torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        return _Linear.apply(x, weight, bias)
    if x.numel() // x.size(-1) * weight.numel() < SMALL_PRODUCT:  # M·N·K
        return F.linear(x, weight, bias)
    return _over_rows(x, x if x.dim() == 2 else x.reshape(-1, x.size(-1)), weight, bias)
