"""The model sizes the speed benchmarks compare at, each a ``ModelConfig`` with random weights.

- ``demo``: the built-in demo's model (d_model 128, 3+3 layers, d_ff 512, vocabularies 300);
- ``small``: the Multi30k config (d_model 256, 3+3 layers, d_ff 1024, joint vocabulary 8,000);
- ``opus-mt``: an OPUS-MT model's size (d_model 512, 6+6 layers, d_ff 2048, swish, one shared
  and tied vocabulary of 58,101 entries, an output bias), as ``import_marian.py`` builds it.
"""

from __future__ import annotations

import torch

from transformer.config import ModelConfig
from transformer.model import Transformer

SIZES = {
    "demo": dict(preset="small", d_model=128, n_heads=4, d_ff=512, vocab=300),
    "small": dict(preset="small", vocab=8000, share_embeddings=True, tie_output=True),
    "opus-mt": dict(preset="base", vocab=58101, activation="swish", share_embeddings=True,
                    tie_output=True, output_bias=True, max_positions=512),
}  # fmt: skip


def config_of(size: str) -> ModelConfig:
    """The ``ModelConfig`` of one of ``SIZES``."""
    spec = dict(SIZES[size])
    vocab = spec.pop("vocab")
    return ModelConfig.preset(
        spec.pop("preset"), src_vocab_size=vocab, tgt_vocab_size=vocab, **spec
    )


def random_model(size: str, seed: int) -> Transformer:
    """A model of ``size`` with seeded random weights, in eval mode."""
    torch.manual_seed(seed)
    return Transformer(config_of(size)).eval()
