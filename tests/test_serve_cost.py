"""The server's budget (``serve.max_cost``) counts at least what a request really makes the model
process, on the worst case of each option: many sentences, a wide beam, n-best (which widens
the beam), sampling, ``max_len``, ``min_len`` above the length limit, long prefixes, word
alignments, /attention, /step-through and /score. A request the budget admits never makes the
model process more than its count, and one token less of budget refuses it, naming the count.

The work is measured, not timed: a hook on the encoder and decoder stacks counts every position
they process (rows × positions, in every search step and every teacher-forced pass), so the
test is as stable on a busy machine as on a quiet one.
"""

from dataclasses import fields, replace

import pytest

from transformer.config import DecodeConfig
from transformer.inference.constraints import TermState
from transformer.inference.cost import TERM_UPDATES_PER_TOKEN, scoring_cost, translation_cost
from transformer.inference.glossary import Glossary

from helpers import assert_error, client_for

pytest.importorskip("fastapi")
pytestmark = pytest.mark.slow  # the tests' trained model, and 64-sentence searches at beam 16

MANY = 64  # serve.max_sentences' default


class Meter:
    """Counts the positions the model's encoder and decoder stacks process, where each pass
    starts: at the source and target embeddings (a search step that keeps word alignments
    calls the decoder's ``steps`` directly, not the stack as a module)."""

    def __init__(self, model) -> None:
        self.tokens = 0
        self.hooks = [embed.register_forward_pre_hook(self._count)
                      for embed in (model.src_embed, model.tgt_embed)]  # fmt: skip

    def _count(self, module, args) -> None:
        ids = args[0]  # (rows, positions)
        self.tokens += ids.size(0) * ids.size(1)

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()


@pytest.fixture(scope="module")
def engine(torch_engine):
    """The tests' model (48 positions: outputs of up to 47 tokens) with a default length limit
    of the source's length (max_len_b 0), so that min_len and prefixes can go far beyond it."""
    return replace(torch_engine, decode=replace(torch_engine.decode, max_len_b=0))


@pytest.fixture(scope="module")
def long_prefix(engine) -> str:
    """The longest run of "cent" the model's outputs can hold (at most 47 pieces)."""
    encode, words = engine.tokenizers.tgt.encode, ["cent"]
    while len(encode(" ".join([*words, "cent"]))) <= 47:
        words.append("cent")
    assert len(encode(" ".join(words))) >= 40
    return " ".join(words)


DECODE_FIELDS = {f.name for f in fields(DecodeConfig)}


def decode_of(engine, body: dict):
    """The DecodeConfig the server makes of a /translate body's search options."""
    search = {name: value for name, value in body.items() if name in DECODE_FIELDS}
    return engine.decode.with_search(**search)


def served_within_its_count(engine, path: str, body: dict, counted: int) -> int:
    """Serves ``body`` with a budget of exactly ``counted`` (admitted: the work is measured) and
    of one less (refused, naming both); returns the work measured."""
    with client_for(engine, max_cost=counted - 1) as client:
        over = client.post(path, json=body)
    assert_error(over, 422, "over_budget", f"{counted:,} tokens", f"{counted - 1:,}",
                 "serve.max_cost")  # fmt: skip
    meter = Meter(engine.model)
    try:
        with client_for(engine, max_cost=counted) as client:
            response = client.post(path, json=body)
    finally:
        meter.close()
    assert response.status_code == 200, response.text
    assert 0 < meter.tokens <= counted, (path, body, meter.tokens, counted)
    return meter.tokens


WORST = {  # each option at its worst, with outputs forced to their limit (min_len) where it can
    "sentences": {"beam_size": 16, "max_len_a": 0.0, "max_len_b": 47, "min_len": 47},
    "min_len": {"beam_size": 16, "min_len": 47},  # the default limit is 2 tokens here
    # with a 47-piece prefix per sentence:
    "prefix": {"beam_size": 16, "max_len_a": 0.0, "max_len_b": 1},
    "empty with a prefix": {"beam_size": 16, "max_len_a": 0.0, "max_len_b": 1},  # decoded too
    "nbest": {"nbest": 16, "min_len": 47},  # the beam widens to 16
    "sampling": {"sampling": True, "nbest": 16, "min_len": 47},
    "alignment": {"beam_size": 16, "nbest": 16, "alignment": True, "min_len": 47},
    # and once more per source word, one or four
    "masking": {
        "beam_size": 16,
        "nbest": 16,
        "alignment": True,
        "alignment_method": "masking",
        "min_len": 47,
    },
    "masking words": {
        "beam_size": 16,
        "nbest": 16,
        "alignment": True,
        "alignment_method": "masking",
        "min_len": 47,
    },
    # not forced: beam search may stop earlier
    "max_len": {"beam_size": 16, "max_len_a": 0.0, "max_len_b": 47},
    "long source": {"beam_size": 16, "min_len": 47},  # with sources cut to the model's 48 positions
}


