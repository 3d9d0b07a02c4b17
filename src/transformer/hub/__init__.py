"""Hugging Face Marian models in and out: ``transformer import`` and ``export --to huggingface``.

About 1,400 OPUS-MT translation models on the Hugging Face Hub are Marian Transformers: the
architecture of the paper with sin | cos halves for positions, a swish or GELU feed-forward, an
output bias, and their own vocabulary numbering. ``marian_import.py`` makes one of them an
ordinary model directory of ours (token for token the same translations as ``transformers``);
``huggingface_export.py`` writes one of ours as a folder that ``MarianMTModel`` and
``MarianTokenizer`` load unchanged. What maps onto what: ``marian_config.py`` (config.json),
``marian_vocab.py`` (the vocabulary rows and special ids), ``marian_weights.py`` (the weight
names and the positional permutation); ``tensor_files.py`` reads and writes the weights one
tensor at a time. ``transformers`` itself is needed by neither direction, only by the tests.
"""

from .huggingface_export import export_huggingface
from .marian_import import ImportInfo, import_marian

__all__ = ["ImportInfo", "export_huggingface", "import_marian"]
