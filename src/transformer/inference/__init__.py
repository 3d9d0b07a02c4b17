"""From a trained model to translations: the search primitives, greedy search and sampling,
beam search, batching and text in / text out, and scoring with sacreBLEU."""

from .beam import beam_search
from .evaluate import exact_match, score_translations
from .greedy import greedy_search, sample
from .search import Hypothesis
from .translator import search, translate, translate_ids, translate_lines

__all__ = [
    "Hypothesis", "beam_search", "exact_match", "greedy_search", "sample", "score_translations",
    "search", "translate", "translate_ids", "translate_lines",
]  # fmt: skip
