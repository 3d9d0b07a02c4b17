"""Text in, text out: tokenizers + model + search, for translate, evaluate, validate and serve.

Source sentences become SentencePiece ids followed by EOS; a sentence longer than the model's
positions allow is truncated to fit, and the caller is told which lines were (a warning, never
a silent change). Empty sentences translate to empty strings without running the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .batching import encode_source
from .config import DecodeConfig
from .decoding import translate_ids
from .model import Transformer
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


def max_source_tokens(model: Transformer, decode: DecodeConfig) -> int:
    """Longest source (EOS included) whose translation can still fit in the model's positions."""
    positions = model.config.max_positions
    return max(
        1, min(positions, int((positions - 1 - decode.max_len_b) / max(decode.max_len_a, 1e-9)))
    )


def translate(
    model: Transformer, tokenizers: Tokenizers, sentences: list[str], decode: DecodeConfig
) -> TranslationResult:
    """Translates ``sentences`` (any number; batched by length inside)."""
    limit = max_source_tokens(model, decode)
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
