"""transformer: the Transformer of "Attention Is All You Need", from first principles.

The package tree follows the paper's Figure 1: ``model`` (masks, attention, layers, embeddings,
encoder, decoder), then the tools around it: ``data``, ``training``, ``inference``, ``inspect``,
with ``config`` (the typed config) and ``cli`` (the command line) at the top.
"""

from .config import ModelConfig
from .model import Transformer
from .vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "ModelConfig", "Transformer"]
__version__ = "0.1.0"
