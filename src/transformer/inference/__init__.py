"""From a trained model to translations: the search primitives and rules (prefix, minimum
length, n-gram and repetition controls), greedy search and sampling, beam search, batching and
text in / text out, word alignments, the engines (ours and CTranslate2's) behind one interface,
the model's log-probability of given pairs, documents and per-word confidence, glossaries
enforced by lexically constrained beam search, scoring with sacreBLEU, and the jobs that run an
engine over files (translate, evaluate, score: jobs.py; documents and structured output:
text_jobs.py)."""

from .beam import beam_search
from .constrained_beam import constrained_beam_search
from .engine import Engine, TorchEngine, load_engine, load_torch_engine
from .evaluate import exact_match, score_translations
from .glossary import Glossary
from .greedy import greedy_search, sample
from .score import PairScore, ScoreResult, score_ids
from .search import Hypothesis
from .texts import translate_texts
from .translation import search_batch, translate, translate_ids, translate_with

__all__ = [
    "Engine", "Glossary", "Hypothesis", "PairScore", "ScoreResult", "TorchEngine", "beam_search",
    "constrained_beam_search", "exact_match", "greedy_search", "load_engine", "load_torch_engine",
    "sample", "score_ids", "score_translations", "search_batch", "translate", "translate_ids",
    "translate_texts", "translate_with",
]  # fmt: skip
