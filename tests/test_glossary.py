"""Glossaries: the term tracker on hand-made token sequences, dynamic beam allocation, the
constrained search (a stub whose best constrained answer is known by hand, random models whose
every output must hold its terms, and plain beam search's output wherever there is no term),
the glossary file's reader, and the command line."""

import json
import math
import random
from types import SimpleNamespace

import pytest
import torch

from transformer.config import DecodeConfig
from transformer.data.batching import encode_source
from transformer.data.tokenizer import Tokenizers
from transformer.errors import UserError
from transformer.inference.beam import beam_search
from transformer.inference.constrained_beam import constrained_beam_search
from transformer.inference.constraints import TermState, allocate
from transformer.inference.documents import fit
from transformer.inference.glossary import Glossary
from transformer.inference.texts import translate_texts
from transformer.inference.translation import translate_ids
from transformer.model_dir.checkpoints import read_config
from transformer.vocab import EOS_ID

from helpers import (
    A,
    B,
    C,
    D,
    Stub,
    X,
    assert_error,
    cli_main,
    client_for,
    one_line_error,
    padded,
    random_model,
)

SENTENCES = [[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 19, 3], [20, 3]]


def occurrences(tokens: list[int], term: list[int]) -> int:
    return sum(tokens[i : i + len(term)] == term for i in range(len(tokens)))


def run(state: TermState, tokens: list[int]) -> TermState:
    for token in tokens:
        state = state.advance(token)
    return state


# --- the tracker ------------------------------------------------------------------------------
def test_a_term_is_met_when_its_tokens_come_in_a_row():
    state = TermState.start([[C, D]])
    assert (state.bank, state.done, state.next_tokens()) == (0, False, {C})
    assert (run(state, [C]).bank, run(state, [C]).next_tokens()) == (1, {C, D})
    assert run(state, [C, D]).done and run(state, [C, D]).bank == 2
    assert run(state, [A, C, D, A]).done  # anywhere in the output
    assert not run(state, [C, A, D]).done  # not in a row
    assert not run(state, [D, C]).done


def test_progress_resets_when_broken_and_restarts_inside_the_broken_attempt():
    state = TermState.start([[A, A, B]])
    assert run(state, [A, A]).bank == 2
    assert run(state, [A, A, C]).bank == 0  # broken: back to nothing
    assert run(state, [A, A, A]).bank == 2  # the last two A's still start the term
    assert run(state, [A, A, A, B]).done
    assert run(state, [A, B, A, A, B]).done
    assert not run(state, [A, B, A, B]).done


def test_a_term_listed_twice_is_needed_twice_and_banks_count_term_tokens():
    state = TermState.start([[A], [C, D], [A]])
    assert state.banks == 4  # A twice, C D once
    assert run(state, [A]).bank == 1 and not run(state, [A]).done
    assert run(state, [A, C]).bank == 2  # one A met, C D in progress
    assert run(state, [A, X, A, C, D]).done and run(state, [A, X, A, C, D]).bank == 4
    assert run(state, [A, C, D]).next_tokens() == {A}  # only the term still needed


@pytest.mark.parametrize("seed", range(50))
def test_the_tracker_agrees_with_a_look_back_over_the_whole_output(seed):
    """Met counts, progress and the tokens that make progress, checked at every token against
    their definitions read off the whole output (terms over 3 tokens, so they overlap a lot)."""
    rng = random.Random(seed)
    terms = [[rng.choice([A, B, C]) for _ in range(rng.randint(1, 5))] for _ in range(4)]
    state, tokens = TermState.start(terms), []
    for _ in range(40):
        tokens.append(rng.choice([A, B, C]))
        state = state.advance(tokens[-1])
        for term, met, k in zip(state.terms, state.met, state.progress, strict=True):
            assert met == occurrences(tokens, list(term))
            assert k == longest(tokens, list(term))
        needed = [t for t in terms if occurrences(tokens, t) < terms.count(t)]
        assert state.done == (not needed)
        assert state.next_tokens() == {t[j] for t in needed for j in (0, longest(tokens, t))}


def longest(tokens: list[int], term: list[int]) -> int:
    """The longest proper prefix of ``term`` that ends ``tokens``."""
    return max(j for j in range(len(term)) if j == 0 or tokens[-j:] == term[:j])


