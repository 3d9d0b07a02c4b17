"""Random Hugging Face Marian models, built locally with ``transformers`` (no network): the
references of tests/test_import_marian.py, test_export_huggingface.py and test_init_from.py.

``marian_folder`` writes what ``save_pretrained`` writes for an OPUS-MT model: config.json, the
weights, two tiny SentencePiece models trained on number words (English source, French target),
vocab.json (and target_vocab.json for separate vocabularies) in Marian's numbering (</s> 0,
<unk> 1, <pad> last) and tokenizer_config.json.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import sentencepiece as spm
import torch

from transformer.config import DataConfig
from transformer.data.numbers import numbers_corpus

transformers = __import__("pytest").importorskip("transformers")


@cache
def number_words() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(training pairs, 100 other pairs) of English -> French number words."""
    data = DataConfig(numbers_max=999, numbers_train=400, numbers_valid=20, numbers_test=100)
    train, _, test = numbers_corpus(data)
    return train, test


@cache
def sentencepiece(side: int, size: int) -> bytes:
    """A unigram SentencePiece model of ``size`` pieces on one side of the training pairs, with
    SentencePiece's own special ids (<unk> 0, <s> 1, </s> 2), as Marian's are."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([pair[side] for pair in number_words()[0]]), model_writer=model,
        vocab_size=size, model_type="unigram", hard_vocab_limit=False, minloglevel=2,
        num_threads=1,
    )  # fmt: skip
    return model.getvalue()


@dataclass(frozen=True)
class Shape:
    """A random Marian model's shape."""

    shared: bool = True  # one vocabulary and embedding table for both sides
    activation: str = "swish"
    layers: tuple[int, int] = (2, 2)
    d_model: int = 32
    heads: int = 4
    ffn: int = 64
    tie: bool = True  # lm_head = the decoder's embedding table
    languages: tuple[str, ...] = ()  # >>xxx<< target-language tokens
    init_std: float = 0.2  # large enough that the source changes the output
    eos_boost: float = 3.0  # added to </s>'s final_logits_bias: outputs of varied lengths
    max_positions: int = 128
    train_steps: int = 0  # Adam steps on number words before saving: sentences that end
    seed: int = 0
    extra: dict = field(default_factory=dict)  # more MarianConfig keys


def vocabularies(shape: Shape) -> tuple[list[str], list[str]]:
    """Marian vocabularies (pieces in id order) for the source and the target."""

    def pieces(*models: bytes) -> list[str]:
        found: set[str] = set()
        for model in models:
            sp = spm.SentencePieceProcessor(model_proto=model)
            found |= {sp.id_to_piece(i) for i in range(3, sp.get_piece_size())}
        return sorted(found)

    src, tgt = sentencepiece(0, 60), sentencepiece(1, 70)
    codes = [f">>{code}<<" for code in shape.languages]
    if shape.shared:
        middle = pieces(src, tgt) + codes
        return (["</s>", "<unk>", *middle, "<pad>"],) * 2
    src_middle, tgt_middle = pieces(src) + codes, pieces(tgt)
    size = max(len(src_middle), len(tgt_middle))  # Marian's two vocabularies are equal in size
    src_middle += [f"<extra{i}>" for i in range(size - len(src_middle))]
    tgt_middle += [f"<extra{i}>" for i in range(size - len(tgt_middle))]
    return ["</s>", "<unk>", *src_middle, "<pad>"], ["</s>", "<unk>", *tgt_middle, "<pad>"]


def marian_folder(folder: Path, shape: Shape = Shape()) -> Path:
    """Writes a random MarianMTModel of ``shape`` with its tokenizer files into ``folder``."""
    src_vocab, tgt_vocab = vocabularies(shape)
    pad = len(tgt_vocab) - 1
    config = transformers.MarianConfig(
        vocab_size=len(src_vocab), decoder_vocab_size=len(tgt_vocab),
        share_encoder_decoder_embeddings=shape.shared, tie_word_embeddings=shape.tie,
        d_model=shape.d_model, encoder_layers=shape.layers[0], decoder_layers=shape.layers[1],
        encoder_attention_heads=shape.heads, decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.ffn, decoder_ffn_dim=shape.ffn,
        activation_function=shape.activation, max_position_embeddings=shape.max_positions,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0, forced_eos_token_id=0,
        scale_embedding=True, init_std=shape.init_std, **shape.extra,
    )  # fmt: skip
    torch.manual_seed(shape.seed)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 1.0)
        model.final_logits_bias[0, 0] += shape.eos_boost
        model.final_logits_bias[0, pad] = 0.0  # as in converted models: pad's row is not trained
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "source.spm").write_bytes(sentencepiece(0, 60))
    (folder / "target.spm").write_bytes(sentencepiece(1, 70))
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(src_vocab)}))
    options = {"tokenizer_class": "MarianTokenizer", "separate_vocabs": not shape.shared,
               "source_lang": "en", "target_lang": "fr"}  # fmt: skip
    if not shape.shared:
        target = {p: i for i, p in enumerate(tgt_vocab)}
        (folder / "target_vocab.json").write_text(json.dumps(target))
    (folder / "tokenizer_config.json").write_text(json.dumps(options))
    if shape.train_steps:
        train(model, transformers.MarianTokenizer.from_pretrained(folder), shape)
    model.save_pretrained(folder)
    return folder


def train(model, tokenizer, shape: Shape) -> None:
    """A few Adam steps of Hugging Face's own loss on number words (random batches of 32), so
    that the model ends its sentences, as a trained translator does. (final_logits_bias is a
    buffer: it keeps its random values.)"""
    pairs, prefix = number_words()[0], f">>{shape.languages[0]}<< " if shape.languages else ""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    draw = torch.Generator().manual_seed(shape.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: a second thread only waits (12 s, not 90, here)
    model.train()
    for _ in range(shape.train_steps):
        batch = [pairs[i] for i in torch.randint(0, len(pairs), (32,), generator=draw).tolist()]
        inputs = tokenizer([prefix + s for s, _ in batch], text_target=[t for _, t in batch],
                           return_tensors="pt", padding=True)  # fmt: skip
        inputs["labels"][inputs["labels"] == model.config.pad_token_id] = -100  # not scored
        optimizer.zero_grad()
        model(**inputs).loss.backward()
        optimizer.step()
    model.eval()
    torch.set_num_threads(threads)


def load_hf(folder: Path):
    """(MarianMTModel in eval mode, MarianTokenizer) from a folder."""
    model = transformers.MarianMTModel.from_pretrained(folder).eval()
    return model, transformers.MarianTokenizer.from_pretrained(folder)
