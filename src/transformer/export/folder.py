"""The exported model's folder: what ``transformer export`` writes, and the rules that protect OUT.

    OUT/model.bin                      the weights, written by CTranslate2's spec API
    OUT/config.json                    CTranslate2's model config (special tokens, ε)
    OUT/shared_vocabulary.json         or source_ and target_vocabulary.json: pieces in id order
    OUT/tokenizer/                     our SentencePiece model(s), copied: joint.model, or
                                       src.model and tgt.model
    OUT/transformer-export.json        what this is (the export's folder-kind marker,
                                       ``files.mark_folder``): the run's config, the
                                       checkpoint it came from, the quantization, the files made

Nothing a user has is lost: OUT goes through the write gate (``files.replace_folder``, the same
for ``--to huggingface``, ``hub/huggingface_export.py``). It must be missing, empty, or an
earlier export holding only the files that export made (listed in its marker), and lie inside
no project folder nor inside MODEL_DIR; anything else is refused before any work, and a file of
the user's in an earlier export is named, not deleted. The new export is built in a hidden
sibling folder and renamed into place once complete: an interruption leaves the old export or
the new one, never half of one, and the next export into OUT cleans what it left aside.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig, build_config
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..files import check_replaceable, mark_folder, replace_folder
from ..model.transformer import Transformer
from ..model_dir.checkpoints import load_checkpoint
from ..model_dir.layout import CT2_FORMAT, export_refusal, folder_kind, marker_name, model_dir_of
from ..reading import in_range, read_json, typed
from .spec import check_expressible, import_ctranslate2, transformer_spec

MARKER = marker_name("export")  # transformer-export.json
FORMAT = CT2_FORMAT
QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")


@dataclass(frozen=True)
class ExportInfo:
    """What an export's ``transformer-export.json`` says."""

    config: RunConfig  # the run's config: the model, its data (test split) and decode settings
    quantization: str
    source: str  # the checkpoint folder it was exported from
    alignment_heads: int  # heads of the last decoder layer its attention averages (CTranslate2's)


def is_export(path: Path) -> bool:
    """Whether ``path`` is a folder that ``transformer export`` wrote."""
    return folder_kind(path) == "export"


def read_export(path: Path) -> ExportInfo:
    """Reads an export's ``transformer-export.json`` (a UserError names a damaged one)."""
    marker, origin = path / MARKER, str(path / MARKER)
    values = read_json(marker)
    if values.get("format") != FORMAT:
        raise export_refusal(path)
    config = build_config(typed(values, "config", dict, origin), origin)
    quantization = typed(values, "quantization", str, origin)
    if quantization not in QUANTIZATIONS:
        raise UserError(f"{origin}: quantization = {quantization!r}, expected one of "
                        f"{', '.join(QUANTIZATIONS)}")  # fmt: skip
    heads = typed(values, "alignment_heads", int, origin)
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
    ``folder`` (no atomicity here: ``export_model`` builds aside and renames). CTranslate2 writes
    its own files (``spec.save``) into that folder, which the write gate made."""
    spec = transformer_spec(model, tokenizers.src.vocabulary(), tokenizers.tgt.vocabulary())
    spec.optimize(quantization=quantization)  # stores shared tables once, quantizes the weights
    spec.save(str(folder))
    tokenizers.save(folder)
    mark_folder(folder, "export", format=FORMAT, quantization=quantization, source=source,
                config=config.to_dict(), alignment_heads=model.config.n_heads)  # fmt: skip


def export_model(
    model_dir: str | Path,
    out: str | Path,
    quantization: str = "float32",
    checkpoint: str | None = None,
) -> ExportInfo:
    """What ``transformer export MODEL_DIR --to ctranslate2 OUT`` does.

    Args:
        model_dir: a model directory or one of its checkpoint folders.
        out: the export's folder: missing, empty or an earlier export (replaced).
        quantization: the weights' type in the export: float32, int8 (int8 weights, computed
            in int8 with float32 elsewhere), int8_float32 or bfloat16.
        checkpoint: ``best`` or ``last`` of a model directory (None: best; None for a
            checkpoint folder).
    """
    out = Path(out)
    import_ctranslate2()  # before any work: without it, say how to install it
    if quantization not in QUANTIZATIONS:
        raise UserError(f"unknown --quantization {quantization!r}; choose from "
                        f"{', '.join(QUANTIZATIONS)}")  # fmt: skip
    check_export_replaceable(out, model_dir)
    loaded = load_checkpoint(Path(model_dir), checkpoint, "cpu")
    check_expressible(loaded.config.model)  # an RNN, say: refused before anything is written
    tokenizers = Tokenizers.load(model_dir_of(loaded.path), loaded.config.model.vocab_sizes,
                                 str(loaded.path / "config.json"))  # fmt: skip
    with export_folder(out, model_dir) as staging:
        save_model(loaded.model, tokenizers, loaded.config, staging, quantization, str(loaded.path))
    return ExportInfo(loaded.config, quantization, str(loaded.path), loaded.config.model.n_heads)


def check_export_replaceable(out: Path, model_dir: str | Path) -> None:
    """OUT may be missing, an empty folder, or an earlier export holding only what it made, and
    lie inside no project folder nor inside MODEL_DIR (``files.check_replaceable``)."""
    check_replaceable(out, "export", "OUT", {"MODEL_DIR": model_dir})


def export_folder(out: Path, model_dir: str | Path) -> AbstractContextManager[Path]:
    """The folder to build an export of ``model_dir`` in; renamed to ``out`` when the block
    ends, which must mark it (``files.replace_folder``)."""
    return replace_folder(out, "export", "OUT", {"MODEL_DIR": model_dir})
