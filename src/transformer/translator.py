"""Text in, text out: tokenizers + model + search, for translate, evaluate, validate
and attention.

Source sentences become SentencePiece ids followed by EOS; a sentence longer than the model's
positions allow (``max_positions`` tokens) is truncated to fit, and the caller is told which
lines were, so the command line can warn: never a silent change, never a crash mid-file.
Empty sentences translate to empty strings without running the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch

from .batching import encode_source
from .config import BOS_ID, DecodeConfig
from .decoding import translate_ids
from .errors import UserError
from .model import AttentionMaps, Transformer
from .tokenizer import Tokenizers


@dataclass
class Translation:
    text: str
    score: float  # length-penalised log-probability (beam) or log-probability (greedy, sampling)
    tokens: list[int]


@dataclass
class TranslationResult:
    nbest: list[list[Translation]]  # per input sentence, best first
    truncated: list[int]  # indices of the inputs that were cut to fit the model

    @property
    def best(self) -> list[str]:
        return [options[0].text if options else "" for options in self.nbest]


def translate(
    model: Transformer, tokenizers: Tokenizers, sentences: list[str], decode: DecodeConfig
) -> TranslationResult:
    """Translates ``sentences`` (any number; batched by length inside)."""
    limit = model.config.max_positions  # the encoder's limit; decoding caps the output itself
    todo, ids, truncated = [], [], []
    for i, sentence in enumerate(sentences):
        if not sentence.strip():
            continue
        pieces = encode_source(tokenizers.src.encode(sentence))
        if len(pieces) > limit:
            pieces = [*pieces[: limit - 1], pieces[-1]]  # keep the EOS
            truncated.append(i)
        todo.append(i)
        ids.append(pieces)
    nbest: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in sentences]
    if ids:
        for i, hypotheses in zip(todo, translate_ids(model, ids, decode), strict=True):
            nbest[i] = [
                Translation(tokenizers.tgt.decode(h.tokens), h.score, h.tokens) for h in hypotheses
            ]
    return TranslationResult(nbest, truncated)


def format_nbest(index: int, options: list[Translation]) -> list[str]:
    """Moses-style n-best lines: ``sentence index ||| translation ||| score``."""
    return [f"{index} ||| {t.text} ||| {t.score:.4f}" for t in options]


def translate_lines(
    model: Transformer,
    tokenizers: Tokenizers,
    lines: Iterable[str],
    decode: DecodeConfig,
    write: Callable[[str], None],
    warn: Callable[[str], None],
    chunk: int = 2000,
) -> int:
    """Translates a stream of lines in chunks (bounded memory), keeping line alignment.

    Each input line gives one output line (``decode.nbest`` lines with ``nbest`` > 1); an
    empty line gives an empty line. Returns the number of input lines.
    """
    done = 0
    buffer: list[str] = []

    def flush() -> None:
        result = translate(model, tokenizers, buffer, decode)
        for i in result.truncated:
            warn(f"line {done + i + 1}: longer than the model accepts; translated its beginning")
        for i, options in enumerate(result.nbest):
            if decode.nbest > 1:
                for line in format_nbest(done + i, options[: decode.nbest]):
                    write(line)
            else:
                write(options[0].text)

    for line in lines:
        buffer.append(line.rstrip("\n"))
        if len(buffer) == chunk:
            flush()
            done, buffer = done + len(buffer), []
    if buffer:
        flush()
        done += len(buffer)
    return done


@dataclass
class Inspection:
    """One sentence, its translation, and every attention weight of the forward pass."""

    source: str
    translation: str
    maps: AttentionMaps
    src_labels: list[str]  # source pieces + </s>
    tgt_labels: list[str]  # decoder input: <s> + translation pieces


def inspect_sentence(
    model: Transformer, tokenizers: Tokenizers, sentence: str, decode: DecodeConfig
) -> Inspection:
    """Translates ``sentence`` and re-runs the model on (source, <s> + translation) to collect
    the attention weights of every layer and head."""
    if not sentence.strip():
        raise UserError("the sentence to inspect is empty")
    best = translate(model, tokenizers, [sentence], replace(decode, nbest=1)).nbest[0][0]
    src_ids = encode_source(tokenizers.src.encode(sentence))[: model.config.max_positions]
    tgt_ids = [BOS_ID, *best.tokens]
    maps = model.attention_maps(torch.tensor([src_ids]), torch.tensor([tgt_ids]))
    src_labels = [tokenizers.src.id_to_piece(i) for i in src_ids]
    tgt_labels = [tokenizers.tgt.id_to_piece(i) for i in tgt_ids]
    return Inspection(sentence, best.text, maps, src_labels, tgt_labels)
