"""The linear layer, y = x·Wᵀ + b, with an optional copy of W packed once for oneDNN.

Every projection of the model (queries, keys, values, the attention's output, the feed-forward's two
layers, the final linear layer) is a ``Linear``: ``torch.nn.Linear``, the same parameters and state
dict, whose product can run on a copy of its weight that ``pack`` reorders once into the blocked
layout oneDNN's matrix product reads, where the plain product (``products.linear``: MKL's, or
oneDNN's where it is the faster on this CPU) takes the plain weight at every call. Measured on a
2-core AMD EPYC, one thread (docs/speed.md): the 256 → 8,000 output layer 1.5-2.7× faster at 1 to 64
rows, 256 → 1,024 and 1,024 → 256 1.2-1.9× at 4 to 64 rows; but a call costs about 15 µs more, so
128 → 128 is 1.1-4× slower at up to 256 rows. In whole searches (1 thread, in turn on the same
sentences), every layer of the Multi30k model packed (256 wide) made greedy and beam search 1.11×
faster; the demo model's feed-forward layers packed (128 → 512 → 128) made them 0.84× and 0.91× as
fast. So ``pack_linear_layers`` packs only layers at least ``MIN_FEATURES`` wide on both sides. The
layers a search runs once per batch (the encoder, the encoder-decoder attention's keys and values:
``EncoderDecoder.once_per_batch``) multiply a whole batch's source words, hundreds of rows whose
number changes with every batch, so each batch compiles their products anew; in float32 they are
packed only from ``ONCE_PER_BATCH_MIN_FEATURES`` wide. On test2016 (2 threads) the Multi30k model's
256-wide ones ran as fast unpacked and their packed copies and compiled products held 16-33 MB; at
OPUS-MT size (512) unpacked they made greedy search 8% slower. In bfloat16 they are packed at any
width: the product itself is faster. Packing is done for translation on a CPU
(``runtime.pack_weights``, inference/engine.py), never for training: the packed product has no
gradient.

The packed product gives the same numbers as ``F.linear`` to float32 rounding (the order of the
sums differs), and a row's numbers do not depend on how many rows are multiplied with it, where
MKL's do (one row against several); tests/test_linear.py checks both. Packed in bfloat16
(``runtime.precision bf16`` when translating on a CPU, or ``auto`` where the CPU has native
bf16 products), its inputs and output are rounded to bfloat16, as under autocast, and the
rest of the model stays in float32: 1.2-1.4× faster again on the AMD EPYC, the same BLEU.

The packed weight is used only where it still matches the weight: in inference (no gradient,
no autocast), on the CPU, in float32, and while the weight and bias are the tensors it was made
from, unchanged since (their version counters); anywhere else, and once the weight changes,
the layer is ``F.linear`` as before.

A model that only translates (the engine's, inference/engine.py) needs no plain weight beside
the packed one: ``pack_linear_layers(release=True)`` puts in its place a weight of the same
shape on the meta device, which holds no memory (a weight another module shares, a tied output
layer's, stays). Such a layer multiplies only through the packed weight; asked for anything
else (a gradient, autocast, another device or dtype) it raises ``PlainWeightReleased`` rather
than multiply by nothing. At OPUS-MT's size (297 MB of weights) the model held 609 MB once
packed, now 411 MB, and 729 MB at the peak while packing, now 525 (the output layer is packed
first, while the other weights are still few); the whole ``transformer translate`` of 500
sentences, greedy, 1,228 MB at its peak, now 1,036 (docs/speed.md).

Shapes: N rows (any leading dims), I in_features, O out_features, O' O rounded up.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import products
from .products import can_pack

MIN_FEATURES = 256  # the narrowest layer packed, in and out
ONCE_PER_BATCH_MIN_FEATURES = 512  # the same, in float32, for a layer run once per batch
PACKED_ROWS = 64  # the row count oneDNN lays the weight out for (any count is multiplied)


class PlainWeightReleased(RuntimeError):
    """A layer whose plain weight was released once packed was asked to multiply without its
    packed weight."""


@dataclass
class Packed:
    """A weight packed for oneDNN, with what it was made from."""

    weight: Tensor  # (O', I) in oneDNN's layout, O' = O rounded up to ``multiple``
    bias: Tensor | None  # (O',) zeros past O, in the weight's dtype
    source: tuple[Tensor, Tensor | None]  # the layer's weight and bias when packed
    versions: tuple[int, int]  # their version counters then
    largest: float  # the largest |w| of the plain weight (oneDNN's layout has no ``abs``)

    def matches(self, layer: nn.Linear) -> bool:
        """Whether ``layer``'s weight and bias are still the tensors it was made from, unchanged
        since. Read from ``_parameters`` directly: through the module's attributes, these checks
        took a third of a small product's time (docs/speed.md)."""
        weight, bias = layer._parameters["weight"], layer._parameters["bias"]
        same = weight is self.source[0] and bias is self.source[1]
        return same and _versions(weight, bias) == self.versions


