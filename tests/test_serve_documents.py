"""/translate with ``document``, ``output_format`` and ``flag_below`` (serve/records.py): the
same texts and fields as the command line's, and 422 for what cannot be done."""

from __future__ import annotations

import time

import pytest

from transformer.inference.texts import record, translate_texts

from helpers import assert_error, client_for

pytest.importorskip("fastapi")
pytestmark = pytest.mark.slow  # the tests' trained model

DOCUMENT = "  twelve. seven. nine.\n\n\tforty two. one hundred.\n"


def test_a_document_comes_back_as_the_library_translates_it(torch_engine):
    want = translate_texts(torch_engine, [DOCUMENT], document=True, confidence=True).texts[0]
    with client_for(torch_engine) as client:
        answer = client.post("/translate", json={"sentences": [DOCUMENT], "document": True,
                                                 "output_format": "jsonl"}).json()  # fmt: skip
    got = answer["translations"][0]
    assert got["text"] == want.text
    assert got["text"].startswith("  ") and "\n\n\t" in got["text"]
    assert [len(p["sentences"]) for p in got["paragraphs"]] == [3, 2]
    assert rounded(got["paragraphs"]) == rounded(record(want)["paragraphs"])


def rounded(value):
    """``value`` with its floats to 4 decimals (one forward pass in another batch may differ in
    the last bits)."""
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return round(value, 4) if isinstance(value, float) else value


def test_jsonl_over_http_has_the_words_and_the_log_probability(torch_engine):
    lines = ["twelve", "four hundred seven"]
    want = translate_texts(torch_engine, lines, confidence=True).texts
    with client_for(torch_engine) as client:
        answer = client.post("/translate", json={"sentences": lines, "output_format": "jsonl",
                                                 "alignment": True}).json()  # fmt: skip
    for got, t in zip(answer["translations"], want, strict=True):
        r = record(t)
        assert got["text"] == r["text"] and got["words"] == r["words"]
        assert got["log_prob"] == pytest.approx(r["log_prob"], abs=1e-5)
        assert got["alignment"] is not None and got["paragraphs"] is None


def test_flag_below_marks_the_words_over_http(torch_engine):
    with client_for(torch_engine) as client:
        plain = client.post("/translate", json={"sentences": ["twelve"],
                                                "output_format": "jsonl"}).json()  # fmt: skip
        flagged = client.post("/translate", json={"sentences": ["twelve"],
                                                  "flag_below": 1.0}).json()  # fmt: skip
    words = plain["translations"][0]["words"]
    assert flagged["translations"][0]["text"] == " ".join(f"[[{w['word']}]]" for w in words)
    assert flagged["translations"][0]["words"] is None  # output_format text: no words


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"flag_below": 0}, ["flag_below"]),
        ({"flag_below": 1.5}, ["flag_below"]),
        ({"output_format": "xml"}, ["output_format"]),
        ({"document": "yes"}, ["document"]),
        ({"document": True, "prefix": ["un"]}, ["prefix", "document"]),
        ({"output_format": "jsonl", "nbest": 2}, ["nbest"]),
    ],
)
def test_what_cannot_be_done_is_422(torch_engine, body, words):
    with client_for(torch_engine) as client:
        response = client.post("/translate", json={"sentences": ["twelve"], **body})
    assert_error(response, 422, "invalid_request", *words)


def test_health_is_answered_while_a_documents_sentences_are_being_found(torch_engine, monkeypatch):
    """Cutting texts into sentences and reading markup (up to a second for the largest request)
    run off the event loop: a request that arrives meanwhile is answered at once."""
    import threading

    from transformer.serve import texts

    planning, health_answered = threading.Event(), threading.Event()
    real = texts.plan_for

    def slow_plan(*args, **kwargs):
        planning.set()
        health_answered.wait(timeout=10)  # on the event loop, /health could not be answered
        return real(*args, **kwargs)

    monkeypatch.setattr(texts, "plan_for", slow_plan)
    with client_for(torch_engine) as client:
        answers = []
        document = threading.Thread(target=lambda: answers.append(client.post(
            "/translate", json={"sentences": [DOCUMENT], "document": True})))  # fmt: skip
        document.start()
        assert planning.wait(timeout=10)
        start = time.perf_counter()
        health = client.get("/health")
        waited = time.perf_counter() - start
        health_answered.set()
        document.join(timeout=30)
    assert health.status_code == 200 and waited < 5, f"/health waited {waited:.1f} s"
    assert answers and answers[0].status_code == 200
