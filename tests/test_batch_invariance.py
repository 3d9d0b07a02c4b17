"""Batch invariance: a sentence gets the same translation alone or among others of any length.

200 sentences (one to three numbers in words) are decoded alone (batch size 1), then in batches
of 7 and 64 taken in input order, so that a batch mixes short and long sentences and pads the
short ones most; with greedy search and beam search (4), on our torch engine; and through the
engine's own batching (sorted by length). The CTranslate2 engine is checked the same way where
it is installed."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from num2words import num2words

from transformer.data.batching import encode_source, pad
from transformer.inference.translation import search_batch

SIZES = (1, 7, 64)
pytestmark = pytest.mark.slow  # the tests' trained model; 1,200 beam searches


def sentences(engine, n: int = 200) -> list[str]:
    """``n`` numbers in words, one to three of them a sentence, each fitting the model."""
    rng, out = random.Random(0), []
    while len(out) < n:
        count = rng.choice([1, 1, 2, 3])
        text = " ".join(num2words(rng.randint(0, 999_999)) for _ in range(count))
        if len(engine.tokenizers.src.encode(text)) < engine.config.model.max_positions:
            out.append(text)
    return out


@pytest.mark.parametrize("beam", [1, 4])
def test_the_same_translation_alone_or_in_a_mixed_batch_of_any_size(torch_engine, beam):
    texts = sentences(torch_engine)
    ids = [encode_source(torch_engine.tokenizers.src.encode(t)) for t in texts]
    lengths = sorted(map(len, ids))
    assert lengths[-1] >= 2 * lengths[0]  # the batches do mix short and long sentences
    decode = replace(torch_engine.decode, beam_size=beam, nbest=1)
    found = {}
    for size in SIZES:
        found[size] = [
            h[0].tokens
            for start in range(0, len(ids), size)
            for h in search_batch(
                torch_engine.model, pad(ids[start : start + size], torch.device("cpu")), decode
            )  # fmt: skip
        ]
    alone = found[1]
    for size in SIZES[1:]:
        differ = [i for i in range(len(ids)) if found[size][i] != alone[i]]
        assert not differ, f"batch size {size}: {len(differ)} of 200 differ: {differ[:5]}"


def test_the_engine_gives_the_same_text_whatever_its_batch_size(torch_engine):
    texts = sentences(torch_engine)
    results = {size: torch_engine.translate(texts, replace(torch_engine.decode, batch_size=size,
               max_source_tokens=100_000)).best for size in SIZES}  # fmt: skip
    assert results[7] == results[1] and results[64] == results[1]


def test_the_ctranslate2_engine_too(numbers_model):
    pytest.importorskip("ctranslate2")
    from transformer.config import RuntimeConfig
    from transformer.inference.engine import load_engine

    engine = load_engine(numbers_model, "ctranslate2", runtime=RuntimeConfig(device="cpu"))
    texts = sentences(engine)
    results = {}
    for size in SIZES:
        results[size] = []
        for start in range(0, len(texts), size):  # batches in input order: lengths mixed
            results[size] += engine.translate(texts[start : start + size]).best
    assert results[7] == results[1] and results[64] == results[1]