class Linear(nn.Linear):
    """``nn.Linear`` whose product may run on a packed copy of its weight (``pack``)."""

    packed: Packed | None = None

    def forward(self, x: Tensor) -> Tensor:
        """(…, I) -> (…, O)."""
        return linear(x, self)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed weight out (oneDNN's layout has no storage to
        copy): they multiply with ``F.linear`` until packed again."""
        state = dict(super().__getstate__())
        state.pop("packed", None)
        return state

    def pack(self, multiple: int = 1, dtype: torch.dtype = torch.float) -> None:
        """Makes the packed copy of the weight, in ``dtype`` (float32, or bfloat16: the product's
        inputs are rounded to bfloat16, its sums kept in float32, its output rounded to bfloat16
        and returned in float32), its rows padded with zeros to a multiple of ``multiple`` (the
        padded columns of ``packed_product``'s output are 0)."""
        weight = self.weight.detach().to(dtype)  # (O, I)
        rows = -(-self.out_features // multiple) * multiple  # O'
        padding = rows - self.out_features
        bias = None if self.bias is None else F.pad(self.bias.detach().to(dtype), (0, padding))
        reordered = torch.ops.mkldnn._reorder_linear_weight(
            F.pad(weight, (0, 0, 0, padding)), PACKED_ROWS
        )
        source = self.weight, self.bias
        # two reductions: ``abs()`` would make a copy of the weight (119 MB at OPUS-MT's size)
        largest = max(float(weight.max()), -float(weight.min())) if weight.numel() else 0.0
        self.packed = Packed(reordered, bias, source, _versions(*source), largest)

    def release_plain_weight(self) -> None:
        """Puts a weight of the same shape on the meta device (no memory) in place of the
        plain one, which the packed copy makes unneeded for translation; the packed weight
        goes on matching it. Only after ``pack``."""
        assert self.packed is not None and self.packed.matches(self), "pack first"
        self.weight = nn.Parameter(torch.empty_like(self.weight, device="meta"), False)
        self.packed.source = self.weight, self.bias
        self.packed.versions = _versions(self.weight, self.bias)


def _versions(weight: Tensor, bias: Tensor | None) -> tuple[int, int]:
    """The version counters of a weight and its bias (-1: no bias)."""
    return weight._version, -1 if bias is None else bias._version


def packed_rows(layer: nn.Module) -> int:
    """The rows of ``layer``'s packed weight, padding included (O'); 0 where it has none."""
    packed = getattr(layer, "packed", None)
    return 0 if packed is None else packed.weight.size(0)


def packed_product(x: Tensor, layer: nn.Linear) -> Tensor | None:
    """x·Wᵀ + b through ``layer``'s packed weight, padded columns included, in float32:
    (…, O'); None where it may not be used (not packed, a gradient or autocast wanted, not
    float32 on the CPU, or the weight changed since it was packed: then the packed copy is
    dropped). A decoding step calls it 25 times and more, so the checks are the cheapest
    ones: attributes of the tensor, not ``x.device``, which makes a new object."""
    packed: Packed | None = layer.__dict__.get("packed")
    if packed is None:
        return None
    if torch.is_grad_enabled() or not x.is_cpu or x.dtype is not torch.float:
        return _unpacked(layer)
    if torch.is_autocast_enabled("cpu"):
        return _unpacked(layer)
    if not packed.matches(layer):
        layer.packed = None  # type: ignore[union-attr]  (only a Linear has one)
        return None
    weight, bias = packed.weight, packed.bias
    if weight.dtype is torch.float:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return torch.ops.mkldnn._linear_pointwise(
        x.to(weight.dtype), weight, bias, "none", [], ""
    ).float()


def _unpacked(layer: nn.Linear) -> None:
    """None (multiply with the plain weight), or ``PlainWeightReleased`` where it was released."""
    if layer._parameters["weight"].is_meta:
        raise PlainWeightReleased(
            "this linear layer's plain weight was released once packed for translation "
            "(pack_linear_layers(release=True)): it multiplies float32 inputs on the CPU, "
            "without gradients or autocast, only; load the model again for anything else"
        )
    return None


def largest_weight(model: nn.Module) -> float | None:
    """The largest |w| over the model's weights, those released once packed included (None
    for a model without weights)."""
    found = [float(p.detach().abs().max()) for p in model.parameters()
             if p.numel() and not p.is_meta]  # fmt: skip
    found += [m.packed.largest for m in model.modules()
              if isinstance(getattr(m, "packed", None), Packed)]  # fmt: skip
    return max(found) if found else None


def linear(x: Tensor, layer: nn.Linear) -> Tensor:
    """layer(x) without the module call: through the packed weight where it may be used, else
    the plain one (``products.linear``: oneDNN where it is the faster here, else
    ``F.linear``). Shape: (…, I) -> (…, O)."""
    y = packed_product(x, layer)
    if y is None:
        return products.linear(x, layer.weight, layer.bias)
    return y if y.size(-1) == layer.out_features else y[..., : layer.out_features].contiguous()


def pack_linear_layers(
    model: nn.Module,
    output: nn.Module | None = None,
    multiple: int = 1,
    dtype: torch.dtype = torch.float,
    once_per_batch: list[nn.Module] | None = None,
    release: bool = False,
) -> int:
    """Packs every ``Linear`` of ``model`` at least ``MIN_FEATURES`` wide, in and out, in
    ``dtype`` (``output``'s rows padded to a multiple of ``multiple``); in float32, those inside
    the ``once_per_batch`` modules only from ``ONCE_PER_BATCH_MIN_FEATURES``. ``release``: for a
    model that will only translate, the packed layers' plain weights that no other module
    shares are released (``Linear.release_plain_weight``). Returns how many were packed, 0
    where ``can_pack`` is False."""
    if not can_pack():
        return 0
    products.limit_onednn_caches()
    once = {id(m) for part in once_per_batch or [] for m in part.modules()}
    once_narrowest = ONCE_PER_BATCH_MIN_FEATURES if dtype == torch.float else MIN_FEATURES
    layers = [
        m for m in model.modules()
        if isinstance(m, Linear) and min(m.in_features, m.out_features)
        >= (once_narrowest if id(m) in once else MIN_FEATURES)
        and m.weight.device.type == "cpu" and m.weight.dtype == torch.float
    ]  # fmt: skip
    owners: dict[int, int] = {}  # a weight's id: how many modules hold it
    for module in model.modules() if release else ():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    # the output layer first: its packing holds two more copies of the largest weight for a
    # moment, the fewer other weights then the better (the other layers' plain weights are
    # released as they go, and their packed copies reuse that memory)
    layers.sort(key=lambda layer: layer is not output)
    for layer in layers:
        layer.pack(multiple if layer is output else 1, dtype)
        if release and owners[id(layer.weight)] == 1:  # at once: the next copy reuses it
            layer.release_plain_weight()
    if release:
        return_freed_memory()
    return len(layers)


def return_freed_memory() -> None:
    """Hands the memory the C library keeps for reuse back to the system (glibc's
    ``malloc_trim``; nothing elsewhere): the released weights were freed inside its heap, where
    the process kept them (113 of 168 MB at OPUS-MT's size)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)
