"""Inline markup, second part: the segments of a marked-up text that the model translates, and
the text put back together around their translations.

A segment is a run of words that is translated as one sentence: a whole line, or with
``document`` one sentence of a paragraph. Each element relates to a segment in one of three
ways:

- it holds the whole segment (``<p>`` around a line): its tags stay where they are, outside the
  translation, like everything else between segments (leading space, blank lines, an ``<hr>``
  on a line of its own);
- it holds some of the segment's words (``<b>`` around one word): it is *inline*, and its tags
  are put back around the target words its source words align to (tag_placement.py);
- it holds no word at all (a void element, a comment, ``<code>``, an empty ``<a>``): it is kept
  as written and placed between the target words, if it lies between the segment's words.

A document's sentences are found by pysbd in the plain text (documents.py). In HTML, the start
and the end of a block element (``<p>``, ``<li>``, ``<td>`` ...) also end a sentence, in a
document and in a line: ``<p>Hello.</p><p>Goodbye.</p>`` on one line is two segments, each
translated on its own and put back in its own ``<p>``. A sentence boundary inside an inline
element is no boundary: the sentences it touches are translated as one segment, so the element
is still written once, around its words. An element that holds part of a paragraph and part of
the next (across a blank line) is refused.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from .documents import Document, Paragraph, Sentence, read_document
from .markup import Element, Markup, MarkupError, parse_markup
from .tag_placement import Atom, Inline, place_tags


@dataclass
class Segment:
    start: int  # its first non-space character in the plain text
    end: int  # after its last
    src_start: int  # what its translation replaces in the source: [src_start, src_end)
    src_end: int
    line: int  # the source line it starts on, from 1
    text: str  # what the model reads: its words joined by spaces
    words: list[tuple[int, int]]  # each word's place in the plain text
    inline: list[int]  # the elements inline in it (indices into ``Markup.elements``)
    atoms: list[int]  # the elements kept as written that lie between its words


@dataclass
class Marked:
    """A marked-up text read for translation: its segments, in order, and (with ``document``)
    which segments make each paragraph."""

    markup: Markup
    segments: list[Segment]
    paragraphs: list[list[int]]

    def document(self) -> Document:
        """The segments as a plain document of sentences (what ``texts.put_back`` reads)."""
        paragraphs = []
        for members in self.paragraphs:
            found = [self.segments[k] for k in members]
            sentences = [Sentence(s.start, s.end, s.line, s.text) for s in found]
            paragraphs.append(Paragraph(found[0].start, found[-1].end, found[0].line, sentences))
        return Document(self.markup.plain, paragraphs)

    def source_of(self, k: int) -> str:
        """Segment ``k`` as written, tags and all."""
        return self.markup.source[self.segments[k].src_start : self.segments[k].src_end]

    def paragraph(self, first: int, last: int) -> tuple[int, int]:
        """Where the paragraph of segments ``first`` to ``last`` is in the source: from the
        start of its first line to the end of its last, so with the block tags around it
        (``<p>`` ... ``</p>``), but with no other segment and no space at either end."""
        source, segments = self.markup.source, self.segments
        low = segments[first - 1].src_end if first else 0
        high = segments[last + 1].src_start if last + 1 < len(segments) else len(source)
        start = max(source.rfind("\n", 0, segments[first].src_start) + 1, low)
        end = source.find("\n", segments[last].src_end)
        end = min(len(source) if end < 0 else end, high)
        while source[start].isspace():  # a segment starts with a word: these stop there
            start += 1
        while source[end - 1].isspace():
            end -= 1
        return start, end

    def put_back(self, translations: list[tuple[str, list[tuple[int, int]]]]) -> list[str]:
        """Each segment's translation (its text and its word alignment) with the segment's tags
        put back."""
        out = []
        for segment, (text, alignment, best_targets) in zip(
            self.segments, translations, strict=True
        ):
            inline, atoms = self._tagged(segment)
            out.append(place_tags(text.split(), alignment, inline, atoms, best_targets))
        return out

    def assemble(self, marked: list[str], first: int = 0, last: int | None = None) -> str:
        """The source (default: all of it; else the paragraph of segments ``first`` to
        ``last``, ``paragraph``) with each segment replaced by its marked-up translation."""
        source, segments = self.markup.source, self.segments
        if last is None:
            last, (at, end) = len(segments) - 1, (0, len(source))
        else:
            at, end = self.paragraph(first, last)
        out = []
        for k in range(first, last + 1):
            out += [source[at : segments[k].src_start], marked[k]]
            at = segments[k].src_end
        return "".join([*out, source[at:end]])

    def _tagged(self, segment: Segment) -> tuple[list[Inline], list[Atom]]:
        elements = self.markup.elements
        index = {e: k for k, e in enumerate(segment.inline)}

        def around(e: Element) -> frozenset[int]:
            found, parent = set(), e.parent
            while parent is not None:
                if parent in index:
                    found.add(index[parent])
                parent = elements[parent].parent
            return frozenset(found)

        # the words in order: an element's are found by bisection, not by a walk through all
        starts, ends = [a for a, _ in segment.words], [b for _, b in segment.words]
        inline = []
        for e in (elements[i] for i in segment.inline):
            covered = list(range(bisect_right(ends, e.start), bisect_left(starts, e.end)))
            first, last = segment.words[covered[0]], segment.words[covered[-1]]
            lead = _punctuation(self.markup.plain[first[0] : e.start])
            trail = _punctuation(self.markup.plain[e.end : last[1]])
            inline.append(Inline(e.start_tag, e.end_tag, covered, around(e), lead, trail))
        atoms = []
        for e in (elements[i] for i in segment.atoms):
            after = bisect_left(starts, e.start) - 1  # the words that start before it, - 1
            plain = self.markup.plain
            before, behind = plain[e.start - 1 : e.start], plain[e.end : e.end + 1]
            atoms.append(Atom(self.markup.raw(e), after, around(e), before.isspace(),
                              behind.isspace()))  # fmt: skip
        return inline, atoms


def read_marked(text: str, kind: str, document: bool, language: str) -> Marked:
    """``text`` (one line, or with ``document`` a document) read as ``kind`` markup and cut into
    segments, as the module docstring says; a ``MarkupError`` names the line at fault."""
    markup = parse_markup(text, kind)
    worded, whole = _kinds(markup)
    if not document:  # one paragraph of one sentence, cut where blocks start and end
        words = _words(markup.plain, 0, len(markup.plain))
        line = [(words[0][0], words[-1][1])] if words else []
        groups = _merged(markup, worded, [_cut(markup.plain, _block_edges(markup), line)] if
                         words else [])  # fmt: skip
    else:
        groups = _merged(markup, worded, _sentences(markup, language))
    starts = [e.start for e in markup.elements]
    bounds = [bound for group in groups for bound in group]
    segments: list[Segment] = []
    for k, (start, end) in enumerate(bounds):  # its elements start after the one before it ends
        low = bounds[k - 1][1] if k else 0
        high = bounds[k + 1][0] if k + 1 < len(bounds) else len(markup.plain)
        near = range(bisect_left(starts, low), bisect_right(starts, high))
        segments.append(_segment(markup, start, end, near, worded, whole))
    paragraphs, at = [], 0
    for group in groups:
        paragraphs.append(list(range(at, at + len(group))))
        at += len(group)
    return Marked(markup, segments, paragraphs)


def _punctuation(chars: str) -> str:
    """``chars`` if they are punctuation only, else "": a tag inside a word wraps all of it."""
    return chars if not any(c.isalnum() for c in chars) else ""


def _words(plain: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of each run of non-space characters of ``plain[start:end]``."""
    found, at = [], None
    for i in range(start, end):
        if plain[i].isspace():
            if at is not None:
                found.append((at, i))
            at = None
        elif at is None:
            at = i
    return found + ([(at, end)] if at is not None else [])


