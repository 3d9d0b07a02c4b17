"""transformer: the Transformer of "Attention Is All You Need", from first principles.

The package tree follows the paper's Figure 1: masks, attention, layers, embeddings (positional
encodings), encoder, decoder, model; then the tools to train, decode and inspect it.
"""

from .config import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig
from .model import Transformer

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "ModelConfig", "Transformer"]
__version__ = "0.1.0"
