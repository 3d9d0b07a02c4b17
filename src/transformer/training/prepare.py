"""From a RunConfig to token ids: corpus -> splits -> SentencePiece -> binarized pairs.

The corpus is streamed, never held whole: SentencePiece trains on a bounded random sample of
the training pairs (``data.tokenizer_sample``), and the pairs are encoded chunk by chunk into a
memory-mapped dataset (``data/binarized.py``). The model's vocabulary sizes come from the
tokenizers trained here; ``save`` writes them, the completed config and the dataset into the
run's folder. On ``--resume`` the saved tokenizers (and, when it still fits, the dataset) are
reused. Fine-tuning (``train.init_from``) trains no tokenizer: the data is encoded with the
starting model's, and the model keeps that model's architecture (``starting_point``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..config import ModelConfig, RunConfig
from ..data.batching import Example, encode_source
from ..data.binarized import Binarized, TokenDataset, binarize, read_meta
from ..data.corpora import stream_splits
from ..data.readers import Pair
from ..data.splits import PairStream
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..files import remove_tree
from ..model.build import check_memory
from ..model_dir.checkpoints import read_config, resolve_checkpoint
from ..model_dir.layout import export_refusal, folder_kind, model_dir_of
from ..model_dir.runs import Destination, RunDir
from ..reading import typed

log = logging.getLogger(__name__)

# Settings that may change when a run is resumed; anything else must stay as it was.
RESUMABLE_TRAIN_KEYS = {"max_steps", "max_epochs", "max_minutes", "log_every", "validate_every",
                        "bleu_sentences", "best_metric", "save_every", "keep_checkpoints",
                        "cooldown"}  # fmt: skip
# The model keys a fine-tuning run sets itself; the others are the starting model's.
REGULARISATION = ("dropout", "attention_dropout", "activation_dropout")


@dataclass
class Prepared:
    """Everything the training loop needs from the data."""

    config: RunConfig  # with the real vocabulary sizes
    tokenizers: Tokenizers
    train: TokenDataset  # binarized, memory-mapped
    valid: list[Example]
    valid_pairs: list[tuple[str, str]]  # raw text, for BLEU
    test_pairs: list[tuple[str, str]]
    stats: dict[str, object]
    by_class: bool = False  # the corpus has classes (numbers): exact match means something there

    @classmethod
    def written(cls, config: RunConfig, run: RunDir) -> Prepared:
        """What rank 0 prepared and wrote into ``run``, for the other ranks (which neither
        validate nor test): the tokenizers and the binarized training set."""
        return cls(
            config,
            Tokenizers.load(run.root, config.model.vocab_sizes),
            TokenDataset.open(run.data),
            [],
            [],
            [],
            {},
        )


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
    """Streams the corpus, trains (or reloads) the tokenizers, and binarizes the training pairs.

    Nothing of the run is written (``save`` does that), so a mistake in the data or the config
    never leaves a half-made run behind; the binarized training set goes to the run's scratch
    folder (``RunDir.scratch``), which ``save`` moves into place. On ``--resume`` the saved
    tokenizers are reused, and so is the saved binarized set when it was made from the same
    data and tokenizers (otherwise it is made again).
    """
    saved = run.saved_config() if resume else None
    if saved is not None:
        check_resumable(saved, config)
    splits = stream_splits(config.data)
    if saved is not None:  # the sizes the run was trained with (config's are filled in below)
        tokenizers = Tokenizers.load(run.root, saved.model.vocab_sizes, str(run.config))
    elif config.train.init_from:
        model, tokenizers = starting_point(config)
        config = replace(config, model=model)
    else:
        if config.model.share_embeddings and not config.data.joint_vocab:
            raise UserError(
                "model.share_embeddings needs data.joint_vocab: true: two SentencePiece models "
                "number their pieces each in its own order, so one table would give unrelated "
                "source and target pieces the same row"
            )
        sample = reservoir(splits.train, config.data.tokenizer_sample, config.data.split_seed)
        if not sample:
            raise UserError(f"no training pairs in {splits.source}")
        tokenizers = Tokenizers.train(sample, config.data)
    tokenizers = tokenizers.for_target_language(config.decode.target_language)
    sizes = tokenizers.src.vocab_size, tokenizers.tgt.vocab_size
    try:
        model = replace(config.model, src_vocab_size=sizes[0], tgt_vocab_size=sizes[1])
    except ValueError as error:
        raise UserError(f"{error}: the tokenizers have {sizes[0]} and {sizes[1]} pieces; "
                        "set data.joint_vocab: true to share embeddings") from None  # fmt: skip
    config = replace(config, model=model)
    check_memory(config.model, str(run.config) if resume else "")  # before anything is written

    max_len = min(config.data.max_len, config.model.max_positions)
    provenance = {"data": asdict(config.data), "max_len": max_len,
                  "tokenizers": tokenizers.fingerprint()}  # fmt: skip
    train = _training_set(splits.train, tokenizers, max_len, run, provenance)
    if not train.kept:
        raise UserError(
            f"every training pair is longer than data.max_len={max_len} tokens on one side; "
            "raise data.max_len (and model.max_positions)"
        )
    valid, kept = encode_pairs(splits.valid, tokenizers, max_len)
    if not valid:  # its loss would read 0 (perplexity 1) and choose the best checkpoint
        why = (f"every one ({len(splits.valid):,}) is longer than data.max_len={max_len} "
               "tokens on one side" if splits.valid else "the split is empty")  # fmt: skip
        raise UserError(f"no validation pairs: {why}; training measures its progress and keeps "
                        "its best checkpoint by them (data.valid_fraction, data.valid_src and "
                        "valid_tgt, or data.numbers_valid)")  # fmt: skip
    stats = {
        "source": splits.source,
        "train_pairs": train.kept,
        "valid_pairs": len(valid),
        "test_pairs": len(splits.test),
        "skipped_empty": splits.skipped_empty + splits.train.skipped,
        "filtered_long_train": train.too_long,
        "filtered_long_valid": len(splits.valid) - len(valid),
        "src_vocab": tokenizers.src.vocab_size,
        "tgt_vocab": tokenizers.tgt.vocab_size,
    }
    _say_what_was_left_out(stats, config, max_len, resume)
    valid_pairs = [splits.valid[i] for i in kept]
    return Prepared(config, tokenizers, train.dataset, valid, valid_pairs, splits.test, stats,
                    by_class=splits.test_groups is not None)  # fmt: skip


def starting_point(config: RunConfig) -> tuple[ModelConfig, Tokenizers]:
    """The model config and tokenizers that ``train.init_from`` names: its architecture, with
    this run's dropout keys. A model key set away from its default to something else than the
    starting model has is an error that names it, not silently dropped."""
    if folder_kind(Path(str(config.train.init_from))) == "export":  # weights laid out otherwise
        raise export_refusal(Path(str(config.train.init_from)), "train.init_from")
    folder = resolve_checkpoint(Path(str(config.train.init_from)))
    start = read_config(folder).model
    default = ModelConfig()
    for key, asked in asdict(config.model).items():
        if key in REGULARISATION or key.endswith("vocab_size"):
            continue
        if asked != getattr(default, key) and asked != getattr(start, key):
            raise UserError(
                f"train.init_from {config.train.init_from}: model.{key} is {getattr(start, key)!r} "
                f"there, {asked!r} here; fine-tuning keeps the starting model's architecture "
                f"(only {', '.join(REGULARISATION)} may be set)"
            )
    model = replace(start, **{key: getattr(config.model, key) for key in REGULARISATION})
    return model, Tokenizers.load(
        model_dir_of(folder), start.vocab_sizes, str(folder / "config.json")
    )


def _training_set(
    pairs: PairStream, tokenizers: Tokenizers, max_len: int, run: RunDir, provenance: dict
) -> Binarized:
    """The run's binarized training set if it was made from the same data and tokenizers,
    else a new one in the scratch folder (streamed through the corpus once)."""
    meta = read_meta(run.data)
    if meta is not None and {k: meta.get(k) for k in provenance} == provenance:
        sizes = tokenizers.src.vocab_size, tokenizers.tgt.vocab_size  # a larger id is refused
        dataset, origin = TokenDataset.open(run.data, sizes), str(run.data / "meta.json")
        pairs.skipped = typed(meta, "skipped_empty", int, origin, 0)
        return Binarized(dataset, len(dataset), typed(meta, "too_long", int, origin, 0))
    remove_tree(run.scratch, owner=run.root)
    return binarize(pairs, tokenizers, max_len, run.scratch, provenance)


def reservoir(pairs: Iterable[Pair], size: int, seed: int) -> list[Pair]:
    """At most ``size`` pairs drawn uniformly from a stream of any length (Algorithm R), in one
    pass and bounded memory; a stream no longer than ``size`` comes back whole, in order."""
    rng = random.Random(seed)
    sample: list[Pair] = []
    for seen, pair in enumerate(pairs):
        if seen < size:
            sample.append(pair)
        else:
            j = int(rng.random() * (seen + 1))
            if j < size:
                sample[j] = pair
    return sample


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
    if not resume and not config.train.init_from and max(src, tgt) < asked:
        sides = f"{src}" if config.data.joint_vocab else f"{src} (source) and {tgt} (target)"
        log.warning(
            f"data.vocab_size is {asked:,} but the training text supports only {sides} "
            "SentencePiece pieces; the vocabulary is that size"
        )


def save(prepared: Prepared, out: Destination, scratch: Path, made_by: str = "train") -> None:
    """Writes the marker (``made_by``: the command that made the run), the tokenizers and the
    completed config into the folder the run is written in (``out.current``), and puts the
    binarized training set there (``Destination.take_data``: from ``scratch``, where its memory
    maps stay valid, or the old run's, reused)."""
    run = out.current
    run.mark(made_by)
    prepared.tokenizers.save(run.root)
    out.take_data(scratch)
    run.save_config(prepared.config.to_dict())
