"""What a folder is: a project folder that a command of this project made, or the user's own.

Every folder a command makes says what it is with a marker file, ``transformer-KIND.json``:

    run      ``train`` (its entries are replaced one by one, never the folder: training/rundir.py)
    export   ``export``, any format              replaced whole by the next export into it
    import   ``import`` (another toolkit's model) replaced whole by the next import into it
    report   ``compare``                         replaced whole by the next report into it

A folder replaced whole lists in its marker every entry its command made (``files``): the next
command of its kind replaces it only if it holds nothing else (``files.check_replaceable``).
``files.mark_folder`` writes the markers; this module only reads them, and writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError
from .reading import read_json

KINDS = ("run", "export", "import", "report")  # the project folders that carry a marker
WHOLE = ("export", "import", "report")  # the kinds a command replaces whole


def marker_name(kind: str) -> str:
    """The marker file of a project folder of ``kind``: ``transformer-run.json``, ..."""
    return f"transformer-{kind}.json"


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
    """A checkpoint (``model.safetensors`` and ``config.json``), inside a run or copied alone."""
    return (path / "model.safetensors").is_file() and (path / "config.json").is_file()


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


def made_entries(folder: Path, kind: str) -> set[str]:
    """The entries of ``folder`` that its command made: those its marker lists (none for a
    damaged marker)."""
    try:
        files = read_json(folder / marker_name(kind)).get("files")
    except UserError:  # a damaged marker lists nothing
        files = None
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        return set(files)
    return set()
