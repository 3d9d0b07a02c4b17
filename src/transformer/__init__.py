"""transformer: the Transformer of "Attention Is All You Need", from first principles.

The package tree follows the paper's Figure 1: ``model`` (masks, attention, layers, embeddings,
encoder, decoder), then the tools around it: ``data``, ``training``, ``inference``, ``inspect``,
with ``config`` (the typed config) and ``cli`` (the command line) at the top.

``ModelConfig`` and ``Transformer`` are imported when first asked for, so that importing the
package alone imports nothing: the ``transformer`` command (``__main__.py``) imports torch and
the rest itself, with Python's cycle collector paused.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from .vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID", "ModelConfig", "Transformer"]
__version__ = "0.1.0"

_LATER = {"ModelConfig": ".config", "Transformer": ".model"}  # name: the module that has it

if TYPE_CHECKING:
    from .config import ModelConfig
    from .model import Transformer


def __getattr__(name: str):
    """``transformer.ModelConfig`` and ``transformer.Transformer``, imported on first use; so is
    a subpackage (``transformer.model``), as it was when the package imported them."""
    if name in _LATER:
        value = getattr(import_module(_LATER[name], __name__), name)
        globals()[name] = value
        return value
    try:
        return import_module(f".{name}", __name__)
    except ModuleNotFoundError as error:
        if error.name != f"{__name__}.{name}":  # a module it imports is missing: say so
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted([*globals(), *_LATER])
