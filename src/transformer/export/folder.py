"""The exported model's folder: what ``transformer export`` writes, and the rules that protect OUT.

    OUT/model.bin                      the weights, written by CTranslate2's spec API
    OUT/config.json                    CTranslate2's model config (special tokens, ε)
    OUT/shared_vocabulary.json         or source_ and target_vocabulary.json: pieces in id order
    OUT/tokenizer/                     our SentencePiece model(s), copied: joint.model, or
                                       src.model and tgt.model
    OUT/transformer-export.json        what this is (the export's folder-kind marker,
                                       ``model_dir.mark_folder``): the run's config, the
                                       checkpoint it came from, the quantization, the files made

Nothing a user has is lost: OUT must be missing, empty, or an earlier export (it has
``transformer-export.json``, written by this export or by ``--to huggingface``,
``hub/huggingface_export.py``) holding only the files that export made, and lie inside no other
project folder (``model_dir.check_replaceable``); anything else is refused before any work, and
a file of the user's in an earlier export is named, not deleted. The new export is built in a
hidden sibling folder and renamed into place once complete (``files.built_aside``): an
interruption leaves the old export or the new one, never half of one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig, build_config
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..files import built_aside, folder_kind, marker_name
from ..model.transformer import Transformer
from ..model_dir import check_replaceable, load_checkpoint, mark_folder, model_dir_of
from ..reading import in_range, read_json, typed
from .spec import check_expressible, import_ctranslate2, transformer_spec

MARKER = marker_name("export")  # transformer-export.json
FORMAT = "transformer/ctranslate2"
# What an export made before the marker listed its files holds.
MADE_BEFORE = {"model.bin", "config.json", "shared_vocabulary.json", "source_vocabulary.json",
               "target_vocabulary.json", "tokenizer", MARKER}  # fmt: skip
QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")


@dataclass(frozen=True)
class ExportInfo:
    """What an export's ``transformer-export.json`` says."""

    config: RunConfig  # the run's config: the model, its data (test split) and decode settings
    quantization: str
    source: str  # the checkpoint folder it was exported from
    # heads of the last decoder layer its attention averages (CTranslate2's alignment_heads);
    # exports written before word alignments existed have CTranslate2's default, 1
    alignment_heads: int = 1


def is_export(path: Path) -> bool:
    """Whether ``path`` is a folder that ``transformer export`` wrote."""
    return folder_kind(path) == "export"


def read_export(path: Path) -> ExportInfo:
    """Reads an export's ``transformer-export.json`` (a UserError names a damaged one)."""
    marker, origin = path / MARKER, str(path / MARKER)
    values = read_json(marker)
    if values.get("format") != FORMAT:
        raise UserError(f"{origin}: format = {values.get('format')!r}, expected {FORMAT!r}")
    config = build_config(typed(values, "config", dict, origin), origin)
    quantization = typed(values, "quantization", str, origin)
    if quantization not in QUANTIZATIONS:
        raise UserError(f"{origin}: quantization = {quantization!r}, expected one of "
                        f"{', '.join(QUANTIZATIONS)}")  # fmt: skip
    heads = typed(values, "alignment_heads", int, origin, 1)
    in_range(heads, 1, config.model.n_heads, origin, "alignment_heads", "the model's heads")
    return ExportInfo(config, quantization, typed(values, "source", str, origin), heads)


def save_model(
    model: Transformer,
    tokenizers: Tokenizers,
    config: RunConfig,
    folder: Path,
    quantization: str = "float32",
    source: str = "",
) -> None:
    """Writes a CTranslate2 model, its tokenizers and ``transformer-export.json`` into the empty
    ``folder`` (no atomicity here: ``export_model`` builds aside and renames)."""
    spec = transformer_spec(model, tokenizers.src.vocabulary(), tokenizers.tgt.vocabulary())
    spec.optimize(quantization=quantization)  # stores shared tables once, quantizes the weights
    spec.save(str(folder))
    tokenizers.save(folder)
    mark_export(folder, format=FORMAT, quantization=quantization, source=source,
                config=config.to_dict(), alignment_heads=model.config.n_heads)  # fmt: skip


def mark_export(folder: Path, **info: object) -> None:
    """Marks ``folder`` as an export, listing the entries in it (the only ones a later export
    may replace)."""
    files = sorted({p.name for p in folder.iterdir()} | {MARKER})
    mark_folder(folder, "export", **info, files=files)


def export_model(
    model_dir: str | Path, out: str | Path, quantization: str = "float32", checkpoint: str = "best"
) -> ExportInfo:
    """What ``transformer export MODEL_DIR --to ctranslate2 OUT`` does.

    Args:
        model_dir: a model directory or one of its checkpoint folders.
        out: the export's folder: missing, empty or an earlier export (replaced).
        quantization: the weights' type in the export: float32, int8 (int8 weights, computed
            in int8 with float32 elsewhere), int8_float32 or bfloat16.
        checkpoint: ``best`` or ``last`` of a model directory.
    """
    out = Path(out)
    import_ctranslate2()  # before any work: without it, say how to install it
    if quantization not in QUANTIZATIONS:
        raise UserError(f"unknown --quantization {quantization!r}; choose from "
                        f"{', '.join(QUANTIZATIONS)}")  # fmt: skip
    check_export_replaceable(out)
    loaded = load_checkpoint(Path(model_dir), checkpoint, "cpu")
    check_expressible(loaded.config.model)  # an RNN, say: refused before anything is written
    tokenizers = Tokenizers.load(model_dir_of(loaded.path))
    with built_aside(out, "export") as staging:
        save_model(loaded.model, tokenizers, loaded.config, staging, quantization, str(loaded.path))
    return ExportInfo(loaded.config, quantization, str(loaded.path))


def check_export_replaceable(out: Path) -> None:
    """OUT may be missing, an empty folder, or an earlier export holding only what it made;
    anything else is refused."""
    check_replaceable(out, "export", "OUT")
    if not out.exists() and not out.is_symlink():
        return
    entries = {p.name for p in out.iterdir()}
    if entries and not is_export(out):
        raise UserError(
            f"{out} is not empty and holds no earlier export ({MARKER}); nothing in it is "
            "replaced: choose a new or empty OUT"
        )
    foreign = sorted(entries - _made(out))
    if foreign:
        raise UserError(
            f"{out} holds {', '.join(foreign)}, which the earlier export did not make; nothing "
            "in it is replaced: move them out of it, or choose another OUT"
        )


def _made(export: Path) -> set[str]:
    """The entries an export made: listed in its marker, or those every export had before."""
    try:
        files = read_json(export / MARKER).get("files")
    except UserError:
        files = None
    if isinstance(files, list) and all(isinstance(name, str) for name in files):
        return set(files)
    return MADE_BEFORE
