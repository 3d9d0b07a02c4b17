"""The search options over HTTP: the new fields in the OpenAPI schema, each request getting what
the library gives for its own options (prefixes, alignments, the rules), concurrent requests
with different options decoded apart, POST /score, and a JSON 422 naming the field for every
bad value."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from transformer.inference.alignment import pharaoh  # noqa: E402
from transformer.inference.translation import translate  # noqa: E402
from transformer.serve.app import create_app  # noqa: E402
from transformer.serve.config import ServeConfig  # noqa: E402

from helpers import assert_error, assert_served, client_for  # noqa: E402

SENTENCES = ["twelve", "forty two", "", "three hundred and four"]
PREFIXES = ["douze", "", "", "trois cent"]


def library(engine, sentences, prefixes=None, **search):
    """What the library (no server) gives for ``sentences`` with ``search`` options."""
    decode = replace(engine.decode, **search)
    return translate(engine.model, engine.tokenizers, sentences, decode, prefixes).nbest


def test_the_new_fields_are_in_the_schema(torch_engine):
    with client_for(torch_engine, max_sentences=5, max_chars=80) as client:
        schema = client.get("/openapi.json").json()
    parts = schema["components"]["schemas"]
    request = parts["TranslateRequest"]["properties"]
    for name in ("prefix", "top_p", "min_len", "no_repeat_ngram", "repetition_penalty",
                 "alignment"):  # fmt: skip
        assert name in request, name
    assert request["prefix"]["anyOf"][0]["maxItems"] == 5
    assert request["prefix"]["anyOf"][0]["items"]["maxLength"] == 80
    assert request["top_p"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    assert request["min_len"]["anyOf"][0]["maximum"] == torch_engine.model.config.max_positions - 1
    assert "alignment" in parts["SentenceTranslation"]["properties"]
    assert "alignment" in parts["Hypothesis"]["properties"]
    assert "prefix" in parts["AttentionRequest"]["properties"]
    assert "/score" in schema["paths"]
    assert set(parts["ScoreRequest"]["properties"]) == {"sources", "targets", "length_penalty"}


def test_prefixes_and_alignments_per_request(torch_engine):
    body = {"sentences": SENTENCES, "prefix": PREFIXES, "alignment": True, "nbest": 2}
    with client_for(torch_engine) as client:
        answer = client.post("/translate", json=body).json()
        plain = client.post("/translate", json={"sentences": SENTENCES}).json()
    want = library(torch_engine, SENTENCES, PREFIXES, alignment=True, nbest=2)
    assert_served(answer, want)
    for got, options, prefix in zip(answer["translations"], want, PREFIXES, strict=True):
        assert got["text"].startswith(prefix)
        assert got["alignment"] == pharaoh(options[0].alignment)
        assert [h["alignment"] for h in got["nbest"]] == [pharaoh(o.alignment) for o in options]
    assert answer["translations"][2] == {**answer["translations"][2], "text": "", "alignment": ""}
    assert all(t["alignment"] is None for t in plain["translations"])  # only when asked


@pytest.mark.parametrize("options", [
    {"min_len": 6}, {"no_repeat_ngram": 1}, {"repetition_penalty": 2.0},
    {"sampling": True, "top_p": 1e-6},
])  # fmt: skip
def test_each_rule_applies_per_request(torch_engine, options):
    options = dict(options)
    with client_for(torch_engine) as client:
        answer = client.post("/translate", json={"sentences": SENTENCES, **options}).json()
    search = {"sampling": options.pop("sampling", False), **options}
    assert_served(answer, library(torch_engine, SENTENCES, **search))


def test_concurrent_requests_with_different_options_each_get_their_own(torch_engine):
    app = create_app(torch_engine, ServeConfig(max_wait_ms=300))
    bodies = [{"sentences": SENTENCES}, {"sentences": SENTENCES, "prefix": PREFIXES},
              {"sentences": SENTENCES[:2], "min_len": 5}, {"sentences": SENTENCES[1:],
              "prefix": PREFIXES[1:]}, {"sentences": SENTENCES, "alignment": True}]  # fmt: skip

    async def post_all() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
            return await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))

    try:
        responses = asyncio.run(post_all())
    finally:
        app.state.served.batcher.close()
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, response.text
        search = {k: v for k, v in body.items() if k in ("min_len", "alignment")}
        want = library(torch_engine, body["sentences"], body.get("prefix"), **search)
        assert_served(response.json(), want)
    assert max(r.json()["batch_sentences"] for r in responses) > len(SENTENCES)


def test_score_gives_what_the_engine_gives(torch_engine):
    sources, targets = ["twelve", "forty two", ""], ["douze", "quarante-deux", ""]
    with client_for(torch_engine) as client:
        answer = client.post("/score", json={"sources": sources, "targets": targets}).json()
        flat = client.post("/score", json={"sources": sources, "targets": targets,
                                           "length_penalty": 0.0}).json()  # fmt: skip
    want = torch_engine.score(sources, targets).scores
    for got, p in zip(answer["scores"], want, strict=True):
        assert got["log_prob"] == pytest.approx(p.log_prob, abs=1e-5)
        assert got["per_token"] == pytest.approx(p.per_token, abs=1e-5)
        assert got["score"] == pytest.approx(p.penalised, abs=1e-5)
        assert (got["tokens"], got["truncated"]) == (p.tokens, False)
    assert [s["score"] for s in flat["scores"]] == pytest.approx([p.log_prob for p in want])


@pytest.mark.parametrize(("path", "body", "words"), [
    ("/translate", {"sentences": ["a", "b"], "prefix": ["x"]}, ["prefix", "1 for 2 sentences"]),
    ("/translate", {"sentences": ["a"], "prefix": ["quatre-vingt-dix-neuf " * 12]},
     ["prefix.0", "pieces", "at most 47"]),
    ("/translate", {"sentences": ["a"], "prefix": ["x"] * 65}, ["prefix", "serve.max_sentences"]),
    ("/translate", {"sentences": ["a"], "top_p": 0}, ["top_p", "greater than 0"]),
    ("/translate", {"sentences": ["a"], "top_p": 1.5}, ["top_p", "less than or equal to 1"]),
    ("/translate", {"sentences": ["a"], "min_len": 48}, ["min_len", "max_positions"]),
    ("/translate", {"sentences": ["a"], "min_len": 5, "max_len_a": 0.0, "max_len_b": 3},
     ["min_len (5)"]),
    ("/translate", {"sentences": ["a"], "no_repeat_ngram": -1}, ["no_repeat_ngram"]),
    ("/translate", {"sentences": ["a"], "repetition_penalty": 0}, ["repetition_penalty"]),
    ("/translate", {"sentences": ["a"], "alignment": "yes"}, ["alignment"]),
    ("/attention", {"sentence": "a", "prefix": "quatre-vingt-dix-neuf " * 12}, ["prefix.0"]),
    ("/translate", {"sentences": ["a"], "prefix": ["Zebra!"]}, ["prefix.0", "cannot spell", "'Z'"]),
    ("/attention", {"sentence": "a", "prefix": "Zoo"}, ["prefix.0", "cannot spell", "'Z'"]),
    ("/score", {"sources": ["a"], "targets": ["b", "c"]}, ["targets", "2 targets for 1 sources"]),
    ("/score", {"sources": ["a", "b"], "targets": ["c", "quatre-vingt-dix-neuf " * 12]},
     ["targets.1 has", "pieces", "at most 47"]),
    ("/score", {"sources": [], "targets": []}, ["sources"]),
    ("/score", {"sources": ["a"], "targets": ["b"], "length_penalty": -1}, ["length_penalty"]),
])  # fmt: skip
def test_bad_values_are_json_422s_naming_the_field(torch_engine, path, body, words):
    with client_for(torch_engine) as client:
        response = client.post(path, json=body)
    assert_error(response, 422, "invalid_request", *words)
