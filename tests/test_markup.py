"""Inline markup kept through translation (inference/markup.py, markup_segments.py,
tag_placement.py). Engines whose "translation" is known by construction (the words as given, or
reordered, with the alignment that says where each went) show the invariants: with the identity
the tags come back around the same words; reordered, the output is still well-formed (an XML
parser reads it), holds every tag exactly once with its attributes byte for byte, and each
element holds only words that were inside it. Bad markup is one line naming the line."""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest

from transformer.config import DecodeConfig
from transformer.errors import UserError
from transformer.inference.confidence import Confidence, Word
from transformer.inference.markup import MarkupError, parse_markup
from transformer.inference.tag_placement import Atom, Inline, place_tags
from transformer.inference.texts import record, translate_texts
from transformer.inference.translation import Translation, TranslationResult

from helpers import assert_error, cli_main, client_for, one_line_error

Rewrite = Callable[[list[str]], tuple[list[str], list[tuple[int, int]]]]


def same(words: list[str]) -> tuple[list[str], list[tuple[int, int]]]:
    return words, [(i, i) for i in range(len(words))]


def backwards(words: list[str]) -> tuple[list[str], list[tuple[int, int]]]:
    n = len(words)
    return words[::-1], [(n - 1 - j, j) for j in range(n)]


@dataclass
class WordEngine:
    """Translates a sentence into ``rewrite(its words)``: the words, in the order it says, with
    the alignment it gives; a piece is a word."""

    rewrite: Rewrite = same
    calls: list[list[str]] = field(default_factory=list)
    decode = DecodeConfig()
    name = "words"  # an engine of its own: alignments as it gives them

    def __post_init__(self):
        tokenizer = SimpleNamespace(encode=lambda text: text.split())
        self.tokenizers = SimpleNamespace(src=tokenizer, tgt=tokenizer)
        self.config = SimpleNamespace(model=SimpleNamespace(max_positions=1000),
                                      data=SimpleNamespace(src_lang="en"))  # fmt: skip

    def translate(self, sentences, decode=None, prefixes=None, stopped=None):
        self.calls.append(list(sentences))
        found = []
        for s in sentences:
            words, links = self.rewrite(s.split())
            aligned = links if decode is not None and decode.alignment else None
            found.append([Translation(" ".join(words), -1.0, [], aligned)])
        return TranslationResult(found, [])


def marked(texts: list[str], engine=None, kind: str = "html", **options) -> list[str]:
    engine = engine or WordEngine()
    return [t.text for t in translate_texts(engine, texts, markup=kind, **options).texts]


