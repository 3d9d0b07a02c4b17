"""From a RunConfig to token-id examples: corpus -> splits -> SentencePiece -> filtered pairs.

The model's vocabulary sizes come from the tokenizers trained here, and the completed config
is written to ``OUT/config.json``. On ``--resume`` the saved tokenizers and config are reused.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .batching import Example, encode_source
from .checkpoint import write_json_atomic
from .config import RunConfig
from .data import Splits, load_splits
from .errors import UserError
from .tokenizer import Tokenizers

# Settings that may change when a run is resumed; anything else must stay as it was.
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_epochs", "max_minutes", "log_every", "validate_every",
                        "bleu_sentences", "save_every", "keep_checkpoints", "threads"}  # fmt: skip


@dataclass
class Prepared:
    """Everything the training loop needs from the data."""

    config: RunConfig  # with the real vocabulary sizes
    tokenizers: Tokenizers
    train: list[Example]
    valid: list[Example]
    valid_pairs: list[tuple[str, str]]  # raw text, for BLEU
    test_pairs: list[tuple[str, str]]
    stats: dict[str, object]


def encode_pairs(
    pairs: list[tuple[str, str]], tokenizers: Tokenizers, max_len: int
) -> tuple[list[Example], list[int]]:
    """Token ids for each pair; pairs longer than ``max_len`` on either side are left out.

    Returns:
        the examples, and the indices (into ``pairs``) of the pairs that were kept.
    """
    sources = tokenizers.src.encode_batch([src for src, _ in pairs])
    targets = tokenizers.tgt.encode_batch([tgt for _, tgt in pairs])
    examples, kept = [], []
    for i, (src_ids, tgt_ids) in enumerate(zip(sources, targets, strict=True)):
        example = Example(encode_source(src_ids), tgt_ids)
        src_len, tgt_len = example.cost
        if src_len <= max_len and tgt_len <= max_len:
            examples.append(example)
            kept.append(i)
    return examples, kept


def saved_config(out_dir: Path) -> RunConfig:
    """The RunConfig of an existing run."""
    path = out_dir / "config.json"
    if not path.exists():
        raise UserError(f"{out_dir} holds no run to resume ({path} is missing)")
    return RunConfig.from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))


def check_resumable(saved: RunConfig, requested: RunConfig) -> None:
    """A resumed run may only change the limits and bookkeeping of training."""
    for section in ("model", "data", "decode", "train"):
        old, new = asdict(getattr(saved, section)), asdict(getattr(requested, section))
        for key, value in new.items():
            if key in ("src_vocab_size", "tgt_vocab_size"):
                continue
            if section == "decode" or (section == "train" and key in RESUMABLE_TRAIN_KEYS):
                continue
            if old[key] != value:
                raise UserError(
                    f"--resume: {section}.{key} was {old[key]!r} in the saved run, now {value!r}; "
                    "only train limits and bookkeeping can change when resuming"
                )


def prepare(config: RunConfig, out_dir: Path, resume: bool, overwrite: bool) -> Prepared:
    """Loads the corpus, trains (or reloads) the tokenizers, and encodes and filters the pairs."""
    if resume:
        check_resumable(saved_config(out_dir), config)
    elif (out_dir / "config.json").exists() or (out_dir / "checkpoints").exists():
        if not overwrite:
            raise UserError(
                f"{out_dir} already holds a training run; use --resume to continue it, "
                "--overwrite to replace it, or choose another --out"
            )
        for name in ("checkpoints", "tokenizer", "tensorboard"):
            shutil.rmtree(out_dir / name, ignore_errors=True)
        for name in ("config.json", "metrics.jsonl"):
            (out_dir / name).unlink(missing_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)

    splits: Splits = load_splits(config.data)
    if not splits.train:
        raise UserError(f"no training pairs in {splits.source}")
    if resume:
        tokenizers = Tokenizers.load(out_dir)
    else:
        tokenizers = Tokenizers.train(splits.train, config.data, out_dir)
    sizes = tokenizers.src.vocab_size, tokenizers.tgt.vocab_size
    try:
        model = replace(config.model, src_vocab_size=sizes[0], tgt_vocab_size=sizes[1])
    except ValueError as error:
        raise UserError(f"{error}: the tokenizers have {sizes[0]} and {sizes[1]} pieces; "
                        "set data.joint_vocab: true to share embeddings") from None  # fmt: skip
    config = replace(config, model=model)
    write_json_atomic(out_dir / "config.json", config.to_dict())

    max_len = min(config.data.max_len, config.model.max_positions)
    train, _ = encode_pairs(splits.train, tokenizers, max_len)
    if not train:
        raise UserError(f"every training pair is longer than data.max_len={max_len} tokens")
    valid, kept = encode_pairs(splits.valid, tokenizers, max_len)
    stats = {
        "source": splits.source,
        "train_pairs": len(train),
        "valid_pairs": len(valid),
        "test_pairs": len(splits.test),
        "skipped_empty": splits.skipped_empty,
        "filtered_long_train": len(splits.train) - len(train),
        "filtered_long_valid": len(splits.valid) - len(valid),
        "src_vocab": tokenizers.src.vocab_size,
        "tgt_vocab": tokenizers.tgt.vocab_size,
    }
    return Prepared(
        config, tokenizers, train, valid, [splits.valid[i] for i in kept], splits.test, stats
    )
