"""From a trained model to translations: the search primitives, greedy search and sampling,
beam search, batching and text in / text out, the engines (ours and CTranslate2's) behind one
interface, and scoring with sacreBLEU."""

from .beam import beam_search
from .engine import Engine, TorchEngine, load_engine, load_torch_engine
from .evaluate import exact_match, score_translations
from .greedy import greedy_search, sample
from .search import Hypothesis
from .translate import search, translate, translate_ids, translate_with

__all__ = [
    "Engine", "Hypothesis", "TorchEngine", "beam_search", "exact_match", "greedy_search",
    "load_engine", "load_torch_engine", "sample", "score_translations", "search", "translate",
    "translate_ids", "translate_with",
]  # fmt: skip
