"""Inline markup, third part: a segment's tags put back around the target words that their source
words align to (the hard word links of ``alignment.py``).

The rules, each chosen so that the output is well-formed and holds every tag exactly once:

- **Words**: an element's target words are those aligned to any of its source words (the
  alignment: one source word per target word). An element with none of its own takes the
  best target words of its source words (``alignment.word_links``' second list: each source
  word's, down its column): a source word that no target word chose still has one. "cent"
  chose "hundred" in "four hundred and seventy-eight", and "and", chosen by nothing, has
  "cent" for its best: ``<b>and</b>`` alone wraps "cent", but ``<b>and seventy-eight</b>``
  wraps "soixante-dix-huit" only, its own word. (Taking the best target words always, as well,
  placed 51 of 59 elements of the numbers page right and 52 of 61 of the German one; only when
  an element has no word of its own, 51 and 55: benchmarks/results/markup.md.)
- **One span per element**: an element wraps the longest run of adjacent target words among
  its target words; of runs as long, the first that holds the best target word of one of its
  source words ("Zug" in "in einem <b>Zug</b>" was chosen by "on" and by "train" of "on a
  train", and its best is "train"), else the first. Its other target words, if the
  translation put them apart, go without it. A tag is never repeated. A child's run lies
  inside its parent's words, so it nests in the parent's run or lies outside it.
- **Elements apart in the source stay apart**: two elements neither of which holds the other
  (siblings, cousins) share no target word of their own, but one with only best target words
  (or none) can land on the other's. The elements with words of their own are placed first;
  an element then wraps the longest run of its words that no such element wraps already, and
  where none is left it is written empty right after the one that took its words:
  ``<a href="2">Gruppe</a> <a href="3">von</a>`` -> ``<a href="2">group</a><a href="3"></a>``,
  never ``<a href="2"><a href="3">group</a></a>``, which nests a link in a link (invalid HTML)
  and, for other elements, gives the word a formatting it had nowhere in the source.
- **No target word**: an element none of whose source words has a target word (no second
  list given) wraps the one target word aligned to the nearest source word that has one.
- **Crossing**: runs can cross when tags split a word (``<b>x y</b><i>z</i>`` where ``yz``
  is one word); the later element then wraps only the first word of its run.
- **Kept as written** (void elements, comments, ``<code>``...: ``Atom``): placed after the
  target word aligned to the source word before it (before the first word when none is), at the
  depth of tags there that matches the elements it was inside in the source.

Spans nest as the tags are written: at a word, the longer span opens first (the element that
comes first in the source, when two are as long), and spans close innermost first.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from html import escape


@dataclass
class Inline:
    """An element inline in a segment: its tags as written, the source words it covers."""

    open: str
    close: str
    words: list[int]  # the segment's source words it covers, in order (at least one)
    ancestors: frozenset[int]  # the inline elements around it in the source (their indices)
    lead: str = ""  # punctuation of its first word before its start tag: "(" of "(<b>x</b>"
    trail: str = ""  # punctuation of its last word after its end tag: "." of "<b>x</b>."


@dataclass
class Atom:
    """Something kept as written, placed between words: a void element, a comment, code."""

    text: str
    after: int  # the source word before it (-1: none)
    ancestors: frozenset[int]  # the inline elements around it in the source
    space_before: bool = False  # it stood apart from the text before it ("run <code>")
    space_after: bool = False


def place_tags(
    target: list[str],
    alignment: list[tuple[int, int]],
    inline: list[Inline],
    atoms: list[Atom],
    best_targets: tuple[tuple[int, int], ...] | list[tuple[int, int]] = (),
) -> str:
    """The target words joined by spaces (``<``, ``>``, ``&`` escaped) with every tag of
    ``inline`` and every ``atoms`` put back once, as the module docstring says.

    Args:
        target: the translation's words.
        alignment: (source word, target word) links, one per target word (a target word may
            have several).
        inline: the segment's inline elements, in the order of their start tags.
        atoms: what is kept as written, in source order.
        best_targets: (source word, target word): each source word's best target word
            (``Translation.best_targets``); none: ``alignment`` alone.
    """
    sources_of: dict[int, set[int]] = defaultdict(set)  # target word -> aligned to
    best_of: dict[int, set[int]] = defaultdict(set)  # target word -> the best target of
    targets_of: dict[int, list[int]] = defaultdict(list)  # source word -> both kinds, in order
    for links, into in ((alignment, sources_of), (best_targets, best_of)):
        for i, j in links:
            if 0 <= j < len(target):
                into[j].add(i)
                targets_of[i].append(j)
    for found in targets_of.values():
        found.sort()
    spans, beside = element_spans(sources_of, targets_of, inline, best_of)
    at: dict[int, list[Atom]] = defaultdict(list)
    for atom in atoms:
        at[_boundary(atom.after, targets_of)].append(atom)
    for k, after in beside.items():  # written empty, after the element that took its words
        at[after].append(Atom(inline[k].open + inline[k].close, -1, inline[k].ancestors))
    return _written(target, spans, inline, at, set(beside))


def element_spans(
    sources_of: dict[int, set[int]], targets_of: dict[int, list[int]],
    inline: list[Inline], best_of: dict[int, set[int]],
) -> tuple[list[tuple[int, int] | None], dict[int, int]]:  # fmt: skip
    """Each element's target words as (first, last), inclusive, or None; and the elements
    whose words an element apart from them took (element -> the target word after which it is
    written empty; their span is None), as the module docstring says. None without one of
    these is an element with no target words at all. ``sources_of``, ``best_of``: target
    word -> the source words aligned to it, whose best target word it is; ``targets_of``:
    source word -> its target words, of either kind."""
    spans: list[tuple[int, int] | None] = [None] * len(inline)
    beside: dict[int, int] = {}
    placed: list[int] = []  # the elements with a span, in the order they got it
    covering: dict[int, list[int]] = defaultdict(list)  # target word -> the spans over it
    # source word -> its target words, of each kind: an element's are looked up, not searched
    # for among all the target words (with the checks below, 20,000 elements on one line took
    # 46 s to translate)
    own_targets, best_targets = _inverse(sources_of), _inverse(best_of)
    sources = sorted(targets_of)
    owns = [sorted({j for i in e.words for j in own_targets.get(i, ())}) for e in inline]
    for k in sorted(range(len(inline)), key=lambda k: not owns[k]):  # own words first
        element = inline[k]
        best = sorted({j for i in element.words for j in best_targets.get(i, ())})
        words = owns[k] or best
        span = (_longest_run(words, set(best)) if words
                else _nearest(element.words, targets_of, sources))  # fmt: skip
        apart = {m for j in _words_of(span) for m in covering[j]
                 if m not in element.ancestors and k not in inline[m].ancestors}  # fmt: skip
        if apart:
            taken = {j for m in apart for j in _words_of(spans[m])}
            free = [j for j in words if j not in taken]
            if not free:
                beside[k] = max(j for m in apart for j in _words_of(spans[m]))
                continue
            span = _longest_run(free, set(best))
        several = span is not None and span[0] != span[1]  # one word never crosses a span
        if several and any(_cross(span, spans[m]) for m in placed):  # type: ignore[arg-type]
            span = (span[0], span[0])
        spans[k] = span
        if span is not None:
            placed.append(k)
            for j in _words_of(span):
                covering[j].append(k)
    return spans, beside


def _words_of(span: tuple[int, int] | None) -> range:
    """The target words of a span (none for None)."""
    return range(0) if span is None else range(span[0], span[1] + 1)


def _inverse(links: dict[int, set[int]]) -> dict[int, list[int]]:
    """{target word: source words} -> {source word: target words}."""
    inverse: dict[int, list[int]] = defaultdict(list)
    for j, sources in links.items():
        for i in sources:
            inverse[i].append(j)
    return inverse


def _longest_run(words: list[int], best: set[int]) -> tuple[int, int]:
    """The longest run of consecutive numbers in sorted ``words``; of runs as long, the first
    that holds one of ``best``, else the first."""
    runs: list[tuple[int, int]] = []
    for j in words:
        if runs and j == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((j, j))
    longest = max(last - first for first, last in runs)
    runs = [run for run in runs if run[1] - run[0] == longest]
    return next((run for run in runs if any(run[0] <= j <= run[1] for j in best)), runs[0])


def _nearest(
    words: list[int], targets_of: dict[int, list[int]], sources: list[int]
) -> tuple[int, int] | None:
    """One target word for an element whose source words got none: the one aligned to the
    nearest source word that has one (before it, on a tie). ``sources``: the source words
    that have one, in order (bisected: a walk through all of them for each element took 2.4 s
    of a line of 20,000 elements)."""
    if not sources:
        return None
    low, high = words[0], words[-1]
    k, m = bisect_left(sources, low), bisect_right(sources, high)
    if k < m:  # one inside the element's span
        source = sources[k]
    elif k == 0 or (m < len(sources) and sources[m] - high < low - sources[k - 1]):
        source = sources[m]
    else:
        source = sources[k - 1]
    j = targets_of[source][-1] if source < low else targets_of[source][0]
    return j, j


def _cross(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two spans overlap without one holding the other."""
    overlap = a[0] <= b[1] and b[0] <= a[1]
    nested = (a[0] <= b[0] and b[1] <= a[1]) or (b[0] <= a[0] and a[1] <= b[1])
    return overlap and not nested


