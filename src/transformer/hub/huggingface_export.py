"""``transformer export MODEL_DIR --to huggingface OUT``: a model directory as a Hugging Face
Marian folder, which ``MarianMTModel.from_pretrained(OUT)``, ``MarianTokenizer.from_pretrained
(OUT)`` and ``pipeline("translation", model=OUT)`` load unchanged (``transformers`` is not
needed to write it).

    OUT/config.json, generation_config.json   MarianConfig's keys (marian_config.py)
    OUT/model.safetensors                      the weights, Hugging Face's names (marian_weights.py)
    OUT/source.spm, target.spm                 our SentencePiece models
    OUT/vocab.json (+ target_vocab.json)       Marian's numbering of our pieces (marian_vocab.py)
    OUT/tokenizer_config.json                  MarianTokenizer's options
    OUT/transformer-export.json                what it was exported from

A model with the paper's interleaved sinusoids is written with its residual stream permuted
into Marian's sin | cos halves (``marian_weights.to_halves``): the same function, so greedy
translations agree text for text (tests/test_export_huggingface.py). What Marian cannot express
(pre-norm, learned positions, another layer-norm ε) is refused before any work, naming the
field. The search settings that carry over are the beam size and the end of sentence; GNMT's
length penalty has no equivalent in ``generate`` (which divides by |Y|^α), so Hugging Face's
own default applies there.

OUT follows the export rules (export/folder.py, through the write gate ``files.py``): missing,
empty or an earlier export holding only what it made; it is built aside and renamed into place.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import RunConfig
from ..data.tokenizer import Tokenizers
from ..export.folder import check_export_replaceable, export_folder
from ..files import mark_folder, write_bytes, write_json_atomic, write_text
from ..model.build import shapes_only
from ..model_dir.checkpoints import read_config, resolve_checkpoint
from ..model_dir.layout import CONFIG, HF_FORMAT, WEIGHTS, model_dir_of
from ..model_dir.settings import directory_settings
from ..model_dir.weights import weights_of
from ..vocab import BOS_ID
from .marian_config import check_exportable, generation_config, marian_config
from .marian_vocab import marian_from_ours, vocab_json
from .marian_weights import BIAS, export_names, halves_permutation, take_rows, to_halves
from .tensor_files import SAFETENSORS, write_safetensors

FORMAT = HF_FORMAT
VOCABULARY_TENSORS = ("src_embed.tokens.weight", "tgt_embed.tokens.weight", "output.weight")


def export_huggingface(
    model_dir: str | Path, out: str | Path, checkpoint: str | None = None
) -> Path:
    """Writes a model directory's checkpoint as a Hugging Face Marian folder ``out``.

    Args:
        model_dir: a model directory or one of its checkpoint folders.
        out: the export's folder: missing, empty or an earlier export (replaced).
        checkpoint: ``best`` or ``last`` of a model directory (None: best; None for a
            checkpoint folder).
    Returns:
        the checkpoint folder it was exported from.
    """
    out = Path(out)
    check_export_replaceable(out, model_dir)
    folder = resolve_checkpoint(Path(model_dir), checkpoint)
    config = directory_settings(Path(model_dir), folder, read_config(folder))  # its decode
    check_exportable(config.model)
    tokenizers = Tokenizers.load(model_dir_of(folder), config.model.vocab_sizes,
                                 str(folder / "config.json"))  # fmt: skip
    model = shapes_only(config.model, str(folder / CONFIG))  # checked against the weights
    state = weights_of(model, folder / WEIGHTS)
    with export_folder(out, model_dir) as staging:
        write_folder(staging, state, config, tokenizers)
        mark_folder(staging, "export", format=FORMAT, source=str(folder), config=config.to_dict())
    return folder


def write_folder(
    folder: Path, state: dict[str, torch.Tensor], config: RunConfig, tokenizers: Tokenizers
) -> None:
    """The Hugging Face files of a model (its weights ``state``, config and tokenizers) into the
    empty ``folder``."""
    model = config.model
    src_table, tgt_table = tokenizers.src.vocabulary(), tokenizers.tgt.vocabulary()
    separate = src_table != tgt_table
    size = max(len(src_table), len(tgt_table)) - 1  # less our padding row
    src_pieces, src_rows = marian_from_ours(src_table, size)
    tgt_pieces, tgt_rows = marian_from_ours(tgt_table, size)
    pad = tgt_rows.index(BOS_ID)  # the decoder's start: the last id (marian_vocab.py)

    names = export_names(model)
    rows = {"src_embed.tokens.weight": src_rows, "tgt_embed.tokens.weight": tgt_rows,
            "output.weight": tgt_rows}  # fmt: skip
    perm = halves_permutation(model.d_model) if model.positional_layout == "interleaved" else None
    shapes = {}
    for ours, theirs in names.items():
        shape = tuple(state[ours].shape) if ours in state else (model.tgt_vocab_size,)
        shapes[theirs] = (size, *shape[1:]) if ours in rows else shape
    shapes[BIAS] = (1, size)

    def tensors():
        for ours, theirs in names.items():
            if ours == "output.bias":  # unused entries can never be produced: −inf
                bias = state.get(ours, torch.zeros(model.tgt_vocab_size))
                yield theirs, take_rows(bias, tgt_rows, float("-inf"))[None]  # (1, V)
                continue
            tensor = state[ours] if perm is None else to_halves(ours, state[ours], perm)
            yield theirs, take_rows(tensor, rows[ours]) if ours in rows else tensor

    write_safetensors(folder / SAFETENSORS, shapes, tensors(), {"format": "pt"}, folder)
    write_json_atomic(folder / "config.json", marian_config(model, size, size), folder)
    generation = generation_config(pad, config.decode.beam_size, model.max_positions)
    write_json_atomic(folder / "generation_config.json", generation, folder)
    write_bytes(folder / "source.spm", tokenizers.src.model, folder)
    write_bytes(folder / "target.spm", tokenizers.tgt.model, folder)
    _write_vocab(folder / "vocab.json", src_pieces)
    if separate:
        _write_vocab(folder / "target_vocab.json", tgt_pieces)
    write_json_atomic(folder / "tokenizer_config.json", {
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": separate,
        "source_lang": config.data.src_lang, "target_lang": config.data.tgt_lang,
        "model_max_length": model.max_positions,
        "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
    }, folder)  # fmt: skip


def _write_vocab(path: Path, pieces: list[str]) -> None:
    write_text(path, json.dumps(vocab_json(pieces), ensure_ascii=False, indent=1), path.parent)
