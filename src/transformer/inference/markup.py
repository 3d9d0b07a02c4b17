"""Inline markup kept through translation, first half: a text with HTML or XML tags read into the
plain text the model translates and the elements around it.

``translate --markup html`` (or ``xml``) takes the tags out of each segment, translates the
plain text, and puts every tag back around the target words that its source words align to
(markup_segments.py, tag_placement.py): the method of Marian and bergamot-translator
(``html.cpp``). The text is read by the standard library's ``html.parser`` (no regular
expressions), with entity and character references left to us so that every character of the
plain text knows where it came from:

- ``Markup.plain``: the text between the tags, references decoded (``&amp;`` is ``&``);
- ``Markup.spans``: for each character of ``plain``, its place in the source (a reference's
  characters all point at the whole reference);
- ``Markup.elements``: every element in the order its start tag comes, with its content's place
  in ``plain`` and its tags exactly as written (attributes, quotes and case byte for byte).

Some elements are kept as written, never translated (``verbatim``): void elements (``<br>``,
``<img>``, any ``<x/>``), comments, ``<!DOCTYPE>``, processing instructions, CDATA sections, and
``<code>``, ``<pre>``, ``<script>``, ``<style>`` and any element with ``translate="no"``, whose
content the model never sees. In HTML a ``<br>`` and the start and end of a block element
(``<p>``, ``<div>``, ``<li>`` ...) separate words, as a browser shows them.

The markup must be balanced, HTML too: every element that is not void is closed, in order (the
end tags HTML lets one leave out, ``</p>`` and ``</li>``, are required). An unclosed or stray
tag, tags closed out of order, an unfinished tag (``<b`` or ``<b class="x``), and in XML a bare
``<`` or ``&``, an entity XML does not define or a reference to a character it does not allow
(in the text or in an attribute value) are a ``MarkupError``: one line naming the line.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from dataclasses import dataclass
from html.parser import HTMLParser

from ..errors import UserError

MARKUPS = ("text", "html", "xml")  # "text": no markup, the text as it is
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}  # HTML elements without content or end tag  # fmt: skip
PROTECTED = {"code", "pre", "script", "style"}  # kept as written, as translate="no" is
BLOCK = {"address", "article", "aside", "blockquote", "body", "caption", "dd", "details",
         "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1",
         "h2", "h3", "h4", "h5", "h6", "head", "header", "hr", "html", "li", "main", "nav", "ol",
         "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead",
         "title", "tr", "ul"}  # HTML elements that start a line of their own  # fmt: skip
XML_ENTITIES = {"amp", "lt", "gt", "quot", "apos"}
# an entity or character reference, or a bare '&': (numeric, name), both None for a bare '&'
_REFERENCE = re.compile(r"&(?:(#[0-9]+|#[xX][0-9a-fA-F]+)|([A-Za-z_:][\w.:-]*));|&")
_TAG_START = set("/!?")  # after "<", these (or a letter) begin a tag


class MarkupError(UserError):
    """Markup that cannot be kept: ``line`` (from 1, in the text given) and what is wrong."""

    def __init__(self, line: int, reason: str, text: int | None = None) -> None:
        where = f"line {line}" if text is None else f"text {text + 1}, line {line}"
        super().__init__(f"{where}: {reason}")
        self.line, self.reason, self.text = line, reason, text


def _not_an_xml_entity(line: int, name: str) -> MarkupError:
    return MarkupError(line, f"&{name}; is not an XML entity (XML has &amp; &lt; &gt; &quot; "
                       "&apos; and numeric references)")  # fmt: skip


def _check_xml_character(line: int, reference: str) -> None:
    """Refuses a character reference to a character XML does not allow (``&#0;``, a surrogate,
    past U+10FFFF): kept in an attribute as written, it would make the output ill-formed."""
    digits = reference[2:-1]
    code = int(digits[1:], 16) if digits[:1] in "xX" else int(digits)
    if not (code in (0x9, 0xA, 0xD) or 0x20 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD
            or 0x10000 <= code <= 0x10FFFF):  # fmt: skip
        raise MarkupError(line, f"{reference} is not a character XML allows")


@dataclass
class Element:
    name: str  # as matched: lower-cased in HTML, as written in XML
    start_tag: str  # as written; a comment, a declaration: all of it
    end_tag: str  # as written; "" for a void element, <x/>, a comment
    start: int  # its content in the plain text: [start, end)
    end: int
    src_start: int  # the whole element in the source, start tag to end tag: [src_start, src_end)
    src_end: int
    line: int  # the line its start tag is on, from 1
    parent: int | None  # the element it is in (an index into ``Markup.elements``)
    verbatim: bool  # kept as written, content and all
    block: bool = False  # an HTML block element: a document's sentence ends at its edges


@dataclass
class Markup:
    source: str
    plain: str  # what the model reads: the text between the tags, references decoded
    spans: list[tuple[int, int]]  # per character of ``plain``: where it is in ``source``
    elements: list[Element]  # in the order of their start tags
    line_starts: list[int]  # where each line of the source starts

    def raw(self, element: Element) -> str:
        """The element as written, start tag to end tag."""
        return self.source[element.src_start : element.src_end]

    def line_of(self, at: int) -> int:
        """The line (from 1) of position ``at`` of the source."""
        return bisect_right(self.line_starts, at)


def parse_markup(source: str, kind: str) -> Markup:
    """Reads ``source`` as ``kind`` ("html" or "xml") markup (the module docstring says how);
    a ``MarkupError`` names the line of the first thing that is wrong."""
    if kind not in ("html", "xml"):
        raise ValueError(f"markup {kind!r}: parse_markup reads html or xml")
    line_starts = [0] + [i + 1 for i, c in enumerate(source) if c == "\n"]
    parser = _EventParser(line_starts)
    parser.feed(source)
    parser.close()
    return _Builder(source, kind, line_starts).build(parser.events)


class _EventParser(HTMLParser):
    """``html.parser``'s events as (what, offset, payload), in order; where each ends is where
    the next begins. References stay events of their own (``convert_charrefs=False``)."""

    def __init__(self, line_starts: list[int]) -> None:
        super().__init__(convert_charrefs=False)
        self.events: list[tuple[str, int, object]] = []
        self.line_starts = line_starts

    def _add(self, what: str, payload: object = None) -> None:
        line, column = self.getpos()
        self.events.append((what, self.line_starts[line - 1] + column, payload))

    def handle_starttag(self, tag, attrs):
        self._add("start", (tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self._add("empty", (tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("data", data)

    def handle_entityref(self, name):
        self._add("ref", name)

    def handle_charref(self, name):
        self._add("ref", None)

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")


class _Builder:
    """Turns the parser's events into a ``Markup``, checking the balance on the way."""

    def __init__(self, source: str, kind: str, line_starts: list[int]) -> None:
        self.source, self.xml, self.line_starts = source, kind == "xml", line_starts
        self.plain: list[str] = []
        self.spans: list[tuple[int, int]] = []
        self.elements: list[Element] = []
        self.open: list[int] = []  # elements whose end tag is still to come, outermost first
        self.hidden = 0  # open elements whose content is kept as written (protected)
        self.length = 0  # of the plain text so far

    def build(self, events: list[tuple[str, int, object]]) -> Markup:
        ends = [at for _, at, _ in events[1:]] + [len(self.source)] if events else []
        for (what, at, payload), end in zip(events, ends, strict=True):
            getattr(self, f"_{what}")(at, end, payload)
        if self.open:
            e = self.elements[self.open[-1]]
            raise MarkupError(e.line, f"<{e.name}> is never closed")
        plain = "".join(self.plain)
        return Markup(self.source, plain, self.spans, self.elements, self.line_starts)

    def _line(self, at: int) -> int:
        return bisect_right(self.line_starts, at)

    def _text(self, chars: str, spans: list[tuple[int, int]]) -> None:
        if not self.hidden:
            self.plain.append(chars)
            self.spans += spans
            self.length += len(chars)

    def _space(self, at: int) -> None:
        """A word break where HTML shows one (``<br>``, a block's edges), unless there is one."""
        if not self.xml and not self.hidden and self.plain and not self.plain[-1][-1:].isspace():
            self._text(" ", [(at, at)])

    def _name(self, at: int, end: int, given: str) -> str:
        """HTML's names are lower-cased by the parser; XML's keep their case, as written."""
        if not self.xml:
            return given
        raw = self.source[at:end].lstrip("</").lstrip()
        return raw[: next((i for i, c in enumerate(raw) if c.isspace() or c in "/>"), len(raw))]

    def _data(self, at: int, end: int, data: str) -> None:
        if data.startswith("<") and not self.hidden:
            after = self.source[at + 1 : at + 2]
            if after.isalpha() or (after and after in _TAG_START):
                tag = self.source[at:].split("\n", 1)[0]
                tag = tag if len(tag) <= 20 else tag[:20] + "..."
                raise MarkupError(self._line(at), f"an unfinished tag: {tag}")
            if self.xml:
                raise MarkupError(self._line(at), "a bare '<' in XML text; write &lt;")
        if self.xml and "&" in data and not self.hidden:
            raise MarkupError(self._line(at), "a bare '&' in XML text; write &amp;")
        self._text(data, [(at + i, at + i + 1) for i in range(len(data))])

    def _ref(self, at: int, end: int, name: str | None) -> None:
        raw = self.source[at:end]
        if self.xml and name is not None and name not in XML_ENTITIES and not self.hidden:
            raise _not_an_xml_entity(self._line(at), name)
        if self.xml and name is None and not self.hidden:
            _check_xml_character(self._line(at), raw)
        decoded = html.unescape(raw)
        self._text(decoded, [(at, end)] * len(decoded))

    def _check_attributes(self, at: int, end: int) -> None:
        """In XML, a start tag's attribute values obey the rules of its text: no bare ``<`` or
        ``&``, no entity XML does not define (they would be written out as given)."""
        if not self.xml or self.hidden:
            return
        tag = self.source[at:end]
        if "<" in tag[1:]:
            raise MarkupError(self._line(at), "a bare '<' in an XML attribute value; write &lt;")
        for reference in _REFERENCE.finditer(tag):
            numeric, name = reference.groups()
            if name is None and numeric is None:
                raise MarkupError(self._line(at), "a bare '&' in an XML attribute value; write "
                                  "&amp;")  # fmt: skip
            if name is not None and name not in XML_ENTITIES:
                raise _not_an_xml_entity(self._line(at), name)
            if numeric is not None:
                _check_xml_character(self._line(at), reference.group())

    def _element(self, name: str, at: int, end: int, verbatim: bool, block: bool) -> Element:
        parent = self.open[-1] if self.open else None
        element = Element(name, self.source[at:end], "", self.length, self.length, at, end,
                          self._line(at), parent, verbatim, block)  # fmt: skip
        self.elements.append(element)
        return element

    def _start(self, at: int, end: int, payload: tuple[str, dict]) -> None:
        self._check_attributes(at, end)
        name, attrs = self._name(at, end, payload[0]), payload[1]
        if not self.xml and name in VOID:
            self._empty(at, end, payload)
            return
        block = not self.xml and name in BLOCK
        if block:
            self._space(at)
        translate = (attrs.get("translate"), attrs.get("its:translate"))
        protected = name in PROTECTED or "no" in translate
        hides = protected or self.hidden > 0  # its content is kept as written
        self._element(name, at, end, hides, block)
        self.open.append(len(self.elements) - 1)
        self.hidden += hides

    def _empty(self, at: int, end: int, payload: tuple[str, dict]) -> None:
        self._check_attributes(at, end)
        name = self._name(at, end, payload[0])
        self._element(name, at, end, True, False)
        if name == "br" or name in BLOCK:
            self._space(at)

    def _other(self, at: int, end: int, payload: None) -> None:
        self._element("!", at, end, True, False)

    def _end(self, at: int, end: int, given: str) -> None:
        name = self._name(at, end, given)
        element = self.elements[self.open[-1]] if self.open else None
        if element is None or element.name != name:  # the open names are read only here:
            # for every end tag, 40,000 nested elements took 20 s
            if all(self.elements[i].name != name for i in self.open):
                raise MarkupError(self._line(at), f"</{name}> closes no open element")
            assert element is not None
            raise MarkupError(self._line(at), f"</{name}> comes before <{element.name}> (line "
                              f"{element.line}) is closed")  # fmt: skip
        self.open.pop()
        element.end_tag, element.src_end = self.source[at:end], end
        element.end = self.length
        self.hidden -= element.verbatim
        if element.block:
            self._space(at)
