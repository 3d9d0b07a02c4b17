"""The Transformer itself, in the order of the paper's Figure 1: masks, attention, layers
(layer normalisation, feed-forward), embeddings and positional encodings, encoder, decoder,
the key/value cache, and the whole model."""

from .attention import (
    MultiHeadAttention,
    attention_fused,
    attention_reference,
    scaled_dot_product_attention,
)
from .cache import DecoderCache, LayerCache
from .decoder import Decoder, DecoderAttention, DecoderLayer
from .embeddings import Embeddings, TokenEmbedding, sinusoidal_table
from .encoder import Encoder, EncoderLayer
from .layers import FeedForward, LayerNorm, layer_norm_reference
from .masks import combined_mask, look_ahead_mask, padding_mask
from .transformer import AttentionMaps, Transformer

__all__ = [
    "AttentionMaps", "Decoder", "DecoderAttention", "DecoderCache", "DecoderLayer", "Embeddings",
    "Encoder", "EncoderLayer", "FeedForward", "LayerCache", "LayerNorm", "MultiHeadAttention",
    "TokenEmbedding", "Transformer", "attention_fused", "attention_reference", "combined_mask",
    "layer_norm_reference", "look_ahead_mask", "padding_mask", "scaled_dot_product_attention",
    "sinusoidal_table",
]  # fmt: skip
