"""A model directory: its layout, reading a model from it, and writing a checkpoint into it.

Every command that takes MODEL_DIR reads it through here (translate, evaluate, attention, serve,
export, average, and training when it resumes); none of them needs the training code for it.

    MODEL_DIR/config.json        the RunConfig, with the real vocabulary sizes
    MODEL_DIR/tokenizer/         the SentencePiece model(s) (data/tokenizer.py)
    MODEL_DIR/checkpoints/       index.json and the checkpoint folders:

    index.json          {"last": "step_00001000", "best": "step_00000800"}
    step_00001000/      model.safetensors, config.json, trainer.pt (training's state)

A checkpoint is serialized in memory, written to a hidden temporary folder, flushed to disk and
renamed into place; only then does ``index.json`` (replaced atomically) point to it. Reading is
forgiving where it can be and precise where it cannot: a missing or unreadable index falls back
to the newest complete checkpoint with a warning, and a damaged file is an error that names it.
The rest of a training run's folder (its lock, metrics, binarized data, the staging of
``--overwrite``) belongs to ``training/rundir.py``; resuming and pruning to
``training/checkpoint.py``.

Every file here is written through the write gate (``files.py``), naming this model directory's
folder as its owner; what a folder is (a run, an export, an import) is ``folder_kinds.py``'s.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

from .config import RunConfig, build_config
from .errors import UserError
from .files import built_aside, describe_os_error, write_bytes, write_json_atomic
from .folder_kinds import is_checkpoint_folder
from .model.base import EncoderDecoder
from .model.build import build_model
from .reading import entry_in, read_json

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"  # the folder of a model directory that holds them (RunDir)
TRAINER = "trainer.pt"
INDEX = "index.json"

log = logging.getLogger(__name__)


def model_state(model: EncoderDecoder) -> dict[str, torch.Tensor]:
    """The weights to save. ``named_parameters`` lists a tied tensor once, under its first name
    (safetensors refuses two names for one storage)."""
    return {name: p.detach().contiguous() for name, p in model.named_parameters()}


def _serialize(model: EncoderDecoder, config: RunConfig, trainer: dict | None) -> dict[str, bytes]:
    """The checkpoint's files as bytes, so that writing them is plain file I/O whose errors
    (a full disk above all) are OSErrors that say what happened."""
    weights = {name: tensor.cpu() for name, tensor in model_state(model).items()}  # any device
    files = {
        WEIGHTS: save(weights, metadata={"format": "pt"}),
        CONFIG: json.dumps(config.to_dict(), indent=2).encode(),
    }
    if trainer is not None:
        buffer = io.BytesIO()
        torch.save(trainer, buffer)
        files[TRAINER] = buffer.getvalue()
    return files


def save_checkpoint(
    checkpoints: Path, name: str, model: EncoderDecoder, config: RunConfig, trainer: dict | None
) -> Path:
    """Writes checkpoint ``name`` atomically and returns its folder (index.json is not touched).

    On any failure the temporary folder is removed and earlier checkpoints are untouched; an
    OSError (no space left on device, ...) becomes a UserError naming the folder.
    """
    files = _serialize(model, config, trainer)
    try:
        checkpoints.mkdir(parents=True, exist_ok=True)
        # re-saving the same step (e.g. after a resume) replaces it
        with built_aside(checkpoints / name, owner=checkpoints) as folder:
            for file_name, data in files.items():
                write_bytes(folder / file_name, data, owner=folder)
    except OSError as error:
        last = read_index(checkpoints).get("last")
        kept = f"the last checkpoint {checkpoints / last} is intact" if last else "none was saved"
        what = f"saving checkpoint {name} in {checkpoints}"
        raise UserError(f"{describe_os_error(error, what)}; {kept}") from None
    return checkpoints / name


def index_pointers(checkpoints: Path) -> tuple[dict, str | None]:
    """The index's pointers, and why it could not be used (None when it was fine).

    A pointer is the name of a folder in ``checkpoints``: one that leaves it (an absolute path,
    ``..``, a link out of it: another model's checkpoint) is refused, never followed."""
    path = checkpoints / INDEX
    try:
        index = read_json(path)
    except UserError as error:  # missing, not JSON, too deep, too large: the caller falls back
        return {}, str(error)
    for key in ("last", "best"):
        if isinstance(index.get(key), str):
            entry_in(checkpoints, index[key], str(path), key)
    return index, None


def read_index(checkpoints: Path) -> dict:
    """The index's pointers ({"last": ..., "best": ...}); {} when missing or unreadable."""
    return index_pointers(checkpoints)[0]


def update_index(checkpoints: Path, **entries: object) -> dict:
    """Points ``last`` / ``best`` (and any other key) at checkpoint folders, atomically."""
    index = read_index(checkpoints)
    index.update(entries)
    write_json_atomic(checkpoints / INDEX, index, owner=checkpoints)
    return index


def step_checkpoints(checkpoints: Path) -> list[Path]:
    """The complete ``step_*`` checkpoint folders, oldest first."""
    return sorted(p for p in checkpoints.glob("step_*") if is_complete(p))


def is_complete(folder: Path) -> bool:
    return is_checkpoint_folder(folder)  # model.safetensors and config.json


@dataclass
class Loaded:
    """A model ready to use, with its config and the folder it came from."""

    model: EncoderDecoder
    config: RunConfig
    path: Path


def resolve_checkpoint(path: Path, which: str = "best") -> Path:
    """A checkpoint folder from a model directory (via index.json) or a checkpoint folder.

    Without a usable index (missing, unreadable, or pointing at a folder that is gone) the
    newest complete ``step_*`` folder is used, with a warning.
    """
    if (path / WEIGHTS).exists():
        return path
    if not path.exists():
        raise UserError(f"model directory not found: {path}")
    checkpoints = path / CHECKPOINTS
    index, problem = index_pointers(checkpoints)
    for key in (which, "last"):
        if isinstance(index.get(key), str) and is_complete(checkpoints / index[key]):
            return checkpoints / index[key]
    steps = step_checkpoints(checkpoints)
    if steps:
        problem = problem or f"{checkpoints / INDEX} names no complete checkpoint"
        log.warning(f"{problem}; using the newest complete checkpoint, {steps[-1]}")
        return steps[-1]
    raise UserError(f"{path} holds no checkpoint (expected {checkpoints / INDEX} or {WEIGHTS})")


def read_config(folder: Path) -> RunConfig:
    """The RunConfig saved in a checkpoint folder."""
    path = folder / CONFIG
    return build_config(read_json(path), str(path))


def load_checkpoint(path: Path, which: str = "best", device: torch.device | str = "cpu") -> Loaded:
    """Loads a model (in eval mode) from a model directory or a checkpoint folder.

    The weights are read on the CPU and then moved to ``device`` (a map_location), so a
    checkpoint written on any device loads on any other.
    """
    folder = resolve_checkpoint(Path(path), which)
    config = read_config(folder)
    model = build_model(config.model, str(folder / CONFIG))  # the Transformer or the RNN
    load_weights(model, folder / WEIGHTS)
    return Loaded(model.to(device).eval(), config, folder)


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a damaged or unreadable file, or one holding a
    non-finite weight (``check_weights_finite``), is a UserError naming it."""
    try:
        state = load(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path} is missing") from None
    except OSError as error:
        raise UserError(describe_os_error(error, f"reading {path}")) from None
    except SafetensorError as error:
        reason = str(error).rsplit(":", 1)[-1].strip()
        raise UserError(f"{path} is damaged ({reason}); it cannot be loaded") from None
    for name, tensor in state.items():
        check_weights_finite(tensor, name, path)
    return state


# The one tensor whose entries may be −inf: the output bias of a row that must never be produced
# (an imported model's padding row, an exported one's unused entries: hub/marian_vocab.py).
MAY_BE_MINUS_INF = ("output.bias", "final_logits_bias")


def check_weights_finite(tensor: torch.Tensor, name: str, path: Path) -> None:
    """A one-line UserError naming ``path`` and the tensor ``name`` if it holds a NaN or an
    infinity (−inf is allowed in an output bias, ``MAY_BE_MINUS_INF``, except in every entry):
    a search on such weights has no answer, and a training from them no gradient."""
    if not tensor.is_floating_point() or bool(tensor.isfinite().all()):
        return  # one pass for the weights of every model that loads
    minus_inf_allowed = name in MAY_BE_MINUS_INF
    bad = tensor.isnan() | (tensor == float("inf"))
    if not minus_inf_allowed:
        bad |= tensor == float("-inf")
    count = int(bad.sum())
    if count:
        first = tensor.flatten()[bad.flatten().nonzero()[0]].item()
        raise UserError(f"{path}: the tensor {name} holds {count:,} non-finite values (the "
                        f"first: {first}); these weights are damaged and not used")  # fmt: skip
    if minus_inf_allowed and tensor.numel() and bool((tensor == float("-inf")).all()):
        raise UserError(f"{path}: the tensor {name} is -inf in every entry, so no token can be "
                        "produced; these weights are damaged and not used")  # fmt: skip


def load_weights(model: EncoderDecoder, path: Path) -> None:
    """Copies safetensors weights into ``model``; names and shapes must match exactly."""
    state = weights_of(model, path)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])


def weights_of(model: EncoderDecoder, path: Path) -> dict[str, torch.Tensor]:
    """``read_weights``, whose names and shapes must be exactly ``model``'s (which may be on the
    meta device: only its shapes are read)."""
    state = read_weights(path)
    expected = model_state(model)
    if set(state) != set(expected):
        missing, unexpected = set(expected) - set(state), set(state) - set(expected)
        raise UserError(f"{path}: weights do not match the model (missing {sorted(missing)[:3]}, "
                        f"unexpected {sorted(unexpected)[:3]})")  # fmt: skip
    for name, tensor in expected.items():
        if state[name].shape != tensor.shape:
            raise UserError(f"{path}: {name} has shape {tuple(state[name].shape)}, the model "
                            f"{tuple(tensor.shape)}")  # fmt: skip
    return state


def model_dir_of(folder: Path) -> Path:
    """The model directory a checkpoint folder belongs to (``OUT/checkpoints/NAME`` -> ``OUT``)."""
    return folder.parent.parent if folder.parent.name == CHECKPOINTS else folder