def test_an_empty_term_list_is_done_from_the_start():
    state = TermState.start([])
    assert state.done and state.bank == 0 and state.next_tokens() == set()
    with pytest.raises(ValueError):
        TermState.start([[]])


def test_dynamic_beam_allocation_takes_turns_among_banks_highest_first():
    banks = [0, 0, 1, 2, 1, 0]
    scores = [-1.0, -2.0, -3.0, -4.0, -5.0, -0.5]
    # bank 2's best (3), bank 1's best (2), bank 0's best (5), then the second of each bank
    assert allocate(banks, scores, 6) == [3, 2, 5, 4, 0, 1]
    assert allocate(banks, scores, 3) == [3, 2, 5]
    assert allocate([0, 0, 0], [-3.0, -1.0, -2.0], 2) == [1, 2]  # one bank: by score


# --- the search ------------------------------------------------------------------------------
# The stub prefers A, then ending; the term C D is unlikely: P(C) = P(D) = 0.05 at every step.
TERM_STUB = {A: 0.7, EOS_ID: 0.2, C: 0.05, D: 0.05}


@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_the_search_finds_the_best_output_that_holds_the_term(beam_size):
    stub = Stub({}, default=TERM_STUB)
    config = DecodeConfig(beam_size=beam_size, nbest=1, length_penalty=0.0)
    plain = beam_search(stub, torch.tensor([[5, 3]]), DecodeConfig(beam_size=4, nbest=1))
    assert plain[0][0].tokens == []  # unconstrained, it would end at once
    found = constrained_beam_search(stub, torch.tensor([[5, 3]]), [[[C, D]]], config)
    best = found[0][0]
    # Every output holding C D has P <= 0.05 · 0.05 · 0.2 (C, D, </s>), reached only by "C D".
    assert best.tokens == [C, D]
    assert best.log_prob == pytest.approx(2 * math.log(0.05) + math.log(0.2), abs=1e-5)


def test_the_length_limit_may_leave_no_room_then_the_output_comes_without_the_term():
    stub = Stub({}, default=TERM_STUB)
    stub.config = SimpleNamespace(max_positions=2)  # one token, then </s>
    found = constrained_beam_search(stub, torch.tensor([[5, 3]]), [[[C, D]]], DecodeConfig())
    assert len(found[0]) == 1 and len(found[0][0].tokens) <= 1


@pytest.mark.parametrize("beam_size", [1, 3, 5])
def test_every_output_holds_its_terms_as_often_as_listed(beam_size):
    model = random_model()
    terms = [[[11, 12]], [[7], [7], [20, 21, 22]], [[13], [29, 28]], [[25]]]
    config = DecodeConfig(beam_size=beam_size, nbest=beam_size)
    found = constrained_beam_search(model, padded(SENTENCES), terms, config)
    for wanted, nbest in zip(terms, found, strict=True):
        assert len(nbest) == beam_size
        for hypothesis in nbest:
            for term in wanted:
                assert occurrences(hypothesis.tokens, term) >= wanted.count(term), (
                    term,
                    hypothesis,
                )
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)


@pytest.mark.parametrize("use_cache", [True, False])
def test_without_terms_the_output_is_plain_beam_search_bit_for_bit(use_cache):
    model, src = random_model(), padded(SENTENCES)
    config = DecodeConfig(beam_size=4, nbest=3)
    plain = beam_search(model, src, config, use_cache)
    assert constrained_beam_search(model, src, [[] for _ in SENTENCES], config, use_cache) == plain
    # A sentence without terms beside one with terms: still plain beam search's output.
    mixed = constrained_beam_search(model, src, [[], [[11, 12]], [], []], config, use_cache)
    assert [mixed[i] for i in (0, 2, 3)] == [plain[i] for i in (0, 2, 3)]
    assert mixed[1] != plain[1]


