"""Weights files, one tensor at a time: reading a Hugging Face model's, writing safetensors.

An opus-mt model is 300 MB of float32, and a converter that holds its input, its output and the
serialized bytes of the output at once needs three times that. Here the input is read lazily
(safetensors through ``safe_open``; a pickled ``pytorch_model.bin`` only through
``torch.load(weights_only=True)``, which refuses any object that is not a tensor or a plain
container) and the output is written tensor by tensor into a safetensors file whose header is
known beforehand, so memory holds the input and one tensor more (benchmarks/import_marian.py).

The safetensors layout (its specification, github.com/huggingface/safetensors): 8 bytes of
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} padded with
spaces to a multiple of 8, then the tensors' bytes back to back, little-endian as on every host
torch supports.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from ..errors import UserError
from ..files import atomic_write

SAFETENSORS, PICKLED = "model.safetensors", "pytorch_model.bin"


class WeightFile:
    """The tensors of ``model.safetensors`` (preferred) or ``pytorch_model.bin`` in a folder.

    ``shapes`` is read at once (for safetensors from the header alone); ``get`` reads one
    tensor, as float32. A damaged or unreadable file is a UserError that names it.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / SAFETENSORS
        self._tensors: dict[str, Tensor] | None = None
        self._file = None
        try:
            if self.path.is_file():
                self._file = safe_open(str(self.path), framework="pt")
                names = self._file.keys()  # from the header: no tensor is read
                self.shapes = {k: tuple(self._file.get_slice(k).get_shape()) for k in names}
                return
            self.path = folder / PICKLED
            if not self.path.is_file():
                raise UserError(f"{folder} holds no weights: expected {SAFETENSORS} or {PICKLED}")
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as error:
            reason = " ".join(str(error).split())[:200]
            raise UserError(f"{self.path} is damaged or not a weights file ({reason})") from None
        except Exception as error:  # pickle's errors: any object but tensors is refused
            reason = " ".join(str(error).split())[:200]
            raise UserError(f"{self.path} cannot be read safely ({reason})") from None
        if not isinstance(state, dict) or not all(isinstance(t, Tensor) for t in state.values()):
            raise UserError(f"{self.path} is not a state dict of tensors")
        self._tensors = state
        self.shapes = {k: tuple(t.shape) for k, t in state.items()}

    def get(self, name: str) -> Tensor:
        """The tensor ``name`` as float32 (Hugging Face often stores Marian in float16)."""
        try:
            if self._tensors is not None:
                return self._tensors[name].float()
            if self._file is None:  # released: mapped again
                self._file = safe_open(str(self.path), framework="pt")
            tensor = self._file.get_tensor(name)
        except SafetensorError as error:
            raise UserError(f"{self.path} is damaged ({error})") from None
        except OSError as error:  # mapped again after ``release``: gone or unreadable since
            raise UserError(f"{self.path} cannot be read ({error.strerror})") from None
        return tensor.float()

    def release(self) -> None:
        """Unmaps a safetensors file: the pages of it read so far stop counting in the
        process's resident memory (a pass over every tensor, as the import's check of their
        values, left the whole file there, under the conversion's own peak: 1.61 → 2.22× the
        weights); the next ``get`` maps it again."""
        if self._tensors is None:
            self._file = None


def write_safetensors(
    path: Path,
    shapes: dict[str, tuple[int, ...]],
    tensors: Iterable[tuple[str, Tensor]],
    metadata: dict[str, str] | None = None,
    owner: Path | None = None,
) -> None:
    """Writes float32 tensors into a safetensors file, one at a time (``files.atomic_write``).

    Args:
        shapes: every tensor's name and shape, in the order ``tensors`` yields them.
        tensors: (name, tensor) pairs, computed as they are written.
        metadata: the header's ``__metadata__`` (string values).
        owner: the folder being built that ``path`` lies in (``files.atomic_write``).
    """
    header: dict[str, object] = {"__metadata__": metadata or {}}
    offset = 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)  # float32
        header[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    order = iter(shapes.items())
    with atomic_write(path, "wb", owner) as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, tensor in tensors:
            expected, shape = next(order)
            if (name, tuple(tensor.shape)) != (expected, shape):
                raise ValueError(f"{path}: got {name} {tuple(tensor.shape)}, expected {expected} "
                                 f"{shape}")  # fmt: skip
            f.write(tensor.detach().to(torch.float32).contiguous().numpy().tobytes())
        if next(order, None) is not None:  # never renamed into place
            raise ValueError(f"{path}: fewer tensors than the header announces")
