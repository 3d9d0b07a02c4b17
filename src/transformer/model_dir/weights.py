"""A weights file (safetensors): what a model saves, and reading one back, checked.

A damaged or unreadable file, a weight that is not finite, or names and shapes that are not
exactly the model's are one-line errors that name the file; nothing half-loaded is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from ..errors import UserError, describe_os_error
from ..model.base import EncoderDecoder

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
    if not tensor.is_floating_point() or bool(tensor.isfinite().all()):
        return  # one pass for the weights of every model that loads
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

    One tensor at a time, each checked (``check_weights_finite``) before it is copied: reading
    the whole file first held two more copies of the weights beside the model's (the file's
    bytes and the tensors made from them), and the process kept that memory. Measured with the
    Multi30k model (29 MB of weights): 83-85 MB resident after ``load_checkpoint``, now 54-56
    MB; the peak while loading 96-97 MB, now 83-85 MB (the file's mapped pages count while it
    is open). On an error the model is left half-loaded, and every caller drops it.
    """
    with opened(path) as file:
        names = list(file.keys())  # noqa: SIM118 (a safe_open handle is not a dict)
        _check_names_and_shapes(model, path, {n: file.get_slice(n).get_shape() for n in names})
        with torch.no_grad():
            for name, param in model.named_parameters():
                tensor = file.get_tensor(name)
                check_weights_finite(tensor, name, path)
                param.copy_(tensor)


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
