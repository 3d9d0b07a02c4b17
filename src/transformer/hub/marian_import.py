"""``transformer import SOURCE OUT``: a Hugging Face Marian model (OPUS-MT) as a model directory.

SOURCE is a local folder in Hugging Face's Marian layout, or a Hub name such as
``Helsinki-NLP/opus-mt-fr-en``, fetched with ``huggingface_hub.snapshot_download`` (the optional
``hub`` extra). What is read, in the order it is checked:

    config.json                     the model (marian_config.py)
    tokenizer_config.json           separate_vocabs, source_lang, target_lang (optional)
    source.spm, target.spm          the SentencePiece models, copied as they are
    vocab.json (+ target_vocab.json with separate vocabularies)   the ids (marian_vocab.py)
    model.safetensors, else pytorch_model.bin   the weights (tensor_files.py)

OUT becomes an ordinary model directory, so every command that takes MODEL_DIR works on it:

    OUT/config.json, OUT/tokenizer/ (VocabTokenizers), OUT/checkpoints/step_00000000/
    OUT/transformer-import.json     what it was imported from

Everything is read and checked before anything is written: a wrong folder, a missing file, a
config value or vocabulary size our model cannot take, or a damaged weights file is a one-line
error and OUT is untouched. OUT goes through the write gate (``files.replace_folder``): it may
be missing, empty, or an earlier import holding only what that import made (a file of the
user's in it is named, not deleted), and lie inside no project folder; it is built in a hidden
sibling folder and renamed into place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import DataConfig, DecodeConfig, RunConfig
from ..data.tokenizer import Tokenizers
from ..data.vocab_tokenizer import VocabTokenizer
from ..errors import BadValue, UserError
from ..files import check_replaceable, mark_folder, replace_folder, write_json_atomic
from ..model.build import check_memory, shapes_only
from ..model.embeddings import sinusoidal_table
from ..model_dir.checkpoints import update_index
from ..model_dir.layout import CHECKPOINTS, CONFIG, WEIGHTS, marker_name, step_name
from ..model_dir.weights import check_weights_finite, model_state
from ..reading import in_range, read_bytes, read_json, typed
from .marian_config import MarianModel, model_config
from .marian_vocab import Rows, ours_from_marian, read_vocab
from .marian_weights import BIAS, LM_HEAD, POSITIONS, layer_names, table_names, take_rows
from .tensor_files import WeightFile, write_safetensors

MARKER = marker_name("import")  # transformer-import.json
FORMAT = "transformer/marian-import"
CHECKPOINT = step_name(0)
HUB_HINT = "pip install 'transformer[hub]' (or pip install huggingface_hub)"
HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")
# What snapshot_download fetches: never the TensorFlow, Flax or Rust copies of the weights.
HUB_FILES = ["*.json", "*.spm", "model.safetensors"]
MAX_BEAMS = 1024  # the widest default beam an import takes from generation_config.json


@dataclass
class MarianFolder:
    """A Marian folder, read and checked: the model, its tokenizers, its weights, and for each
    of our ids of either side the Marian row it comes from (marian_vocab.py)."""

    model: MarianModel
    tokenizers: Tokenizers
    weights: WeightFile
    src_rows: Rows
    tgt_rows: Rows


@dataclass(frozen=True)
class ImportInfo:
    source: str  # as given: a folder or a Hub name
    out: Path
    config: RunConfig


def import_marian(source: str, out: str | Path, **decode: object) -> ImportInfo:
    """What ``transformer import SOURCE OUT`` does (see the module docstring).

    Args:
        source: a local Marian folder, or a Hugging Face Hub name.
        out: the model directory to write: missing, empty, or an earlier import.
        decode: DecodeConfig fields saved as the imported model's default search.
    """
    out = Path(out)
    check_replaceable(out, "import", "OUT", {})
    folder = local_folder(source)
    marian = read_marian(folder)
    model, tokenizers = marian.model, marian.tokenizers
    try:
        default = DecodeConfig(beam_size=_num_beams(folder))
        search = default.with_search(**decode)
    except BadValue as error:
        raise UserError(str(error)) from None
    if search.target_language:  # a default language: one the model has (checked now)
        tokenizers.for_target_language(search.target_language)
    src_lang, tgt_lang = _languages(folder, source)
    data = DataConfig(corpus=None, src_lang=src_lang, tgt_lang=tgt_lang,
                      joint_vocab=model.model.share_embeddings)  # fmt: skip
    config = RunConfig(model=model.model, data=data, decode=search)
    with replace_folder(out, "import", "OUT", {}) as staging:
        tokenizers.save(staging)
        checkpoint = staging / CHECKPOINTS / CHECKPOINT
        checkpoint.mkdir(parents=True)
        _write_weights(checkpoint / WEIGHTS, marian, owner=staging)
        write_json_atomic(checkpoint / CONFIG, config.to_dict(), owner=staging)
        update_index(staging / CHECKPOINTS, last=CHECKPOINT, best=CHECKPOINT)
        write_json_atomic(staging / CONFIG, config.to_dict(), owner=staging)
        mark_folder(staging, "import", format=FORMAT, source=source,
                    folder=str(folder.resolve()))  # fmt: skip
    return ImportInfo(source, out, config)


def local_folder(source: str) -> Path:
    """SOURCE as a local folder: itself, or the Hub snapshot ``huggingface_hub`` fetched."""
    path = Path(source)
    if path.exists():
        if not path.is_dir():
            raise UserError(f"{source} is not a folder; SOURCE is a Marian model's folder or a "
                            "Hugging Face Hub name")  # fmt: skip
        return path
    if not HUB_NAME.fullmatch(source):
        raise UserError(f"{source}: no such folder, nor a Hub name (OWNER/NAME)")
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
    except ImportError:
        raise UserError(f"{source} is not a folder here; to fetch it from the Hugging Face Hub, "
                        f"install huggingface_hub: {HUB_HINT}") from None  # fmt: skip
    try:
        snapshot = Path(snapshot_download(repo_id=source, allow_patterns=HUB_FILES))
        if not (snapshot / "model.safetensors").is_file():  # older repositories: pickled only
            hf_hub_download(repo_id=source, filename="pytorch_model.bin")
            snapshot = Path(snapshot_download(repo_id=source, allow_patterns=HUB_FILES +
                                              ["pytorch_model.bin"]))  # fmt: skip
    except Exception as error:  # huggingface_hub's errors: network, missing repository, ...
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise UserError(f"could not fetch {source} from the Hugging Face Hub: {reason}") from None
    return snapshot


def read_marian(folder: Path) -> MarianFolder:
    """Reads and checks everything an import needs from a Marian folder; writes nothing."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise UserError(f"{folder} is not a Hugging Face model folder: config.json is missing")
    model = model_config(read_json(config_path), str(config_path))
    check_memory(model.model, str(config_path))
    options = _read_optional(folder / "tokenizer_config.json")
    separate = typed(options, "separate_vocabs", bool, str(folder / "tokenizer_config.json"), False)
    for name in ("source.spm", "target.spm", "vocab.json") + (("target_vocab.json",) * separate):
        if not (folder / name).is_file():
            raise UserError(f"{folder} is not a complete Marian model: {name} is missing")
    src_pieces = read_vocab(folder / "vocab.json")
    tgt_path = folder / ("target_vocab.json" if separate else "vocab.json")
    tgt_pieces = read_vocab(tgt_path) if separate else src_pieces
    for pieces, size, path, key in ((src_pieces, model.src_vocab, folder / "vocab.json",
                                     "vocab_size"), (tgt_pieces, model.tgt_vocab, tgt_path,
                                     "decoder_vocab_size")):  # fmt: skip
        if len(pieces) != size:
            raise UserError(f"{path} has {len(pieces)} entries but {config_path} says "
                            f"{key} = {size}")  # fmt: skip
    src_table, src_rows = ours_from_marian(src_pieces, folder / "vocab.json")
    tgt_table, tgt_rows = ours_from_marian(tgt_pieces, tgt_path)
    if tgt_rows[2:4] != [model.start, model.eos]:  # our BOS and EOS rows
        raise UserError(f"{config_path}: decoder_start_token_id = {model.start} and eos_token_id "
                        f"= {model.eos}, but {tgt_path} has <pad> at {tgt_rows[2]} and </s> at "
                        f"{tgt_rows[3]}")  # fmt: skip
    tokenizers = Tokenizers(
        VocabTokenizer(read_bytes(folder / "source.spm"), src_table, str(folder / "source.spm")),
        VocabTokenizer(read_bytes(folder / "target.spm"), tgt_table, str(folder / "target.spm")),
    )
    weights = WeightFile(folder)
    _check_weights(weights, model)
    return MarianFolder(model, tokenizers, weights, src_rows, tgt_rows)