def test_translate_ids_takes_terms_and_without_them_is_unchanged():
    model = random_model()
    config = DecodeConfig(beam_size=4, batch_size=2)
    plain = translate_ids(model, SENTENCES, config)
    assert translate_ids(model, SENTENCES, config, terms=[[] for _ in SENTENCES]) == plain
    forced = translate_ids(model, SENTENCES, config, terms=[[[11, 12]], [], [], [[25]]])
    assert occurrences(forced[0][0].tokens, [11, 12]) and occurrences(forced[3][0].tokens, [25])
    assert forced[1:3] == plain[1:3]
    greedy = translate_ids(model, SENTENCES, DecodeConfig(beam_size=1), terms=[[[11]], [], [], []])
    assert occurrences(greedy[0][0].tokens, [11])


# --- the glossary file -------------------------------------------------------------------------
def test_source_terms_match_on_word_boundaries_longest_first_once_per_occurrence():
    glossary = Glossary.of([("seventy", "septante"), ("ninety", "nonante"),
                            ("seventy-seven", "septante-sept")])  # fmt: skip
    assert glossary.targets_in("seventy") == ["septante"]
    assert glossary.targets_in("seventeen") == []  # not a word boundary
    assert glossary.targets_in("seventy-seven thousand and seventy") == [
        "septante-sept",
        "septante",
    ]
    assert glossary.targets_in("ninety-one thousand and ninety") == ["nonante", "nonante"]
    assert glossary.targets_in("Seventy") == []  # case as written


def test_a_glossary_file_is_read_blank_lines_skipped(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes(b"\xef\xbb\xbfseventy\tseptante\r\n\n ninety \t nonante\n")
    found = [(t.source, t.target, t.where) for t in Glossary.read(path).terms]
    assert found == [("seventy", "septante", f"{path}: line 1"),
                     ("ninety", "nonante", f"{path}: line 3")]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"seventy septante\n", ["line 1", "no tab"]),
        (b"seventy\tseptante\nninety\n", ["line 2", "no tab"]),
        (b"a\tb\tc\n", ["line 1", "2 tabs"]),
        (b"seventy\t \n", ["line 1", "target term is empty"]),
        (b"\tseptante\n", ["line 1", "source term is empty"]),
        (b"seventy\tseptante\nseventy\tsoixante-dix\n", ["line 2", "already listed", "line 1"]),
        (b"seventy\tsept\x00ante\n", ["line 1", "binary"]),
        (b"seventy\tsept\xe9\n", ["line 1", "UTF-8"]),
        (b"\n\n", ["no terms"]),
        (b"seventy\tseptante\rninety\tnonante\r", ["line 1", "carriage return", "Mac"]),
        (b"four\tquatre\nseventy\tsept\rante\r\n", ["line 2", "carriage return"]),
    ],
)
def test_a_bad_glossary_is_one_line_naming_the_file_and_line(tmp_path, content, words):
    path = tmp_path / "terms.tsv"
    path.write_bytes(content)
    with pytest.raises(UserError) as error:
        Glossary.read(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)
    for word in words:
        assert word in str(error.value)


def test_a_missing_glossary_is_named(tmp_path):
    with pytest.raises(UserError, match="missing"):
        Glossary.read(tmp_path / "nothing.tsv")


# --- the command line --------------------------------------------------------------------------
@pytest.fixture
def glossary(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "terms.tsv"
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


def test_translate_with_a_glossary_puts_the_terms_in(numbers_model, tmp_path, glossary):
    source = tmp_path / "in.en"
    source.write_text("seventy\nfour\nninety-one\n", encoding="utf-8")
    terms = glossary("seventy\tseptante\nninety\tnonante\n")
    plain = cli_main("translate", str(numbers_model), "--input", str(source))
    done = cli_main("translate", str(numbers_model), "--input", str(source), "--glossary", terms)
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "septante" in lines[0] and "nonante" in lines[2], lines
    assert lines[1] == plain.stdout.splitlines()[1]  # no term: as without the glossary


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("seventy septante\n", ["terms.tsv: line 1", "no tab"]),
        ("seventy\t\n", ["terms.tsv: line 1", "empty"]),
        ("seventy\t" + "sept " * 60 + "\n", ["terms.tsv: line 1", "pieces", "at most 47"]),
    ],
)
def test_a_bad_glossary_stops_translate_with_one_line_and_nothing_written(
    numbers_model, tmp_path, glossary, text, words
):
    source, out = tmp_path / "in.en", tmp_path / "out.fr"
    source.write_text("seventy\n", encoding="utf-8")
    done = cli_main("translate", str(numbers_model), "-i", str(source), "-o", str(out),
                    "--glossary", glossary(text))  # fmt: skip
    one_line_error(done, 2, *words)
    assert not out.exists() and done.stdout == ""


