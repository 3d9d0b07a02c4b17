"""A sentence translated in parts, joined back into one (texts.py's ``put_back``): a sentence
too long for the model, cut to fit it (documents.fit), or a marked-up line's blocks, each
translated on its own. Their confidences, word alignments and glossary terms are joined here.
"""

from __future__ import annotations

from collections import Counter

from .confidence import Confidence
from .glossary import Glossary
from .translation import Translation


def split_through(glossary: Glossary, source: str, parts: list[str], texts: list[str]) -> list[str]:
    """The target terms of a sentence split to fit the model whose source term the split went
    through (no part holds it whole, so no part's search was given it), where the joined
    translation lacks them: missing, as a term without room is."""
    wanted = Counter(glossary.targets_in(source))
    across = wanted - Counter(t for part in parts for t in glossary.targets_in(part))
    joined = " ".join(texts)
    return [term for term in across if joined.count(term) < wanted[term]]


def joined_confidence(parts: list[Confidence]) -> Confidence:
    words = [w for c in parts for w in c.words]
    return Confidence(sum(c.log_prob for c in parts), words)


def joined_alignment(
    sources: list[str], parts: list[Translation], field: str = "alignment"
) -> list[tuple[int, int]] | None:
    """The parts' alignments (or ``best_targets``) as one: each part's words counted after the
    earlier parts'."""
    return joined_links(sources, [x.text for x in parts], [getattr(x, field) for x in parts])


def joined_links(
    sources: list[str], targets: list[str], found: list[list[tuple[int, int]] | None]
) -> list[tuple[int, int]] | None:
    """Word links of (source, target) pairs as links of the pairs joined: each pair's words
    counted after the earlier pairs'; None when a pair has none."""
    if any(links is None for links in found):
        return None
    links, src_at, tgt_at = [], 0, 0
    for source, target, mine in zip(sources, targets, found, strict=True):
        links += [(i + src_at, j + tgt_at) for i, j in mine]
        src_at += len(source.split())
        tgt_at += len(target.split())
    return links
