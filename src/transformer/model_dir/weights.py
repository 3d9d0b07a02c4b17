"""A weights file (safetensors): what a model saves, and reading one back, checked.

A damaged or unreadable file, a weight that is not finite, or names and shapes that are not
exactly the model's are one-line errors that name the file; nothing half-loaded is used.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import torch
from safetensors import SafetensorError, safe_open

from ..errors import UserError, describe_os_error
from ..model.base import EncoderDecoder
from ..reading import parse_json

# The one tensor whose entries may be −inf: the output bias of a row that must never be produced
# (an imported model's padding row, an exported one's unused entries: hub/marian_vocab.py).
MAY_BE_MINUS_INF = ("output.bias", "final_logits_bias")


def model_state(model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """The weights to save. ``named_parameters`` lists a tied tensor once, under its first name
    (safetensors refuses two names for one storage)."""
    return {name: p.detach().contiguous() for name, p in model.named_parameters()}


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a damaged or unreadable file, or one holding a
    non-finite weight (``check_weights_finite``), is a UserError naming it."""
    with opened(path) as file:
        state = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118
    for name, tensor in state.items():
        check_weights_finite(tensor, name, path)
    return state


@contextmanager
def opened(path: Path) -> Iterator[Any]:
    """A safetensors file opened for reading tensor by tensor (``safe_open``: its header is
    read and checked against the file's size, the data only as tensors are asked for). A
    missing, unreadable or damaged file is a UserError naming it."""
    try:
        with path.open("rb"):  # the operating system's own reason first (a folder, no access)
            pass
        with safe_open(path, framework="pt") as file:
            yield file
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    except SafetensorError as error:
        reason = str(error).rsplit(":", 1)[-1].strip()
        raise UserError(f"{path} is damaged ({reason}); it cannot be loaded") from None


def non_finite(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """Where the weight ``name`` holds a NaN or an infinity no model may hold (−inf is allowed
    in an output bias, ``MAY_BE_MINUS_INF``; ``name`` may carry a wrapper's prefix): a bool
    tensor of ``tensor``'s shape."""
    bad = tensor.isnan() | (tensor == float("inf"))
    return bad if name.endswith(MAY_BE_MINUS_INF) else bad | (tensor == float("-inf"))


def check_weights_finite(tensor: torch.Tensor, name: str, path: Path) -> None:
    """A one-line UserError naming ``path`` and the tensor ``name`` if it holds a NaN or an
    infinity (−inf is allowed in an output bias, ``MAY_BE_MINUS_INF``, except in every entry):
    a search on such weights has no answer, and a training from them no gradient."""
    # One pass, and no tensor as big as the weight (which the process kept: 14 MB for the
    # Multi30k model's ``isfinite``): a sum is finite only where every value is. A sum of
    # finite values that overflows is looked at value by value below.
    if not tensor.is_floating_point() or bool(tensor.sum().isfinite()):
        return
    minus_inf_allowed = name.endswith(MAY_BE_MINUS_INF)
    bad = non_finite(tensor, name)
    count = int(bad.sum())
    if count:
        first = tensor.flatten()[bad.flatten().nonzero()[0]].item()
        raise UserError(f"{path}: the tensor {name} holds {count:,} non-finite values (the "
                        f"first: {first}); these weights are damaged and not used")  # fmt: skip
    if minus_inf_allowed and tensor.numel() and bool((tensor == float("-inf")).all()):
        raise UserError(f"{path}: the tensor {name} is -inf in every entry, so no token can be "
                        "produced; these weights are damaged and not used")  # fmt: skip


def load_weights(model: EncoderDecoder, path: Path) -> None:
    """Copies safetensors weights into ``model``; names and shapes must match exactly, which
    the file's header tells before any weight is read.

    One tensor at a time, each checked (``check_weights_finite``) once it is in place. A
    float32 tensor is read from the file straight into its parameter's memory
    (``_read_into``), without mapping the file: ``get_tensor`` makes a new tensor from the
    file's mapped pages, and both counted in the process's memory. Measured with the Multi30k
    model (29 MB of weights), resident after ``load_checkpoint`` and peak: the whole file read
    first, 83-85 and 96-97 MB; tensor by tensor through ``get_tensor``, 54-56 and 83-85 MB;
    read into place, 40 and 46 MB, and 40 and 40 MB into a model built without drawing its
    weights (``load_checkpoint``; build.py). Other dtypes go through ``get_tensor``. On an
    error the model is left half-loaded, and every caller drops it.
    """
    with opened(path) as file:
        names = list(file.keys())  # noqa: SIM118 (a safe_open handle is not a dict)
        _check_names_and_shapes(model, path, {n: file.get_slice(n).get_shape() for n in names})
        with torch.no_grad(), path.open("rb") as raw:
            offsets = _float32_offsets(raw, path)
            for name, param in model.named_parameters():
                if name in offsets and _readable_into(param):
                    _read_into(raw, offsets[name], param, path)
                else:
                    param.copy_(file.get_tensor(name))
                check_weights_finite(param, name, path)


def _float32_offsets(raw: BinaryIO, path: Path) -> dict[str, int]:
    """Where in the open file ``path`` each float32 tensor's bytes start, from its header
    (which ``safe_open`` has checked: offsets inside the file, one after another)."""
    try:
        (length,) = struct.unpack("<Q", raw.read(8))
        header = parse_json(raw.read(length), f"{path}'s header")
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    return {
        name: 8 + length + entry["data_offsets"][0]
        for name, entry in header.items()
        if name != "__metadata__" and entry.get("dtype") == "F32"
    }


def _readable_into(param: torch.Tensor) -> bool:
    """Whether the file's little-endian float32 bytes can be read straight into ``param``."""
    return (
        param.dtype == torch.float32 and param.device.type == "cpu" and param.is_contiguous()
        and sys.byteorder == "little"
    )  # fmt: skip


def _read_into(raw: BinaryIO, offset: int, param: torch.Tensor, path: Path) -> None:
    """Reads ``param``'s bytes from ``offset`` of the open file into its memory."""
    into = memoryview(param.detach().numpy()).cast("B")
    try:
        raw.seek(offset)
        done = raw.readinto(into)
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    if done != into.nbytes:  # the header promised more: the file shrank while being read
        raise UserError(f"{path} is damaged (it ends inside a tensor); it cannot be loaded")


def weights_of(model: EncoderDecoder, path: Path) -> dict[str, torch.Tensor]:
    """``read_weights``, whose names and shapes must be exactly ``model``'s (which may be on the
    meta device: only its shapes are read)."""
    state = read_weights(path)
    _check_names_and_shapes(model, path, {name: list(t.shape) for name, t in state.items()})
    return state


def _check_names_and_shapes(
    model: EncoderDecoder, path: Path, shapes: dict[str, list[int]]
) -> None:
    """A UserError naming ``path`` unless the file's tensors (their ``shapes``) are exactly
    ``model``'s weights."""
    expected = model_state(model)
    if set(shapes) != set(expected):
        missing, unexpected = set(expected) - set(shapes), set(shapes) - set(expected)
        raise UserError(f"{path}: weights do not match the model (missing {sorted(missing)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")  # fmt: skip
    for name, tensor in expected.items():
        if tuple(shapes[name]) != tuple(tensor.shape):
            raise UserError(f"{path}: {name} has shape {tuple(shapes[name])}, the model "
                            f"{tuple(tensor.shape)}")  # fmt: skip