class _Reader(HTMLParser):
    """An independent reading of markup: start tags as written, end tags, words."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[str] = []
        self.tags: Counter = Counter()
        self.feed(text)
        self.close()

    def _tag(self, written: str) -> None:
        self.items.append(written)
        self.tags[written] += 1

    def handle_starttag(self, tag, attrs):
        self._tag(self.get_starttag_text())

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self._tag(f"</{tag}>")

    def handle_data(self, data):
        self.items += data.split()

    def handle_comment(self, data):
        self._tag(f"<!--{data}-->")


def structure(text: str) -> list[str]:
    """The tags (start tags as written) and the words of ``text`` in order, spaces aside."""
    return _Reader(text).items


def tags(text: str) -> Counter:
    """How many times each tag (start tags as written) is in ``text``."""
    return _Reader(text).tags


# ------------------------------------------------------------------ the tags around their words
LINES = [
    "A <b>red car</b> is <i>very <u>fast</u></i> today",
    'Read <a href="/docs?a=1&amp;b=2" title=\'it&apos;s "here"\'>the docs</a>. Then (<b>stop</b>).',
    '<p class="intro">Two <em>words</em></p>',
    'One<br/>two <img src="x.png" alt="an &lt;x&gt;"> three <span id="s"><b>four</b> five</span>',
    "  leading and trailing space  ",
    "<b>all of it</b>",
    "Tom &amp; Jerry &lt;3 <i>caf&eacute;</i> <!-- a note --> end",
    "Hi <script>if (a < b) { x('</p>') }</script> there <style>p > b { }</style> <B>you</B>",
    "",
    "<hr/>",
]


@pytest.mark.parametrize("line", LINES)
def test_with_the_words_as_they_were_the_tags_come_back_as_they_were(line):
    (out,) = marked([line])
    assert structure(out) == structure(line)
    assert out.startswith(line[: len(line) - len(line.lstrip())])  # leading space kept


def test_reordered_words_take_their_tags_along():
    engine = WordEngine(backwards)
    (out,) = marked(["a <b>red car</b> is <i>fast</i>"], engine)
    assert out == "<i>fast</i> is <b>car red</b> a"
    assert engine.calls == [["a red car is fast"]]  # the model reads the plain text


def test_entities_are_decoded_for_the_model_and_written_escaped():
    engine = WordEngine()
    (out,) = marked(["x &lt; y &amp;&amp; <b>&quot;z&quot;</b> &#233;t&eacute;"], engine)
    assert engine.calls == [['x < y && "z" été']]
    assert out == 'x &lt; y &amp;&amp; <b>"z"</b> été'


def test_code_pre_and_translate_no_are_kept_as_written_and_never_reach_the_model():
    line = ('Run <code>ls -l &amp;&amp; <b>x</b></code> then <pre>a  b</pre> and '
            '<span translate="no">Acme <i>Corp</i></span> now')  # fmt: skip
    engine = WordEngine(backwards)
    (out,) = marked([line], engine)
    assert engine.calls == [["Run then and now"]]
    for kept in ("<code>ls -l &amp;&amp; <b>x</b></code>", "<pre>a  b</pre>",
                 '<span translate="no">Acme <i>Corp</i></span>'):  # fmt: skip
        assert out.count(kept) == 1
    assert tags(out) == tags(line)


# ------------------------------------------------------------------------ the span rule, alone
def test_an_element_whose_words_land_apart_wraps_the_longest_run_once():
    b = Inline("<b>", "</b>", [0, 1, 2], frozenset())
    # target words 0, 2, 3 come from the element's source words: runs [0] and [2, 3]
    out = place_tags(["p", "q", "r", "s"], [(0, 0), (3, 1), (1, 2), (2, 3)], [b], [])
    assert out == "p q <b>r s</b>"


def test_an_element_whose_words_got_no_target_word_wraps_the_nearest_one():
    b = Inline("<b>", "</b>", [1], frozenset())
    out = place_tags(["p", "q"], [(0, 0), (2, 1)], [b], [])  # source word 1 was left out
    assert out == "<b>p</b> q"
    assert place_tags([], [], [b], [Atom("<br/>", 0, frozenset())]) == "<b></b><br/>"


def test_deeply_nested_markup_is_read_in_linear_time():
    """Every end tag read the names of all the open elements: 40,000 nested took 20 s."""
    import time

    start = time.perf_counter()
    markup = parse_markup("<b>" * 40_000 + "twelve" + "</b>" * 40_000, "html")
    assert time.perf_counter() - start < 5  # 0.5 s here
    assert len(markup.elements) == 40_000 and markup.plain == "twelve"


@pytest.mark.parametrize(
    ("aligned", "expected"),
    [
        ([(0, 0), (4, 1)], "<b>p</b> q"),  # source words 0 and 4, two from 2: the one before
        ([(0, 0), (3, 1)], "p <b>q</b>"),  # 3 is one from 2, 0 two: the one after
        ([(4, 0), (5, 1)], "<b>p</b> q"),  # none before: the first after
        ([(0, 0), (1, 1)], "p <b>q</b>"),  # none after: the last before
    ],
)
def test_the_nearest_source_word_with_a_target_word_lends_it(aligned, expected):
    b = Inline("<b>", "</b>", [2], frozenset())
    assert place_tags(["p", "q"], aligned, [b], []) == expected


def test_many_elements_on_one_line_are_placed_in_linear_time():
    """Each element's words were searched for among all the target words and its span checked
    against every earlier one: 20,000 elements on one line took 46 s to translate, now 9 s."""
    import time

    n = 20_000
    inline = [Inline("<i>", "</i>", [k], frozenset()) for k in range(n)]
    alignment = [(k, k) for k in range(n // 2)]  # the second half got no target word
    start = time.perf_counter()
    out = place_tags(["w"] * (n // 2), alignment, inline, [])
    assert time.perf_counter() - start < 5  # 0.1 s here; the walks took 80 s
    assert out.count("<i>") == n and out.startswith("<i>w</i> <i>w</i>")


def test_a_source_word_no_target_word_chose_lends_its_tag_only_to_an_element_with_no_word():
    # "four hundred and seventy-eight": "cent" chose "hundred"; "and", chosen by nothing, has
    # "cent" for its best target word (word_links' second list)
    target, alignment, best_targets = (
        ["quatre", "cent", "soixante-dix-huit"],
        [(0, 0), (1, 1), (3, 2)],
        [(2, 1)],
    )
    em = Inline("<em>", "</em>", [2, 3], frozenset())  # <em>and seventy-eight</em>
    assert (
        place_tags(target, alignment, [em], [], best_targets)
        == "quatre cent <em>soixante-dix-huit</em>"
    )
    b = Inline("<b>", "</b>", [2], frozenset())  # <b>and</b>: its only word is its best one
    assert (
        place_tags(target, alignment, [b], [], best_targets)
        == "quatre <b>cent</b> soixante-dix-huit"
    )
    # siblings that would share a target word, one by a best-target link: the one whose word it
    # is keeps it, the other is written empty after it (nested, it gave "cent" a bold that no
    # word of the source had along with the italics)
    i = Inline("<i>", "</i>", [0, 1], frozenset())  # <i>four hundred</i> <b>and</b>
    out = place_tags(target, alignment, [i, b], [], best_targets)
    assert out == "<i>quatre cent</i><b></b> soixante-dix-huit"
    # the same when the element with only a best word comes first in the source
    first = Inline("<b>", "</b>", [2], frozenset())  # <b>and</b> <i>seventy-eight</i>
    then = Inline("<i>", "</i>", [3], frozenset())
    out = place_tags(target, alignment, [first, then], [], [(2, 2)])
    assert out == "quatre cent <i>soixante-dix-huit</i><b></b>"


def test_links_apart_in_the_source_are_never_nested():
    # "<a>Eine</a> <a>Gruppe</a> <a>von</a> Menschen" -> "A group of people" (Multi30k): "von"
    # chose no word, and its best one is "group", which is "Gruppe"'s: <a> in <a> was written
    a = [Inline(f'<a href="{n}">', "</a>", [n], frozenset()) for n in range(3)]
    alignment, best = [(0, 0), (1, 1), (3, 2), (3, 3)], [(2, 1)]
    out = place_tags(["A", "group", "of", "people"], alignment, a, [], best)
    assert out == '<a href="0">A</a> <a href="1">group</a><a href="2"></a> of people'
    ET.fromstring(f"<r>{out}</r>")
    # an element inside one of them still nests in it
    inner = Inline("<b>", "</b>", [1], frozenset({1}))
    out = place_tags(["A", "group", "of", "people"], alignment, [*a[:2], inner, a[2]], [], best)
    assert out == '<a href="0">A</a> <a href="1"><b>group</b></a><a href="2"></a> of people'


def test_of_runs_as_long_an_element_wraps_the_one_with_its_words_best_target_word():
    # "in einem <b>Zug</b>" -> "on a train": "on" and "train" both chose "Zug", whose best
    # target word (down its column) is "train"
    b = Inline("<b>", "</b>", [2], frozenset())
    alignment, best = [(2, 0), (1, 1), (2, 2)], [(0, 0), (1, 1), (2, 2)]
    assert place_tags(["on", "a", "train"], alignment, [b], [], best) == "on a <b>train</b>"
    assert place_tags(["on", "a", "train"], alignment, [b], []) == "<b>on</b> a train"


def test_an_atom_after_an_end_tag_keeps_its_space():
    code = Atom("<code>x</code>", 2, frozenset(), space_before=True)
    b = Inline("<b>", "</b>", [2], frozenset())
    out = place_tags(["a", "train."], [(1, 0), (2, 1)], [b], [code])
    assert out == "a <b>train.</b> <code>x</code>"


def test_a_void_element_goes_after_the_word_aligned_to_the_word_before_it():
    br = Atom("<br/>", 0, frozenset())
    assert place_tags(["p", "q"], [(1, 0), (0, 1)], [], [br]) == "p q<br/>"
    assert place_tags(["p", "q"], [(0, 0), (1, 1)], [], [Atom("<x/>", -1, frozenset())]) == (
        "<x/>p q"
    )


def test_tags_that_split_a_word_still_nest():
    # "yz" is one word: <b> covers words 0-1, <i> words 1-2, so their runs would cross
    (out,) = marked(["<b>x y</b><i>z w</i>"])
    ET.fromstring(f"<r>{out}</r>")
    assert tags(out) == tags("<b>x y</b><i>z w</i>")


# ------------------------------------------------------------- random pages, reordered at will
def random_line(rng: random.Random, words: list[str], depth: int = 0) -> str:
    """Words with elements around some of them (each with an id), void elements and code."""
    items = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.25 and depth < 3:
            name = rng.choice(["b", "i", "a", "span", "p", "li"])  # blocks cut a line
            attrs = f' id="e{rng.randrange(10**6)}"' + (' href="?a=1&amp;b=\'2\'"' if name == "a"
                                                        else "")  # fmt: skip
            items.append(f"<{name}{attrs}>{random_line(rng, words, depth + 1)}</{name}>")
        elif roll < 0.32:
            items.append(rng.choice(['<br/>', f'<img id="v{rng.randrange(10**6)}" src="a.png"/>',
                                     '<code>a &lt; b</code>']))  # fmt: skip
        else:
            items.append(words.pop(0) if words else "w")
    return " ".join(items)


def shuffled(seed: int) -> Rewrite:
    def rewrite(words):
        order = list(range(len(words)))
        random.Random(seed).shuffle(order)
        return [words[i] for i in order], [(i, j) for j, i in enumerate(order)]

    return rewrite


def words_inside(text: str) -> dict[str, set[str]]:
    """Each element's id -> the words inside it (not those of a ``<code>``), read by an XML
    parser (which also checks that ``text`` is well-formed)."""

    def words(e: ET.Element) -> list[str]:
        found = [] if e.tag == "code" else (e.text or "").split()
        for child in e:
            found += words(child) + (child.tail or "").split()
        return found

    root = ET.fromstring(f"<root>{text}</root>")
    return {e.get("id"): set(words(e)) for e in root.iter() if e.get("id")}


@pytest.mark.parametrize("seed", range(200))
def test_random_lines_keep_every_tag_once_well_formed_around_their_own_words(seed):
    rng = random.Random(seed)
    line = random_line(rng, [f"w{i}" for i in range(12)])
    (same_out,) = marked([line])
    assert structure(same_out) == structure(line)
    (out,) = marked([line], WordEngine(shuffled(seed)))
    assert tags(out) == tags(line)  # every start tag once, attributes byte for byte
    inside, was = words_inside(out), words_inside(line)
    for key, words in was.items():
        if key.startswith("e") and words:  # an element with words: it holds some, its own
            assert inside[key] and inside[key] <= words, (line, out)
    assert sorted(structure(out)) == sorted(structure(line))


@pytest.mark.parametrize("seed", range(100))
def test_random_documents_keep_every_tag_once_across_their_sentences(seed):
    rng = random.Random(seed)
    words = [f"w{i}" + rng.choice(["", "", "."]) for i in range(30)]
    text = "\n\n".join(random_line(rng, words) for _ in range(3)) + "\n"
    (same_out,) = marked([text], document=True)
    assert structure(same_out) == structure(text)
    (out,) = marked([text], WordEngine(shuffled(seed)), document=True)
    assert tags(out) == tags(text)
    assert out.count("\n\n") == text.count("\n\n")
    inside, was = words_inside(out), words_inside(text)
    assert all(inside[k] <= words for k, words in was.items())


# ------------------------------------------------------------------------------------ XML
def test_xml_keeps_the_case_of_names_and_comes_out_well_formed():
    line = '<Seg xml:id="1">The <Term ref="a&amp;b">red</Term> car<Br/></Seg> <x-y>z</x-y>'
    (out,) = marked([line], WordEngine(backwards), "xml")
    assert out == '<x-y>z</x-y> <Seg xml:id="1">car<Br/> <Term ref="a&amp;b">red</Term> The</Seg>'
    ET.fromstring(f"<root>{out}</root>")


@pytest.mark.parametrize(
    "text, kind, line, words",
    [
        ("x <b>y", "html", 1, "<b> is never closed"),
        ("x\ny</b>", "html", 2, "</b> closes no open element"),
        ("<b><i>x</b></i>", "html", 1, "</b> comes before <i>"),
        ('a\nb <a href="x', "html", 2, "an unfinished tag"),
        ("x </b", "html", 1, "an unfinished tag"),
        ("<p>x</br></p>", "html", 1, "</br> closes no open element"),
        ("<B>x</b>", "xml", 1, "</b> closes no open element"),
        ("a & b", "xml", 1, "bare '&'"),
        ("a < b", "xml", 1, "bare '<'"),
        ("a&nbsp;b", "xml", 1, "&nbsp; is not an XML entity"),
        ('x\n<t a="&nbsp;">y</t>', "xml", 2, "&nbsp; is not an XML entity"),
        ('<t a="1 < 2"/>', "xml", 1, "bare '<'"),
        ('<t a="R & D">y</t>', "xml", 1, "bare '&'"),
        ("x\n<t>a &#0; b</t>", "xml", 2, "&#0; is not a character XML allows"),
        ('<t a="&#xD800;">y</t>', "xml", 1, "&#xD800; is not a character XML allows"),
        ('<t a="&#1114112;">y</t>', "xml", 1, "&#1114112; is not a character XML allows"),
    ],
)
def test_markup_that_cannot_be_kept_is_one_line_naming_its_line(text, kind, line, words):
    with pytest.raises(MarkupError) as caught:
        parse_markup(text, kind)
    assert caught.value.line == line and words in caught.value.reason
    assert "\n" not in str(caught.value)


def test_html_reads_a_bare_less_than_as_text():
    assert parse_markup("3 < 4 and 5 <= 6", "html").plain == "3 < 4 and 5 <= 6"


# ------------------------------------------------------------------------------- documents
def test_a_tag_across_a_sentence_boundary_joins_the_sentences_it_touches():
    text = "First one. Second <b>one. Third</b> one. Fourth one.\n"
    engine = WordEngine()
    (out,) = marked([text], engine, document=True)
    assert engine.calls == [["First one.", "Second one. Third one.", "Fourth one."]]
    assert out == text


def test_block_elements_end_sentences_and_stay_where_they_are():
    text = "<h1>A title</h1>\n<ul><li>One item</li><li>Two <b>items</b></li></ul>\n"
    engine = WordEngine(backwards)
    (out,) = marked([text], engine, document=True)
    assert engine.calls == [["A title", "One item", "Two items"]]
    assert out == "<h1>title A</h1>\n<ul><li>item One</li><li><b>items</b> Two</li></ul>\n"


def test_block_elements_on_one_line_are_translated_one_by_one():
    text = "<h1>A title</h1><ul><li>One item</li><li>Two <b>items</b></li></ul>"
    engine = WordEngine(backwards)
    assert marked([text, "x <b>y</b>"], engine) == [
        "<h1>title A</h1><ul><li>item One</li><li><b>items</b> Two</li></ul>",
        "<b>y</b> x",
    ]
    assert engine.calls == [["A title", "One item", "Two items", "x y"]]


def test_an_inline_element_across_blocks_joins_them_on_a_line_too():
    engine = WordEngine()
    assert marked(["w <b>x <p>y</p></b> <p>z</p>"], engine) == ["w <b>x <p>y</p></b> <p>z</p>"]
    assert engine.calls == [["w x y", "z"]]


def test_a_line_of_blocks_is_one_record_its_parts_joined(monkeypatch):
    def confidences(engine, tokenizers, sources, tokens):
        return [Confidence(-1.0, [Word(w, 0.5) for w in s.split()[::-1]]) for s in sources]

    monkeypatch.setattr("transformer.inference.texts.confidences", confidences)
    aligned = DecodeConfig(alignment=True)
    line = "<p>x <b>y</b></p><p>z w v</p>"
    found = translate_texts(WordEngine(backwards), [line, ""], aligned, confidence=True,
                            markup="html")  # fmt: skip
    first, empty = (record(t) for t in found.texts)
    assert first["source"] == line
    assert first["text"] == "<p><b>y</b> x</p><p>v w z</p>"
    assert (first["plain_source"], first["plain_text"]) == ("x y z w v", "y x v w z")
    assert first["alignment"] == "1-0 0-1 4-2 3-3 2-4"
    assert [w["word"] for w in first["words"]] == ["y", "x", "v", "w", "z"]
    assert (first["score"], first["log_prob"]) == (-2.0, -2.0)
    assert (empty["source"], empty["text"]) == ("", "")


@dataclass
class PrefixEngine(WordEngine):
    """A WordEngine that keeps the prefixes it was given and calls some inputs cut to fit."""

    prefixes: list = field(default_factory=list)
    cut: list = field(default_factory=list)

    def translate(self, sentences, decode=None, prefixes=None, stopped=None):
        self.prefixes.append(prefixes)
        return TranslationResult(super().translate(sentences, decode).nbest, self.cut)


def test_a_line_prefix_begins_its_first_block_and_a_cut_block_marks_its_line():
    engine = PrefixEngine(cut=[1])  # the second block of the first line
    found = translate_texts(engine, ["<p>a</p><p>b</p>", "c"], prefixes=["P", "Q"],
                            markup="html").texts  # fmt: skip
    assert engine.prefixes == [["P", "", "Q"]]
    assert [t.truncated for t in found] == [True, False]
    # a marked-up line without text has no block to begin: its prefix is not decoded (a
    # plain empty line with a prefix is, and its output starts with it)
    engine = PrefixEngine(cut=[])
    found = translate_texts(engine, ["<br/>", "", "c"], prefixes=["P", "Q", "R"],
                            markup="html").texts  # fmt: skip
    assert engine.prefixes == [["", "", "R"]] and [t.text for t in found][:2] == ["<br/>", ""]


def test_a_paragraph_record_holds_its_lines_with_their_block_tags():
    text = "<div>\n<p>One two.</p>\n\n  <p>Three.</p><p>Four <b>five</b>.</p>\r\n</div>\n"
    found = translate_texts(WordEngine(backwards), [text], document=True, markup="html")
    paragraphs = record(found.texts[0])["paragraphs"]
    assert [(p["line"], p["source"], p["text"]) for p in paragraphs] == [
        (2, "<p>One two.</p>", "<p>two. One</p>"),
        (4, "<p>Three.</p><p>Four <b>five</b>.</p>", "<p>Three.</p><p><b>five</b>. Four</p>"),
    ]
    assert found.texts[0].text.endswith("<p>Three.</p><p><b>five</b>. Four</p>\r\n</div>\n")


def test_a_tag_across_a_paragraph_break_is_refused_with_its_line():
    with pytest.raises(MarkupError, match=r"^text 1, line 3: <i> holds part of a paragraph"):
        translate_texts(WordEngine(), ["x.\n\ny <i>z.\n\nw</i> v."], document=True, markup="html")


def test_elements_around_whole_paragraphs_are_kept():
    text = "<div>\nOne two. Three four.\n\nFive six.\n</div>"
    (out,) = marked([text], WordEngine(backwards), document=True)
    assert out == "<div>\ntwo. One four. Three\n\nsix. Five\n</div>"


# ------------------------------------------------------------------- records and refusals
def test_a_record_has_the_tags_and_the_plain_text_the_alignment_counts(monkeypatch):
    def confidences(engine, tokenizers, sources, tokens):
        return [Confidence(0.0, []) for _ in sources]

    monkeypatch.setattr("transformer.inference.texts.confidences", confidences)
    engine = WordEngine(backwards)
    found = translate_texts(engine, ["x <b>y</b>"], confidence=False, markup="html").texts[0]
    r = record(found)
    assert (r["source"], r["text"]) == ("x <b>y</b>", "<b>y</b> x")
    assert (r["plain_source"], r["plain_text"]) == ("x y", "y x")
    assert "alignment" not in r  # not asked for
    aligned = DecodeConfig(alignment=True)
    found = translate_texts(engine, ["x <b>y</b>"], aligned, confidence=True, markup="html")
    assert record(found.texts[0])["alignment"] == "1-0 0-1"


def test_flagged_words_are_marked_inside_their_tags(monkeypatch):
    def confidences(engine, tokenizers, sources, tokens):
        return [Confidence(0.0, [Word("y", 0.1), Word("x", 0.9)]) for _ in sources]

    monkeypatch.setattr("transformer.inference.texts.confidences", confidences)
    assert marked(["x <b>y</b>"], WordEngine(backwards), flag_below=0.5) == ["<b>[[y]]</b> x"]


@pytest.mark.parametrize(
    "options, words",
    [
        ({"markup": "markdown"}, "markup 'markdown': choose one of text, html, xml"),
        ({"markup": "html", "decode": DecodeConfig(nbest=2, beam_size=2)}, "nbest 2"),
        ({"markup": "html", "decode": DecodeConfig(alignment=True)}, "output_format jsonl"),
    ],
)
def test_what_markup_cannot_do_is_one_line(options, words):
    with pytest.raises(UserError, match=words):
        translate_texts(WordEngine(), ["x"], **options)


# ------------------------------------------------- the command line, Python and HTTP, for real
PAGE = [
    "<p><b>seven hundred</b> and <i>two</i></p>",
    '  ninety <a href="/n?x=1&amp;y=2">nine</a><br/> <code>x = 99</code>',
    "",
    "<b>three</b> hundred and <em>forty</em> two",
]


def write_page(tmp_path, lines=PAGE):
    page = tmp_path / "page.html"
    page.write_text("".join(line + "\n" for line in lines))
    return page


@pytest.mark.slow
def test_translate_markup_html_keeps_every_tag_of_every_line(numbers_model, tmp_path):
    out = tmp_path / "out.html"
    done = cli_main("translate", str(numbers_model), "--markup", "html", "-i",
                    str(write_page(tmp_path)), "-o", str(out), "--device", "cpu")  # fmt: skip
    assert done.code == 0, done.stderr
    got = out.read_text().splitlines()
    assert len(got) == len(PAGE)
    for line, translated in zip(PAGE, got, strict=True):
        assert tags(translated) == tags(line)
        ET.fromstring(f"<r>{translated}</r>")
    assert got[1].startswith("  ") and got[2] == "" and "<code>x = 99</code>" in got[1]
    done = cli_main("translate", str(numbers_model), "--markup", "html", "--document", "-i",
                    str(write_page(tmp_path)), "--device", "cpu")  # fmt: skip
    assert done.code == 0, done.stderr
    assert tags(done.stdout) == tags("\n".join(PAGE))


@pytest.mark.slow
def test_jsonl_with_markup_has_the_tags_and_the_plain_text(numbers_model, tmp_path):
    page = str(write_page(tmp_path))
    done = cli_main("translate", str(numbers_model), "--markup", "html", "--output_format",
                    "jsonl", "-i", page, "--device", "cpu")  # fmt: skip
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["source"] for r in records] == PAGE
    assert records[0]["plain_source"] == "seven hundred and two"
    assert " ".join(w["word"] for w in records[0]["words"]) == records[0]["plain_text"]
    assert tags(records[0]["text"]) == tags(PAGE[0]) and "alignment" not in records[0]
    done = cli_main("translate", str(numbers_model), "--markup", "html", "--output_format",
                    "jsonl", "-i", page, "--device", "cpu", "--decode.alignment")  # fmt: skip
    assert "alignment" in json.loads(done.stdout.splitlines()[0])


@pytest.mark.slow
@pytest.mark.parametrize(
    "lines, options, words",
    [
        (["one", "two", "<b>three"], [], "page.html: line 3: <b> is never closed"),
        (["one", "two </i>"], ["--document"], "page.html: line 2: </i> closes no open element"),
        (["one <a href='x", "two"], [], "page.html: line 1: an unfinished tag"),
        (["one.", "", "two <b>three.", "", "four</b> five."], ["--document"],
         "page.html: line 3: <b> holds part of a paragraph"),
        (["a &nbsp; b"], ["--markup", "xml"], "page.html: line 1: &nbsp; is not an XML entity"),
        (["one"], ["--decode.alignment", "true"], "alignment: a marked-up text has no place"),
        (["one"], ["--decode.nbest", "2"], "nbest 2"),
    ],
)  # fmt: skip
def test_what_cannot_be_kept_is_one_line_and_nothing_is_written(numbers_model, tmp_path, lines,
                                                                 options, words):  # fmt: skip
    out = tmp_path / "out.html"
    markup = [] if "--markup" in options else ["--markup", "html"]
    page = str(write_page(tmp_path, lines))
    done = cli_main("translate", str(numbers_model), *markup, *options, "-i", page, "-o",
                    str(out), "--device", "cpu")  # fmt: skip
    one_line_error(done, 2, words)
    assert not out.exists()


@pytest.mark.slow
def test_standard_input_is_named(numbers_model):
    done = cli_main("translate", str(numbers_model), "--markup", "html", "--device", "cpu",
                    stdin="one\n<b>two\n")  # fmt: skip
    one_line_error(done, 2, "<stdin>: line 2: <b> is never closed")
    assert done.stdout == ""


@pytest.mark.slow
def test_python_and_http_give_the_same_marked_up_text(torch_engine):
    pytest.importorskip("fastapi")
    found = translate_texts(torch_engine, PAGE, markup="html").texts
    assert [tags(t.text) for t in found] == [tags(line) for line in PAGE]
    with client_for(torch_engine) as client:
        answer = client.post("/translate", json={"sentences": PAGE, "markup": "html"}).json()
        got = answer["translations"]
        assert [t["text"] for t in got] == [t.text for t in found]
        assert got[0]["plain_text"] == found[0].sentences[0].plain[1]
        blocks, prefix = ["<p>seven</p><p>eight</p>", "<p>two</p>"], ["quarante", ""]
        answer = client.post("/translate", json={"sentences": blocks, "prefix": prefix,
                                                 "markup": "html"})  # fmt: skip
        alone = translate_texts(torch_engine, blocks, prefixes=prefix, markup="html").texts
        assert [t["text"] for t in answer.json()["translations"]] == [t.text for t in alone]
        assert alone[0].text.startswith("<p>quarante")
        bad = client.post("/translate", json={"sentences": ["one", "x\n<b>y"], "markup": "html"})
        assert_error(bad, 422, "invalid_request", "sentences.1: line 2: <b> is never closed")


@pytest.mark.slow
def test_the_ctranslate2_engine_keeps_the_tags_too(exported, tmp_path):
    done = cli_main("translate", str(exported), "--engine", "ctranslate2", "--markup", "html",
                    "-i", str(write_page(tmp_path)), "--device", "cpu")  # fmt: skip
    assert done.code == 0, done.stderr
    for line, translated in zip(PAGE, done.stdout.splitlines(), strict=True):
        assert tags(translated) == tags(line)