def _kinds(markup: Markup) -> tuple[set[int], set[int]]:
    """(the elements that hold words, the elements kept whole as written): void elements,
    comments, protected elements and elements without a word; what is inside one of those
    is neither."""
    worded: set[int] = set()
    whole: set[int] = set()
    for i, e in enumerate(markup.elements):
        if e.parent is not None and e.parent not in worded:
            continue  # inside an element kept whole (or inside one inside it)
        if not e.verbatim and markup.plain[e.start : e.end].strip():
            worded.add(i)
        else:
            whole.add(i)
    return worded, whole


def _sentences(markup: Markup, language: str) -> list[list[tuple[int, int]]]:
    """Per paragraph, its sentences' (start, end) in the plain text; in HTML cut again where a
    block element starts or ends."""
    paragraphs = read_document(markup.plain, language).paragraphs
    cuts = _block_edges(markup)
    return [_cut(markup.plain, cuts, [(s.start, s.end) for s in p.sentences]) for p in paragraphs]


def _block_edges(markup: Markup) -> list[int]:
    """Where in the plain text an HTML block element that is translated starts or ends, sorted."""
    return sorted({at for e in markup.elements if e.block and not e.verbatim
                   for at in (e.start, e.end)})  # fmt: skip


def _cut(plain: str, cuts: list[int], sentences: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sentences ((start, end) in ``plain``) cut at ``cuts``, each piece without the space
    around it."""
    pieces = []
    for s_start, s_end in sentences:
        start = s_start
        for cut in cuts[bisect_right(cuts, s_start) : bisect_left(cuts, s_end)]:
            left = plain[start:cut].rstrip()
            if left:
                pieces.append((start, start + len(left)))
                start = cut + len(plain[cut:s_end]) - len(plain[cut:s_end].lstrip())
        pieces.append((start, s_end))
    return pieces


def _merged(
    markup: Markup, worded: set[int], paragraphs: list[list[tuple[int, int]]]
) -> list[list[tuple[int, int]]]:
    """The sentences with those that an inline element crosses joined into one."""
    changed = True
    while changed:
        changed = False
        flat = [(p, k, s) for p, group in enumerate(paragraphs) for k, s in enumerate(group)]
        starts, ends = [s[0] for _, _, s in flat], [s[1] for _, _, s in flat]
        for e in (markup.elements[i] for i in sorted(worded)):
            first, last = bisect_right(ends, e.start), bisect_left(starts, e.end) - 1
            if last <= first or (e.start <= starts[first] and e.end >= ends[last]):
                continue  # in one sentence, or around whole ones
            (p, k, _), (q, m, _) = flat[first], flat[last]
            if p != q:
                raise MarkupError(e.line, f"<{e.name}> holds part of a paragraph and part of "
                                  "the next (across a blank line); close it before the blank "
                                  "line or put it around both")  # fmt: skip
            paragraphs[p][k : m + 1] = [(starts[first], ends[last])]
            changed = True
            break
    return paragraphs


def _segment(
    markup: Markup, start: int, end: int, near: range, worded: set[int], whole: set[int]
) -> Segment:
    """The segment of the plain text's [start, end): its words, its inline elements, those kept
    whole that lie between its words, and the source it replaces. ``near``: the elements that
    start in or just before it."""
    elements, plain = markup.elements, markup.plain
    words = _words(plain, start, end)
    inline: list[int] = []
    atoms = []
    for i in near:
        e = elements[i]
        if i in whole:
            inside = e.parent is not None and e.parent in inline  # so it is in the segment
            if start < e.start < end or inside:
                atoms.append(i)
            continue
        around = e.start <= start and end <= e.end  # it holds the whole segment: left outside
        if i in worded and e.start < end and e.end > start and not around:
            inline.append(i)
    src_start, src_end = markup.spans[start][0], markup.spans[end - 1][1]
    for i in inline + atoms:
        src_start = min(src_start, elements[i].src_start)
        src_end = max(src_end, elements[i].src_end)
    text = " ".join(plain[a:b] for a, b in words)
    return Segment(start, end, src_start, src_end, markup.line_of(src_start), text, words,
                   inline, atoms)  # fmt: skip
