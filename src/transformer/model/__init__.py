"""The Transformer itself, in the order of the paper's Figure 1: masks, attention, layers
(layer normalisation, feed-forward), embeddings and positional encodings, encoder, decoder,
the key/value cache, and the whole model; then its predecessor, the RNN encoder-decoder (RNN
encoder, RNN attention, RNN decoder, the whole model); ``EncoderDecoder``, the interface both
implement; and ``build_model``, which builds either from a ModelConfig."""

from .attention import (
    MultiHeadAttention,
    attention_fused,
    attention_reference,
    scaled_dot_product_attention,
)
from .base import ATTENTION_KINDS, AttentionMaps, Cache, EncoderDecoder
from .build import build_model, require_transformer, shapes_only
from .cache import DecoderCache, LayerCache
from .decoder import Decoder, DecoderAttention, DecoderLayer
from .embeddings import Embeddings, TokenEmbedding, sinusoidal_table
from .encoder import Encoder, EncoderLayer
from .layers import FeedForward, LayerNorm, layer_norm_reference
from .masks import combined_mask, look_ahead_mask, padding_mask
from .rnn import RNNEncoderDecoder
from .rnn_attention import AdditiveAttention, MultiplicativeAttention, attend
from .rnn_decoder import RNNDecoder, RNNState
from .rnn_encoder import RNNEncoder
from .transformer import Transformer

__all__ = [
    "ATTENTION_KINDS", "AdditiveAttention", "AttentionMaps", "Cache", "Decoder",
    "DecoderAttention", "DecoderCache", "DecoderLayer", "Embeddings", "Encoder",
    "EncoderDecoder", "EncoderLayer", "FeedForward", "LayerCache", "LayerNorm",
    "MultiHeadAttention", "MultiplicativeAttention", "RNNDecoder", "RNNEncoder",
    "RNNEncoderDecoder", "RNNState", "TokenEmbedding", "Transformer", "attend",
    "attention_fused", "attention_reference", "build_model", "combined_mask",
    "layer_norm_reference", "look_ahead_mask", "padding_mask", "require_transformer",
    "scaled_dot_product_attention", "shapes_only", "sinusoidal_table",
]  # fmt: skip