@pytest.mark.parametrize("case", list(WORST))
def test_translate_costs_at_least_what_it_makes_the_model_process(engine, long_prefix, case):
    options = WORST[case]
    sentence = {
        "long source": " ".join(["nine hundred ninety nine"] * 20),
        "masking words": "nine hundred ninety nine",
        "empty with a prefix": "",
    }.get(case, "one")
    body = {"sentences": [sentence] * MANY, **options}
    if "prefix" in case:
        body["prefix"] = [long_prefix] * MANY
    decode = decode_of(engine, body)
    cost = translation_cost(engine.tokenizers, body["sentences"], body.get("prefix"), decode,
                            engine.model.config.max_positions)  # fmt: skip
    assert cost.longest == 47 or "prefix" in case and cost.longest >= 40
    measured = served_within_its_count(engine, "/translate", body, cost.tokens)
    if case != "max_len":  # forced to the limit: the count is tight, not a loose bound
        assert measured >= 0.95 * cost.tokens, (measured, cost.tokens)


@pytest.mark.parametrize(
    "options",
    [
        {"output_format": "jsonl", "beam_size": 1},
        {"flag_below": 0.5, "beam_size": 1},
        {"output_format": "jsonl", "beam_size": 4, "alignment": True},
        {"flag_below": 0.5, "beam_size": 4, "markup": "html"},  # markup aligns by masking
    ],
)
def test_the_words_probabilities_are_counted_as_one_more_pass(engine, options):
    # jsonl and flag_below score each translation teacher-forced after the search: one more
    # pass over its source and output, on top of any alignment's
    texts = ["<b>one</b>" if "markup" in options else "one"] * MANY
    body = {"sentences": texts, "max_len_a": 0.0, "max_len_b": 47, "min_len": 47, **options}
    decode = decode_of(engine, body)
    if "markup" in options:
        decode = replace(decode, alignment=True, alignment_method="masking")
    plain = ["one"] * MANY
    cost = translation_cost(engine.tokenizers, plain, None, decode,
                            engine.model.config.max_positions, rerun=1)  # fmt: skip
    measured = served_within_its_count(engine, "/translate", body, cost.tokens)
    assert measured >= 0.95 * cost.tokens, (measured, cost.tokens)


def test_a_glossary_is_counted_with_the_room_its_terms_make(engine, long_prefix):
    # A request whose own limit is 1 token, with a term that raises it as a prefix would.
    sentences = ["one"] * 8
    body = {"sentences": sentences, "beam_size": 4, "max_len_a": 0.0, "max_len_b": 1,
            "glossary": [["one", long_prefix]]}  # fmt: skip
    decode, positions = decode_of(engine, body), engine.model.config.max_positions
    cost = translation_cost(engine.tokenizers, sentences, None, decode, positions,
                            glossary=Glossary.of(body["glossary"]))  # fmt: skip
    without = translation_cost(engine.tokenizers, sentences, None, decode, positions)
    assert cost.longest >= 40 > without.longest
    measured = served_within_its_count(engine, "/translate", body, cost.tokens)
    assert measured > without.tokens  # what the budget would have counted without the terms


def term_updates(monkeypatch) -> list[int]:
    """The terms each ``TermState.advance`` call updates, one entry a call, from now on: the
    constrained search's work, which the budget counts beside the model's tokens."""
    updates: list[int] = []
    advance = TermState.advance

    def counted(state, token):
        updates.append(len(state.terms))
        return advance(state, token)

    monkeypatch.setattr(TermState, "advance", counted)
    return updates