def _boundary(after: int, targets_of: dict[int, list[int]]) -> int:
    """The target word an atom goes after: the last one aligned to the source word before it,
    or to the nearest source word before that which has one; -1 (before the first) if none."""
    for i in range(after, -1, -1):
        if targets_of.get(i):
            return targets_of[i][-1]
    return -1


def _written(
    target: list[str], spans: list[tuple[int, int] | None], inline: list[Inline],
    atoms_at: dict[int, list[Atom]], elsewhere: set[int],
) -> str:  # fmt: skip
    """The words with the tags opened and closed around them, and the atoms in between
    (``elsewhere``: elements written as atoms, not by their span)."""
    opening: dict[int, list[int]] = defaultdict(list)
    for k, span in enumerate(spans):
        if span is not None:
            opening[span[0]].append(k)
    for ks in opening.values():
        ks.sort(key=lambda k: (-spans[k][1], k))  # type: ignore[index]  # outer span first
    # with no target word at all, an element is written empty, where the translation starts
    out = [inline[k].open + inline[k].close for k, span in enumerate(spans)
           if span is None and k not in elsewhere]  # fmt: skip
    stack: list[int] = []
    pos = 0  # how much of the current word is written (its punctuation before a tag)
    for b in range(-1, len(target)):  # the boundary after word b (-1: before the first)
        word = target[b] if b >= 0 else ""
        ends = [k for k in reversed(stack) if spans[k][1] == b]  # type: ignore[index]
        if stack[len(stack) - len(ends) :] != ends[::-1]:
            raise AssertionError("spans that cross: element_spans keeps them nested")
        starts = opening.get(b + 1, [])
        points: dict[int, list[Atom]] = defaultdict(list)
        for atom in atoms_at.get(b, []):
            points[_best_point(stack, ends + starts, len(ends), atom.ancestors)].append(atom)
        cuts, at = [], pos
        for k in ends:  # innermost first; an outer element ends no earlier than an inner one
            at = max(at, len(word) - len(_kept(word, inline[k].trail, str.endswith)))
            cuts.append(at)
        for p, cut in enumerate([*cuts, len(word)]):
            out.append(escape(word[pos:cut], quote=False))
            out += _spaced(points.get(p, []), out, b == -1 and len(target) > 0)
            pos = cut
            if p < len(ends):
                out.append(inline[stack.pop()].close)
        if 0 <= b < len(target) - 1:
            out.append(" ")
        following, pos = target[b + 1] if b + 1 < len(target) else "", 0
        for p, k in enumerate(starts, len(ends)):  # outermost first, each after its punctuation
            if p > len(ends):
                out += _spaced(points.get(p, []), out, True)
            at = max(pos, len(_kept(following, inline[k].lead, str.startswith)))
            out += [escape(following[pos:at], quote=False), inline[k].open]
            pos = at
            stack.append(k)
        if starts:
            out += _spaced(points.get(len(ends) + len(starts), []), out, True)
    return "".join(out)


