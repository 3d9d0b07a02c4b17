"""Deployment: export a model directory to CTranslate2.

``export_model`` writes a model directory's checkpoint as a CTranslate2 model (``spec.py`` fills
``ctranslate2.specs.TransformerSpec``; ``folder.py`` owns the exported folder and writes it
atomically), optionally quantized to int8. Translating through it is the ctranslate2 engine's
job (``inference/ctranslate2.py``). ``ctranslate2`` is an optional extra (``pip install
'.[ct2]'``): without it, these say how to install it.
"""

from .folder import QUANTIZATIONS, ExportInfo, export_model, is_export, read_export, save_model
from .spec import check_expressible, import_ctranslate2, transformer_spec

__all__ = [
    "QUANTIZATIONS", "ExportInfo", "check_expressible", "export_model", "import_ctranslate2",
    "is_export", "read_export", "save_model", "transformer_spec",
]  # fmt: skip