def test_the_ctranslate2_engine_refuses_a_glossary_in_one_line(numbers_model, tmp_path, glossary):
    source, out = tmp_path / "in.en", tmp_path / "out.fr"
    source.write_text("seventy\n", encoding="utf-8")
    terms = glossary("seventy\tseptante\n")
    done = cli_main("translate", str(numbers_model), "-i", str(source), "-o", str(out),
                    "--engine", "ctranslate2", "--glossary", terms)  # fmt: skip
    one_line_error(done, 2, "ctranslate2", "no constrained search")
    assert not out.exists()


def test_no_room_for_the_terms_is_said_for_that_line(numbers_model, tmp_path, glossary):
    # Two terms that fit the model's 47 output tokens each, but not together.
    tgt = Tokenizers.load(numbers_model, read_config(numbers_model).model.vocab_sizes).tgt
    longest = max(n for n in range(1, 48) if len(tgt.encode("sept " * n)) <= 47)
    assert 2 * len(tgt.encode("sept " * longest)) > 47
    source = tmp_path / "in.en"
    source.write_text("four\none and two\n", encoding="utf-8")
    terms = glossary("one\t" + "sept " * longest + "\ntwo\t" + "sept " * longest + "\n")
    done = cli_main("translate", str(numbers_model), "--input", str(source), "--glossary", terms)
    assert done.code == 0
    assert len(done.stdout.splitlines()) == 2
    assert [line for line in done.stderr if "line 2" in line and "lacks" in line], done.stderr
    assert not [line for line in done.stderr if "line 1" in line]


# --- documents, markup and jsonl ----------------------------------------------------------------
def _sentences(jsonl: str) -> list[dict]:
    """The sentence records of ``--document --output_format jsonl``, in order."""
    return [s for line in jsonl.splitlines() for s in json.loads(line)["sentences"]]


def test_each_sentence_of_a_document_gets_its_terms_and_the_others_stay_as_they_were(
    numbers_model, tmp_path, glossary
):
    source = tmp_path / "in.en"
    source.write_text("seventy. four.\n\nninety. two seventy.\n", encoding="utf-8")
    terms = glossary("seventy\tseptante\n")
    args = ["translate", str(numbers_model), "-i", str(source), "--document"]
    plain = cli_main(*args, "--output_format", "jsonl")
    done = cli_main(*args, "--output_format", "jsonl", "--glossary", terms)
    assert plain.code == done.code == 0, done.stderr
    before, after = _sentences(plain.stdout), _sentences(done.stdout)
    assert [s["source"] for s in after] == ["seventy.", "four.", "ninety.", "two seventy."]
    for old, new in zip(before, after, strict=True):
        if "seventy" in new["source"]:
            assert "septante" in new["text"].split(), new
            assert "septante" in [w["word"] for w in new["words"]]  # scored as written
        else:
            assert new["text"] == old["text"] and "missing_terms" not in new
    text = cli_main(*args, "--glossary", terms)  # the document as text: the same sentences
    assert text.code == 0 and text.stdout.split() == " ".join(s["text"] for s in after).split()


def test_a_marked_up_line_gets_its_terms_and_keeps_its_tags(numbers_model, tmp_path, glossary):
    page = tmp_path / "page.html"
    page.write_text("<p>seventy <b>four</b></p>\n<i>ninety</i>\n", encoding="utf-8")
    terms = glossary("seventy\tseptante\n")
    args = ["translate", str(numbers_model), "-i", str(page), "--markup", "html"]
    plain, done = cli_main(*args), cli_main(*args, "--glossary", terms)
    assert plain.code == done.code == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert "septante" in first and first.startswith("<p>") and first.endswith("</p>")
    assert first.count("<b>") == first.count("</b>") == 1
    assert second == plain.stdout.splitlines()[1]  # no term: as without the glossary