def _check_weights(weights: WeightFile, model: MarianModel) -> None:
    """Every tensor the model needs is there with its shape; nothing else is (a few known
    duplicates aside); stored positions are Marian's sinusoids."""
    config = model.model
    shapes = shapes_only(config, fits=False)
    expected = {n: tuple(t.shape) for n, t in model_state(shapes).items()}
    names = {**layer_names(config), **table_names(config, set(weights.shapes))}
    vocab = {"src_embed.tokens.weight": model.src_vocab, "tgt_embed.tokens.weight":
             model.tgt_vocab, "output.weight": model.tgt_vocab,
             "output.bias": model.tgt_vocab}  # fmt: skip
    for ours, shape in expected.items():
        theirs = names[ours]
        if ours in vocab:  # Marian's rows: ours less our padding row
            shape = (1, vocab[ours]) if theirs == BIAS else (vocab[ours], *shape[1:])
        if theirs == BIAS and theirs not in weights.shapes:
            continue  # Hugging Face takes zeros for a missing final_logits_bias
        if theirs not in weights.shapes:
            raise UserError(f"{weights.path} has no {theirs}; it is not a MarianMTModel's")
        if weights.shapes[theirs] != shape:
            raise UserError(f"{weights.path}: {theirs} has shape {weights.shapes[theirs]}, but "
                            f"config.json and the vocabulary make it {shape}")  # fmt: skip
    duplicates = {"model.shared.weight", "model.encoder.embed_tokens.weight",
                  "model.decoder.embed_tokens.weight", *POSITIONS} | (
                      {LM_HEAD} if config.tie_output else set())  # fmt: skip
    unknown = sorted(set(weights.shapes) - set(names.values()) - duplicates)
    if unknown:
        raise UserError(f"{weights.path} holds weights a Marian model does not have: "
                        f"{', '.join(unknown[:3])}")  # fmt: skip
    for theirs in sorted(set(names.values()) & set(weights.shapes)):  # one tensor at a time
        check_weights_finite(weights.get(theirs), theirs, weights.path)
        weights.release()  # its pages leave resident memory, not to pile up under the next
    table = sinusoidal_table(config.max_positions, config.d_model, "halves")  # (P, D)
    for name in POSITIONS:
        if name in weights.shapes:  # written by older versions; Marian's are fixed sinusoids
            stored = weights.get(name)
            if stored.shape != table.shape or not torch.allclose(stored, table, atol=1e-3):
                raise UserError(f"{weights.path}: {name} are not Marian's sinusoidal positions; "
                                "learned positions cannot be imported")  # fmt: skip


