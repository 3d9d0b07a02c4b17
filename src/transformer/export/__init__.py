"""Deployment: export to CTranslate2 and translate through it.

``export_model`` writes a model directory's checkpoint as a CTranslate2 model (``spec.py`` fills
``ctranslate2.specs.TransformerSpec``; ``folder.py`` owns the exported folder and writes it
atomically), optionally quantized to int8. ``load_ctranslate2`` gives a ``CTranslate2Engine``,
which translates with the same contract as the torch engine (``translate(sentences) ->
TranslationResult``); ``jobs.load_engine`` picks between the two. ``ctranslate2`` is an optional
extra (``pip install '.[ct2]'``): without it, these say how to install it.
"""

from .engine import PATIENCE, CTranslate2Engine, load_ctranslate2, translate_batch_options
from .folder import QUANTIZATIONS, ExportInfo, export_model, is_export, read_export, save_model
from .spec import check_expressible, import_ctranslate2, transformer_spec

__all__ = [
    "PATIENCE", "QUANTIZATIONS", "CTranslate2Engine", "ExportInfo", "check_expressible",
    "export_model", "import_ctranslate2", "is_export", "load_ctranslate2", "read_export",
    "save_model", "transformer_spec", "translate_batch_options",
]  # fmt: skip