def _spaced(atoms: list[Atom], out: list[str], word_next: bool) -> list[str]:
    """The atoms' texts, each with the space it had before it (unless the text written so far
    ends in one), and with the space it had after it when a word comes next."""
    found: list[str] = []
    for atom in atoms:
        written = next((text for text in [*reversed(found), *reversed(out)] if text), "")
        before = " " if atom.space_before and written and not written.endswith(" ") else ""
        found.append(before + atom.text + (" " if atom.space_after and word_next else ""))
    return found


def _kept(word: str, punctuation: str, has: Callable[[str, str], bool]) -> str:
    """``punctuation`` if ``word`` has it at that end (and more besides), else ""."""
    return punctuation if punctuation and len(word) > len(punctuation) and has(word, punctuation) \
        else ""  # fmt: skip


def _best_point(stack: list[int], events: list[int], closing: int, ancestors: frozenset) -> int:
    """Where among a boundary's end and start tags an atom goes: where the open elements are
    most like the ones it was inside in the source (the first such place)."""
    open_now = set(stack)
    best, best_score = 0, None
    for p in range(len(events) + 1):
        score = len(open_now & ancestors) - len(open_now - ancestors)
        if best_score is None or score > best_score:
            best, best_score = p, score
        if p < closing:
            open_now.discard(events[p])
        elif p < len(events):
            open_now.add(events[p])
    return best