def _write_weights(path: Path, marian: MarianFolder, owner: Path) -> None:
    """Our checkpoint's weights, converted one tensor at a time (vocabulary rows renumbered)."""
    model, weights = marian.model, marian.weights
    config = model.model
    shapes = {n: tuple(t.shape) for n, t in model_state(shapes_only(config, fits=False)).items()}
    names = {**layer_names(config), **table_names(config, set(weights.shapes))}
    rows = {"src_embed.tokens.weight": marian.src_rows, "tgt_embed.tokens.weight":
            marian.tgt_rows, "output.weight": marian.tgt_rows}  # fmt: skip

    def tensors():
        for ours in shapes:
            theirs = names[ours]
            if ours == "output.bias":  # our padding row can never be produced: −inf
                bias = weights.get(theirs).flatten() if theirs in weights.shapes else (
                    torch.zeros(model.tgt_vocab))  # fmt: skip
                yield ours, take_rows(bias, marian.tgt_rows, float("-inf"))
            elif ours in rows:
                yield ours, take_rows(weights.get(theirs), rows[ours])
            else:
                yield ours, weights.get(theirs)

    write_safetensors(path, shapes, tensors(), {"format": "pt"}, owner)


def _read_optional(path: Path) -> dict:
    """A JSON object that may be missing ({})."""
    return read_json(path) if path.exists() or path.is_symlink() else {}


def _num_beams(folder: Path) -> int:
    """The beam the model was published with (generation_config.json, else config.json): an
    integer from 1 to ``MAX_BEAMS``, else a one-line error naming the file."""
    for path in (folder / "generation_config.json", folder / "config.json"):
        beams = typed(_read_optional(path), "num_beams", (int, None), str(path), None)
        if beams is not None:
            why = "the widest default beam an import takes"
            return int(in_range(beams, 1, MAX_BEAMS, str(path), "num_beams", why))
    return DecodeConfig().beam_size


def _languages(folder: Path, source: str) -> tuple[str, str]:
    """Source and target language codes: tokenizer_config.json's, else the name's
    (opus-mt-SRC-TGT), else "src" and "tgt"."""
    path = folder / "tokenizer_config.json"
    options = _read_optional(path)
    src, tgt = (typed(options, key, (str, None), str(path), None)
                for key in ("source_lang", "target_lang"))  # fmt: skip
    if src and tgt:
        return src, tgt
    found = re.search(r"opus-mt-([^-/]+)-([^-/]+)$", source.rstrip("/"))
    return (found.group(1), found.group(2)) if found else ("src", "tgt")