def test_no_room_for_a_document_s_terms_is_said_for_its_line(numbers_model, tmp_path, glossary):
    tgt = Tokenizers.load(numbers_model, read_config(numbers_model).model.vocab_sizes).tgt
    longest = max(n for n in range(1, 48) if len(tgt.encode("sept " * n)) <= 47)
    source = tmp_path / "in.en"
    source.write_text("four.\n\nfive. one and two.\n", encoding="utf-8")
    terms = glossary("one\t" + "sept " * longest + "\ntwo\t" + "sept " * longest + "\n")
    done = cli_main("translate", str(numbers_model), "-i", str(source), "--document",
                    "--output_format", "jsonl", "--glossary", terms)  # fmt: skip
    assert done.code == 0, done.stderr
    found = _sentences(done.stdout)
    assert [bool(s.get("missing_terms")) for s in found] == [False, False, True]
    assert [line for line in done.stderr if "line 3" in line and "lacks" in line], done.stderr
    assert not [line for line in done.stderr if "lacks" in line and "line 3" not in line]


def test_a_long_sentence_is_never_split_through_a_term_so_each_is_enforced(torch_engine):
    # A sentence too long for the model is translated in parts; a term whose words the split
    # separated was in no part, so no search was given it. The split now goes around terms.
    tokenizer, limit = torch_engine.tokenizers.src, torch_engine.model.config.max_positions
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
             "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
             "eighteen", "nineteen", "twenty", "thirty", "forty"]  # fmt: skip
    sentence = " ".join(words * 3)

    def pieces(text):
        return len(encode_source(tokenizer.encode(text)))

    plain = fit(sentence, pieces, limit)
    assert len(plain.parts) > 1, "the sentence must be too long for the model"
    term = f"{plain.parts[0].split()[-1]} {plain.parts[1].split()[0]}"  # where it was cut
    glossary = Glossary.of([[term, "septante"]])
    kept = fit(sentence, pieces, limit, glossary.pattern)
    assert " ".join(kept.parts).split() == sentence.split()  # every word, in order
    assert sum(part.count(term) for part in kept.parts) == sentence.count(term) == 3
    assert all(pieces(part) <= limit for part in kept.parts)
    found = translate_texts(torch_engine, [sentence], document=True, glossary=glossary)
    (out,) = found.texts[0].sentences
    assert out.split and out.missing_terms is None, out
    assert out.text.count("septante") == 3


def test_a_term_a_split_at_punctuation_goes_through_is_reported_missing(torch_engine):
    # The split at a clause's end (", ") may still go through a term holding that punctuation:
    # no part holds it, so it is listed as missing where the translation lacks it.
    tokenizer, limit = torch_engine.tokenizers.src, torch_engine.model.config.max_positions
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
             "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
             "eighteen", "nineteen", "twenty", "thirty", "forty"]  # fmt: skip
    many = words * 3
    sentence = ", ".join(" ".join(many[i : i + 4]) for i in range(0, 60, 4))

    def pieces(text):
        return len(encode_source(tokenizer.encode(text)))

    plain = fit(sentence, pieces, limit)
    assert plain.how == "at punctuation" and len(plain.parts) > 1, plain
    term = f"{plain.parts[0].split()[-1]} {plain.parts[1].split()[0]}"  # "X, Y"
    assert term.count(",") == 1
    glossary = Glossary.of([[term, "septante"]])
    found = translate_texts(torch_engine, [sentence], document=True, glossary=glossary)
    (out,) = found.texts[0].sentences
    assert out.split and "septante" in (out.missing_terms or []), out
    whole = translate_texts(torch_engine, ["four five."], document=True,
                            glossary=Glossary.of([["four five", "septante"]]))  # fmt: skip
    assert whole.texts[0].sentences[0].missing_terms is None  # a sentence not split: enforced


