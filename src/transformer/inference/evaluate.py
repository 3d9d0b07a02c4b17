"""Scoring translations with sacreBLEU: BLEU and chrF with their signatures.

The default is sacreBLEU's standard: detokenised, case-sensitive BLEU with its own 13a
tokenisation, whose signature makes scores comparable across papers (Post 2018). Many older
Multi30k and WMT papers report lowercased BLEU on tokenised text instead; ``lowercase=True``
adds that variant (BLEU with ``case:lc``) so those numbers can be compared too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from .inputs import check_texts


@dataclass
class Score:
    name: str
    score: float
    signature: str
    note: str = ""  # what the score cannot see, where it says 0 for that reason

    def __str__(self) -> str:
        return f"{self.name} = {self.score:.2f}   ({self.signature})"


def score_translations(
    hypotheses: list[str], references: list[str] | list[list[str]], lowercase: bool = False
) -> list[Score]:
    """BLEU and chrF of ``hypotheses`` against their references (line-aligned): one string per
    hypothesis, or a list of one or more (multi-reference: sacreBLEU takes one stream per
    reference, ``None`` where a sentence has fewer)."""
    # sacreBLEU is imported here, not at the top: `translate` does not score, and the import
    # is 25-30 ms of every command's start
    from sacrebleu.metrics import BLEU, CHRF

    check_texts(hypotheses, "hypotheses")
    check_texts(references, "references", several=True)
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must align"
        )
    options = [refs if isinstance(refs, list) else [refs] for refs in references]
    most = max((len(refs) for refs in options), default=1)
    streams = [[refs[k] if k < len(refs) else None for refs in options] for k in range(most)]
    metrics = [("BLEU", BLEU()), ("chrF", CHRF())]
    if lowercase:
        metrics.append(("BLEU lowercase", BLEU(lowercase=True)))
    scores = []
    for name, metric in metrics:
        result = metric.corpus_score(hypotheses, streams)
        scores.append(Score(name, result.score, str(metric.get_signature())))
        if isinstance(metric, BLEU) and result.totals[-1] == 0 and hypotheses:
            # the 4-gram precision is 0 / 0, which BLEU's geometric mean makes 0: a set of
            # right translations of one to three words each scores BLEU 0
            scores[-1].note = ("BLEU is 0 whatever the words: no hypothesis has "
                               f"{metric.max_ngram_order} tokens or more, and BLEU multiplies the "
                               f"precisions of 1- to {metric.max_ngram_order}-grams; chrF "
                               "measures lines this short")  # fmt: skip
    return scores


def references_by_source(pairs: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """The distinct sources of ``pairs`` (in order of first appearance) and, for each, every
    translation the pairs give it: a test set's references, for multi-reference BLEU."""
    grouped: dict[str, list[str]] = {}
    for source, target in pairs:
        grouped.setdefault(source, []).append(target)
    return list(grouped), list(grouped.values())


@dataclass
class ExactMatch:
    """Exact-match accuracy of one class of sentences (or of all of them: ``group == "all"``)."""

    group: str
    correct: int
    total: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def __str__(self) -> str:
        share = f"{100 * self.accuracy:6.2f}%"
        return f"exact match {self.group:<10} {share}  ({self.correct}/{self.total})"


def exact_match(
    hypotheses: list[str], references: list[str], groups: list[str] | None = None
) -> list[ExactMatch]:
    """Exact-match accuracy per group (sorted by name), then over all lines.

    Args:
        hypotheses, references: line-aligned.
        groups: a class label per line (e.g. the numbers corpus's magnitude classes), or None.
    """
    check_texts(hypotheses, "hypotheses")
    check_texts(references, "references")
    if groups is not None:
        check_texts(groups, "groups")
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must align"
        )
    labels = groups if groups is not None else ["all"] * len(references)
    rows: dict[str, ExactMatch] = {}
    for hyp, ref, label in zip(hypotheses, references, labels, strict=True):
        for key in {label, "all"}:
            row = rows.setdefault(key, ExactMatch(key, 0, 0))
            row.total += 1
            row.correct += hyp.strip() == ref.strip()
    return [rows[k] for k in sorted(rows, key=lambda k: (k == "all", k))]