def test_a_glossary_of_many_terms_is_counted_with_the_search_work_they_make(engine, monkeypatch):
    # Six terms a sentence, beam 4, outputs forced to the limit: the constrained search advances
    # every term of every candidate at every step, work that grows with the square of the terms.
    updates = term_updates(monkeypatch)
    words = ["one", "two", "three", "four", "five", "six"]
    sentences = [" ".join(words)] * 8
    body = {"sentences": sentences, "beam_size": 4, "min_len": 47,
            "glossary": [[w, t] for w, t in zip(words, ["un", "deux", "trois", "quatre", "cinq",
                                                          "six"], strict=True)]}  # fmt: skip
    decode, positions = decode_of(engine, body), engine.model.config.max_positions
    glossary = Glossary.of(body["glossary"])
    cost = translation_cost(engine.tokenizers, sentences, None, decode, positions,
                            glossary=glossary)  # fmt: skip
    plain = translation_cost(engine.tokenizers, sentences, ["un deux trois quatre cinq six"] * 8,
                             decode, positions)  # fmt: skip
    tokens = served_within_its_count(engine, "/translate", body, cost.tokens)
    work = sum(updates)  # refused up front at one token less: only the served run searched
    assert work and tokens + work / TERM_UPDATES_PER_TOKEN <= cost.tokens, (tokens, work, cost)
    assert cost.tokens > 2 * plain.tokens  # the terms' work, beyond the room they make


def test_a_document_s_glossary_is_counted_with_its_sentences_and_their_scoring(engine, monkeypatch):
    # A glossary with documents and jsonl: the sentences the segmenter finds are searched with
    # the terms' work, then scored (one pass more); the budget counts all of it.
    updates = term_updates(monkeypatch)
    words = ["one", "two", "three", "four", "five", "six"]
    targets = ["un", "deux", "trois", "quatre", "cinq", "six"]
    sentence = " ".join(words) + "."
    texts = [" ".join([sentence] * 2)] * 4  # 4 documents of 2 sentences each
    body = {
        "sentences": texts,
        "document": True,
        "output_format": "jsonl",
        "beam_size": 4,
        "min_len": 47,
        "glossary": [list(pair) for pair in zip(words, targets, strict=True)],
    }
    decode, positions = decode_of(engine, body), engine.model.config.max_positions
    glossary = Glossary.of(body["glossary"])
    parts = [sentence] * 8
    cost = translation_cost(engine.tokenizers, parts, None, decode, positions, rerun=1,
                            glossary=glossary)  # fmt: skip
    without = translation_cost(engine.tokenizers, parts, None, decode, positions, rerun=1)
    tokens = served_within_its_count(engine, "/translate", body, cost.tokens)
    work = sum(updates)
    assert work and tokens + work / TERM_UPDATES_PER_TOKEN <= cost.tokens, (tokens, work, cost)
    assert cost.tokens > 2 * without.tokens


def test_attention_step_through_and_score_cost_at_least_their_work(engine, long_prefix):
    positions = engine.model.config.max_positions
    body = {"sentence": "one", "beam_size": 16, "prefix": long_prefix}
    decode = replace(engine.decode, beam_size=16)
    cost = translation_cost(engine.tokenizers, ["one"], [long_prefix], decode, positions, rerun=1)
    measured = served_within_its_count(engine, "/attention", body, cost.tokens)
    assert measured >= 0.95 * cost.tokens
    body = {"sentence": "one", "beam_size": 16, "max_len_a": 0.0, "max_len_b": 47}
    decode = replace(decode, max_len_a=0.0, max_len_b=47)
    cost = translation_cost(engine.tokenizers, ["one"], None, decode, positions, rerun=1)
    served_within_its_count(engine, "/step-through", body, cost.tokens)
    pairs = {"sources": ["nine hundred ninety nine"] * MANY, "targets": [long_prefix] * MANY}
    cost = scoring_cost(engine.tokenizers, pairs["sources"], pairs["targets"], positions)
    assert served_within_its_count(engine, "/score", pairs, cost.tokens) == cost.tokens


def test_the_requests_that_once_outran_the_budget_are_counted_in_full(engine, long_prefix):
    # min_len far above the default limit, and prefixes far longer than max_len: counted by the
    # limit they raise the search to, the model's positions here (47 tokens + EOS, x 16 beams)
    for body in ({"sentences": ["one"] * MANY, "beam_size": 16, "min_len": 47},
                 {"sentences": ["one"] * MANY, "beam_size": 16, "max_len_a": 0.0, "max_len_b": 1,
                  "prefix": [long_prefix] * MANY}):  # fmt: skip
        with client_for(engine, max_cost=MANY * 16 * 40) as client:
            refused = client.post("/translate", json=body)
        assert_error(refused, 422, "over_budget", f"{MANY:,} sentences", "x 16 hypotheses")
