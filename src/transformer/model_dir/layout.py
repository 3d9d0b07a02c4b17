"""A model directory's layout: the name of every file and folder in it, and what a folder is.

    MODEL_DIR/config.json            the RunConfig, with the real vocabulary sizes
    MODEL_DIR/tokenizer/             the SentencePiece model(s) (data/tokenizer.py)
    MODEL_DIR/checkpoints/           the checkpoints (checkpoints.py):
        index.json                   {"last": "step_00001000", "best": "step_00000800"}
        step_00001000/               model.safetensors, config.json, trainer.pt (a run's state)
    MODEL_DIR/metrics.jsonl          a run's log, one JSON object per line
    MODEL_DIR/tensorboard/           a run's TensorBoard events, when tensorboard is installed
    MODEL_DIR/data/train/            a run's binarized training set (data/binarized.py)
    MODEL_DIR/transformer-run.json   the marker: what the folder is
    MODEL_DIR/.lock, .staging/, ...  a training's lock and what --overwrite builds (runs.py)

Every folder a command makes says what it is with a marker file, ``transformer-KIND.json``:

    run      ``train`` or ``demo`` (its marker says which: ``made_by``; its entries are replaced
             one by one, never the folder: runs.py)
    export   ``export``, any format              replaced whole by the next export into it
    import   ``import`` (another toolkit's model) replaced whole by the next import into it
    report   ``compare``, ``attention``          replaced whole by the next report into it

A folder replaced whole lists in its marker every entry its command made (``files``): the next
command of its kind replaces it only if it holds nothing else (``files.check_replaceable``).
``files.mark_folder`` writes the markers; this module names and reads, and writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from ..reading import read_json

# A model directory's entries (a run has them all; an import has config, tokenizer, checkpoints).
CONFIG = "config.json"
TOKENIZER = "tokenizer"
CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
DATA = "data"
# Inside checkpoints/: the index, and in each checkpoint folder the weights and training's state
# (next to a copy of CONFIG).
INDEX = "index.json"
WHICH = ("best", "last")  # the checkpoints INDEX names
WEIGHTS = "model.safetensors"
TRAINER = "trainer.pt"
# A run's hidden entries: the training's lock, and what --overwrite and data preparation stage.
LOCK = ".lock"
STAGING = ".staging"  # a new run that --overwrite builds aside
REPLACED = ".replaced"  # the old run's entries during a swap
READY = "READY"  # in STAGING: the new run has a checkpoint; the swap may go ahead
SCRATCH = ".tmp-data"  # a binarized dataset being made, before the run adopts it

KINDS = ("run", "export", "import", "report")  # the project folders that carry a marker
WHOLE = ("export", "import", "report")  # the kinds a command replaces whole


def marker_name(kind: str) -> str:
    """The marker file of a project folder of ``kind``: ``transformer-run.json``, ..."""
    return f"transformer-{kind}.json"


# A run's own entries: only these are ever replaced in a run's folder (runs.py).
RUN_ENTRIES = (CONFIG, TOKENIZER, METRICS, TENSORBOARD, CHECKPOINTS, DATA, marker_name("run"))


def step_name(step: int) -> str:
    """The checkpoint folder of training step ``step``: ``step_00001000``."""
    return f"step_{step:08d}"


def folder_kind(path: str | Path) -> str | None:
    """What project folder ``path`` is: "run", "export", "import" or "report" (its marker), else
    None."""
    path = Path(path)
    if not path.is_dir():
        return None
    for kind in KINDS:
        if (path / marker_name(kind)).is_file():
            return kind
    return None


def is_checkpoint_folder(path: Path) -> bool:
    """A checkpoint (its weights and config), inside a run or copied alone."""
    return (path / WEIGHTS).is_file() and (path / CONFIG).is_file()


def ignored_choice(label: str, folder: str | Path, kind: str, leave: str = "it") -> str:
    """The one line refusing a checkpoint choice (``label``: "--checkpoint last", "checkpoint
    'last'") given with ``folder``, which is ``kind`` ("one checkpoint already", "an export",
    "none": no folder) and so would ignore it; ``leave``: what to leave out."""
    return (f"{label} picks a checkpoint of a model directory, and {folder} is {kind}: "
            f"leave {leave} out")  # fmt: skip


def kind_of(path: Path) -> str | None:
    """``folder_kind``, or "checkpoint" for a checkpoint folder."""
    return folder_kind(path) or ("checkpoint" if is_checkpoint_folder(path) else None)


def project_folder_of(path: str | Path) -> tuple[Path, str] | None:
    """The nearest folder above ``path`` (links resolved) that a command of this project made:
    (folder, kind), the kind being run, export, import, report or checkpoint; None if none."""
    for folder in Path(os.path.realpath(path)).parents:
        kind = kind_of(folder)
        if kind is not None:
            return folder, kind
    return None


def describe_folder(folder: Path, kind: str) -> str:
    """The folder as messages name it: the run /a/b (transformer-run.json), ..."""
    marker = folder / marker_name(kind)
    return f"the {kind} {folder}" + (f" ({marker.name})" if marker.is_file() else "")


def marker_field(folder: Path, kind: str, key: str) -> object:
    """``key`` of ``folder``'s marker of ``kind``; None where the marker lacks it or is damaged
    (a damaged marker says nothing)."""
    try:
        return read_json(folder / marker_name(kind)).get(key)
    except UserError:
        return None


def made_entries(folder: Path, kind: str) -> set[str]:
    """The entries of ``folder`` that its command made: those its marker lists (none for a
    damaged marker)."""
    files = marker_field(folder, kind, "files")
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        return set(files)
    return set()


def model_dir_of(folder: Path) -> Path:
    """The model directory a checkpoint folder belongs to (``OUT/checkpoints/NAME`` -> ``OUT``)."""
    return folder.parent.parent if folder.parent.name == CHECKPOINTS else folder


# What ``transformer export`` writes (its marker's "format"), for CTranslate2 and Hugging Face
CT2_FORMAT, HF_FORMAT = "transformer/ctranslate2", "transformer/huggingface"


def export_refusal(path: Path, what: str = "") -> UserError:
    """The one-line error for an export given where a model directory is needed (``what``: the
    option that named it, ``train.init_from``): a CTranslate2 export translates with
    ``--engine ctranslate2``; otherwise the message names the checkpoint it was exported from,
    and for a Hugging Face export ``transformer import``, which makes a model directory of it. A
    marker of another format is named as damaged."""
    marker = path / marker_name("export")
    values = read_json(marker)
    found = values.get("format")
    if found not in (CT2_FORMAT, HF_FORMAT):
        return UserError(f"{marker}: format = {found!r}, expected {CT2_FORMAT!r} or "
                         f"{HF_FORMAT!r}")  # fmt: skip
    named = f"{what} {path}" if what else str(path)
    if found == CT2_FORMAT and not what:
        return UserError(f"{named} is a CTranslate2 export; use it with --engine ctranslate2")
    source = values.get("source")
    came = f" ({source})" if isinstance(source, str) else ""
    hub = f", or make a model directory of it with `transformer import {path} OUT`" if (
        found == HF_FORMAT) else ""  # fmt: skip
    return UserError(f"{named} is an export in the format {found!r}, not a model directory: "
                     f"use the checkpoint it was exported from{came}{hub}")  # fmt: skip