# --- over HTTP ---------------------------------------------------------------------------------
def test_a_request_glossary_forces_its_terms_and_a_bad_one_is_422(torch_engine):
    pytest.importorskip("fastapi")
    terms = [["seventy", "septante"]]
    with client_for(torch_engine) as client:
        done = client.post("/translate", json={"sentences": ["seventy", "four"], "glossary": terms})
        assert done.status_code == 200, done.text
        texts = [t["text"] for t in done.json()["translations"]]
        assert "septante" in texts[0]
        assert texts[1] == torch_engine.translate(["four"]).best[0]
        empty = client.post("/translate", json={"sentences": ["seventy"],
                                                "glossary": [["seventy", " "]]})  # fmt: skip
        assert_error(empty, 422, "invalid_request", "glossary.0", "target term is empty")
        too_long = [["seventy", "sept " * 60]]
        long = client.post("/translate", json={"sentences": ["seventy"], "glossary": too_long})
        assert_error(long, 422, "invalid_request", "glossary.0", "pieces")
        three = client.post("/translate", json={"sentences": ["x"], "glossary": [["a", "b", "c"]]})
        assert three.status_code == 422


def test_a_request_glossary_may_hold_more_terms_than_sentences_each_within_max_chars(
    torch_engine,
):
    """A glossary's terms are counted against the schema's MAX_TERMS, not against
    ``serve.max_sentences``, and each term against ``serve.max_chars``, like every text."""
    pytest.importorskip("fastapi")
    from transformer.serve.schema import MAX_TERMS

    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    terms = [[f"{a}-{b}", "sept"] for a in words for b in words][:80]  # 80 distinct terms
    with client_for(torch_engine, max_sentences=4, max_chars=20) as client:
        many = client.post("/translate", json={"sentences": ["one-two"], "glossary": terms})
        assert many.status_code == 200, many.text
        assert "sept" in many.json()["translations"][0]["text"]
        long = client.post("/translate", json={"sentences": ["one"],
                                               "glossary": [["one", "sept " * 5]]})  # fmt: skip
        assert_error(long, 422, "invalid_request", "glossary.0.1", "serve.max_chars")
        schema = client.get("/openapi.json").json()
    glossary = schema["components"]["schemas"]["TranslateRequest"]["properties"]["glossary"]
    assert glossary["anyOf"][0]["maxItems"] == MAX_TERMS
    assert glossary["anyOf"][0]["items"]["items"]["maxLength"] == 20


def test_a_response_names_the_terms_no_room_was_left_for(torch_engine):
    pytest.importorskip("fastapi")
    tgt, limit = torch_engine.tokenizers.tgt, torch_engine.model.config.max_positions - 1
    longest = max(n for n in range(1, limit + 1) if len(tgt.encode("sept " * n)) <= limit)
    terms = [["one", "sept " * longest], ["two", "huit " * longest]]
    assert len(tgt.encode("sept " * longest)) + len(tgt.encode("huit " * longest)) > limit
    with client_for(torch_engine) as client:
        done = client.post("/translate", json={"sentences": ["four", "one and two"],
                                               "glossary": terms})  # fmt: skip
        assert done.status_code == 200, done.text
        first, second = done.json()["translations"]
        assert first["missing_terms"] is None
        assert second["missing_terms"], second  # one of the two terms, or both
        assert set(second["missing_terms"]) <= {t.strip() for _, t in terms} | {t for _, t in terms}


def test_a_request_glossary_goes_with_documents_and_jsonl(torch_engine):
    pytest.importorskip("fastapi")
    tgt, limit = torch_engine.tokenizers.tgt, torch_engine.model.config.max_positions - 1
    longest = max(n for n in range(1, limit + 1) if len(tgt.encode("sept " * n)) <= limit)
    texts = ["seventy. four.", "five. one and two."]
    body = {"sentences": texts, "document": True, "output_format": "jsonl",
            "glossary": [["seventy", "septante"], ["one", "sept " * longest],
                         ["two", "huit " * longest]]}  # fmt: skip
    with client_for(torch_engine) as client:
        done = client.post("/translate", json=body)
    assert done.status_code == 200, done.text
    first, second = done.json()["translations"]
    sentences = [s for p in first["paragraphs"] for s in p["sentences"]]
    assert "septante" in sentences[0]["text"].split() and first["missing_terms"] is None
    assert sentences[1]["text"] == torch_engine.translate(["four."]).best[0]
    last = second["paragraphs"][0]["sentences"][-1]
    assert last["missing_terms"] and second["missing_terms"] == last["missing_terms"]
