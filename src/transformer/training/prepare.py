"""From a RunConfig to token-id examples: corpus -> splits -> SentencePiece -> filtered pairs.

The model's vocabulary sizes come from the tokenizers trained here; ``save`` writes them and the
completed config into the run's folder. On ``--resume`` the saved tokenizers are reused.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace

from ..config import RunConfig
from ..data.batching import Example, encode_source
from ..data.corpora import load_splits
from ..data.splits import Splits
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from .rundir import RunDir

log = logging.getLogger(__name__)

# Settings that may change when a run is resumed; anything else must stay as it was.
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_epochs", "max_minutes", "log_every", "validate_every",
                        "bleu_sentences", "best_metric", "save_every", "keep_checkpoints",
                        "cooldown"}  # fmt: skip


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


def check_resumable(saved: RunConfig, requested: RunConfig) -> None:
    """A resumed run may only change the limits and bookkeeping of training."""
    for section in ("model", "data", "train"):  # decode and runtime may change freely
        old, new = asdict(getattr(saved, section)), asdict(getattr(requested, section))
        for key, value in new.items():
            if key in ("src_vocab_size", "tgt_vocab_size"):
                continue
            if section == "train" and key in RESUMABLE_TRAIN_KEYS:
                continue
            if old[key] != value:
                raise UserError(
                    f"--resume: {section}.{key} was {old[key]!r} in the saved run, now {value!r}; "
                    "only train limits and bookkeeping can change when resuming"
                )


def prepare(config: RunConfig, run: RunDir, resume: bool) -> Prepared:
    """Loads the corpus, trains (or reloads) the tokenizers, and encodes and filters the pairs.

    Everything is validated and nothing is written (``save`` does that), so a mistake in the
    data or the config never leaves a half-made run behind.
    """
    if resume:
        check_resumable(run.saved_config(), config)
    splits: Splits = load_splits(config.data)
    if not splits.train:
        raise UserError(f"no training pairs in {splits.source}")
    if resume:
        tokenizers = Tokenizers.load(run.root)
    else:
        tokenizers = Tokenizers.train(splits.train, config.data)
    sizes = tokenizers.src.vocab_size, tokenizers.tgt.vocab_size
    try:
        model = replace(config.model, src_vocab_size=sizes[0], tgt_vocab_size=sizes[1])
    except ValueError as error:
        raise UserError(f"{error}: the tokenizers have {sizes[0]} and {sizes[1]} pieces; "
                        "set data.joint_vocab: true to share embeddings") from None  # fmt: skip
    config = replace(config, model=model)

    max_len = min(config.data.max_len, config.model.max_positions)
    train, _ = encode_pairs(splits.train, tokenizers, max_len)
    if not train:
        raise UserError(
            f"every training pair is longer than data.max_len={max_len} tokens on one side; "
            "raise data.max_len (and model.max_positions)"
        )
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
    _say_what_was_left_out(stats, config, max_len, resume)
    return Prepared(
        config, tokenizers, train, valid, [splits.valid[i] for i in kept], splits.test, stats
    )


def _say_what_was_left_out(stats: dict, config: RunConfig, max_len: int, resume: bool) -> None:
    """Warnings for what the data pipeline dropped or capped, with counts: never silently."""
    for split in ("train", "valid"):
        dropped = stats[f"filtered_long_{split}"]
        if dropped:
            total = dropped + stats[f"{split}_pairs"]
            log.warning(
                f"{dropped:,} of {total:,} {split} pairs ({100 * dropped / total:.2g}%) are longer "
                f"than data.max_len={max_len} tokens on one side and were left out"
            )
    if stats["skipped_empty"]:
        log.warning(f"{stats['skipped_empty']:,} pairs with an empty side were left out")
    asked, src, tgt = config.data.vocab_size, stats["src_vocab"], stats["tgt_vocab"]
    if not resume and max(src, tgt) < asked:
        sides = f"{src}" if config.data.joint_vocab else f"{src} (source) and {tgt} (target)"
        log.warning(
            f"data.vocab_size is {asked:,} but the training text supports only {sides} "
            "SentencePiece pieces; the vocabulary is that size"
        )


def save(prepared: Prepared, run: RunDir) -> None:
    """Writes the tokenizers and the completed config into the run's folder."""
    prepared.tokenizers.save(run.root)
    run.save_config(prepared.config.to_dict())
