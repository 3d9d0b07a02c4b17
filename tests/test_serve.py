"""transformer serve: the API against the library's own translations, dynamic batching under
concurrency, and every limit with its JSON error (the rest: test_serve_process.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from transformer.serve.app import create_app  # noqa: E402
from transformer.serve.config import ServeConfig  # noqa: E402

from helpers import assert_error, assert_served, client_for, expected  # noqa: E402

SENTENCES = ["one", "twelve", "one hundred", "seven hundred and seventy-one", "eighty",
             "four hundred and twelve", "ninety-one", "two hundred", "", "thirteen"]  # fmt: skip


# ------------------------------------------------------------------------------- endpoints
def test_translate_gives_what_the_library_gives(torch_engine):
    with client_for(torch_engine) as client:
        response = client.post("/translate", json={"sentences": SENTENCES, "nbest": 3})
    assert response.status_code == 200
    answer = response.json()
    assert_served(answer, expected(torch_engine, SENTENCES, nbest=3, beam_size=4))
    assert answer["translations"][SENTENCES.index("")]["text"] == ""
    assert answer["time_ms"] > 0 and answer["batch_sentences"] == len(SENTENCES)


def test_search_options_apply_per_request(torch_engine):
    with client_for(torch_engine) as client:
        greedy = client.post("/translate", json={"sentences": SENTENCES, "beam_size": 1}).json()
        short = client.post(
            "/translate", json={"sentences": SENTENCES, "max_len_a": 0.0, "max_len_b": 2}
        ).json()
        wide = client.post("/translate", json={"sentences": ["one"], "nbest": 6}).json()
        sampled = client.post("/translate", json={"sentences": ["one"], "sampling": True,
                                                  "nbest": 3}).json()  # fmt: skip
    assert_served(greedy, expected(torch_engine, SENTENCES, beam_size=1))
    assert_served(short, expected(torch_engine, SENTENCES, max_len_a=0.0, max_len_b=2))
    assert all(len(t["text"].split()) <= 2 for t in short["translations"])
    assert len(wide["translations"][0]["nbest"]) == 6  # the beam widened to the n-best
    assert len(sampled["translations"][0]["nbest"]) == 3


def test_attention_matches_the_translation_and_rows_sum_to_one(torch_engine):
    config = torch_engine.model.config
    with client_for(torch_engine) as client:
        seen = client.post("/attention", json={"sentence": "seven hundred and seventy-one"})
        said = client.post("/translate", json={"sentences": ["seven hundred and seventy-one"]})
    assert seen.status_code == 200
    seen = seen.json()
    assert seen["translation"] == said.json()["translations"][0]["text"]
    assert seen["source_tokens"][-1] == "</s>" and seen["target_tokens"][0] == "<s>"
    weights = seen["cross_attention"]  # [layer][head][row][column]
    assert len(weights) == config.n_decoder_layers
    for layer in weights:
        assert len(layer) == config.n_heads
        for head in layer:
            assert len(head) == len(seen["target_tokens"])
            for row in head:
                assert len(row) == len(seen["source_tokens"])
                assert sum(row) == pytest.approx(1.0, abs=1e-3)
                assert all(w == round(w, 4) for w in row)  # short decimals in the JSON


def test_attention_over_its_size_bound_is_refused_before_the_work_it_would_waste(
    torch_engine, monkeypatch
):
    from transformer.serve import app, requests

    config, sentence = torch_engine.model.config, "seven hundred and seventy-one"
    with client_for(torch_engine) as client:
        seen = client.post("/attention", json={"sentence": sentence}).json()
    held = config.n_decoder_layers * config.n_heads * len(seen["target_tokens"]) * len(
        seen["source_tokens"])  # fmt: skip
    searched = []
    inspect = app.inspect_sentence
    monkeypatch.setattr(app, "inspect_sentence", lambda *a: searched.append(1) or inspect(*a))
    monkeypatch.setattr(requests, "MAX_ATTENTION_WEIGHTS", held - 1)
    with client_for(torch_engine) as client:
        over = client.post("/attention", json={"sentence": sentence})
        assert_error(over, 422, "invalid_request", f"holds {held:,} weights", f"{held - 1:,}")
        assert searched == [1]  # searched, but never turned into JSON
        forced = client.post("/attention", json={"sentence": sentence, "min_len": 40})
        assert_error(forced, 422, "invalid_request", "holds at least", "min_len")
        assert searched == [1]  # refused before the search


def test_info_health_page_and_schema(torch_engine):
    with client_for(torch_engine, max_sentences=7, max_chars=99) as client:
        info = client.get("/info").json()
        health = client.get("/health").json()
        page = client.get("/")
        script = client.get("/page/app.js")
        style = client.get("/page/style.css")
        schema = client.get("/openapi.json").json()
    assert (info["source_language"], info["target_language"]) == ("en", "fr")
    assert info["parameters"] == sum(p.numel() for p in torch_engine.model.parameters())
    assert (info["engine"], info["device"]) == ("torch", "cpu")
    assert info["model"]["d_model"] == torch_engine.model.config.d_model
    assert info["limits"]["max_sentences"] == 7
    assert health == {"status": "ok", "in_flight": 0}
    assert page.status_code == 200 and "<textarea" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == style.status_code == 200
    for text in (page.text, script.text, style.text):  # offline: nothing from a CDN
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert set(schema["paths"]) == {"/translate", "/score", "/attention", "/step-through",
                                    "/info", "/health"}  # fmt: skip
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]["sentences"]
    assert request["maxItems"] == 7 and request["items"]["maxLength"] == 99


# -------------------------------------------------------------------------------- batching
async def _post_all(app, bodies: list[dict]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
        return await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))


def test_concurrent_requests_are_decoded_together_and_each_gets_its_own(torch_engine):
    # 12 callers with different sentences and different searches at once: the worker waits
    # 300 ms for company, so they share batches; each must get exactly its own translations.
    app = create_app(torch_engine, ServeConfig(max_wait_ms=300))
    bodies = [{"sentences": SENTENCES[i % 7 : i % 7 + 1 + i % 3], "beam_size": 1 + i % 2}
              for i in range(12)]  # fmt: skip
    try:
        responses = asyncio.run(_post_all(app, bodies))
    finally:
        app.state.served.batcher.close()
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, response.text
        assert_served(
            response.json(), expected(torch_engine, body["sentences"], beam_size=body["beam_size"])
        )
    shared = [r.json()["batch_sentences"] for r in responses]
    assert max(shared) > 3  # more sentences than any one request had were decoded together


def test_the_worker_alone_runs_the_model(torch_engine, monkeypatch):
    threads, real = set(), torch_engine.translate

    def recording(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_engine, "translate", recording)
    app = create_app(torch_engine, ServeConfig(max_wait_ms=20))
    try:
        asyncio.run(_post_all(app, [{"sentences": [s]} for s in SENTENCES if s]))
    finally:
        app.state.served.batcher.close()
    assert threads == {"transformer-batcher"}


# ---------------------------------------------------------------------------------- limits
def test_request_limits_are_json_4xx_errors(torch_engine):
    with client_for(torch_engine, max_sentences=3, max_chars=20, max_body_bytes=2000,
                    max_beam=5) as client:  # fmt: skip
        post = client.post
        assert_error(post("/translate", json={"sentences": ["one"] * 4}), 422,
                     "invalid_request", "at most 3", "serve.max_sentences")  # fmt: skip
        too_long = post("/translate", json={"sentences": ["x" * 21]})
        assert_error(too_long, 422, "invalid_request", "sentences.0", "20 char", "serve.max_chars")
        assert_error(post("/attention", json={"sentence": "x" * 21}), 422, "invalid_request",
                     "serve.max_chars")  # fmt: skip
        assert_error(post("/translate", json={"sentences": ["one"], "beam_size": 6}), 422,
                     "invalid_request", "beam_size", "serve.max_beam")  # fmt: skip
        declared = post("/translate", content=b"x" * 2001)  # refused by its Content-Length
        assert_error(declared, 413, "body_too_large", "has 2001 bytes", "serve.max_body_bytes")

        def chunks():  # no Content-Length: the limit counts what arrives
            for _ in range(30):
                yield b"x" * 100

        assert_error(post("/translate", content=chunks()), 413, "body_too_large", "at least")


def test_invalid_requests_name_the_field_without_echoing_it(torch_engine):
    secret = "do-not-echo-this"
    cases = [
        ({"sentences": [secret], "beam_size": "4"}, "beam_size"),
        ({"sentences": [secret], "beam": 4}, "beam"),  # a field of another name
        (
            {"sentences": [secret], "nbest": 5, "beam_size": 2},
            "nbest (5) cannot exceed beam_size (2)",
        ),
        ({"sentences": []}, "sentences"),
        ({"sentence": secret}, "sentences"),
        ({"sentences": [secret], "max_len_b": -1}, "max_len_b"),
        ({"sentences": secret}, "sentences"),
    ]
    with client_for(torch_engine) as client:
        for body, word in cases:
            answer = assert_error(
                client.post("/translate", json=body), 422, "invalid_request", word
            )
            assert secret not in answer["message"]
        bad_json = client.post("/translate", content=b'{"sentences": [',
                               headers={"content-type": "application/json"})  # fmt: skip
        assert_error(bad_json, 422, "invalid_request", "JSON")
        assert_error(client.post("/attention", json={"sentence": "   "}), 422, "invalid_request",
                     "empty")  # fmt: skip
        assert_error(client.get("/nowhere"), 404, "not_found")
        assert_error(client.get("/translate"), 405, "method_not_allowed")
        # a made-up field's name is the client's text too: shortened, its line breaks escaped
        for name in ("k" * 60_000, "two\nlines <script>"):
            sent = client.post("/translate", json={"sentences": ["one"], name: 1})
            shown = name[:20].replace("\n", "\\n")
            answer = assert_error(sent, 422, "invalid_request", shown)
            assert len(answer["message"]) < 200 and "\n" not in answer["message"], answer


def test_text_that_is_no_unicode_is_a_422_naming_the_field(torch_engine):
    # JSON may escape a lone surrogate (\ud800), which is no character: it cannot be encoded
    # for the tokenizer, and was a 500 from every field holding text.
    lone = '"tw\\ud800elve"'
    cases = [
        ("/translate", f'{{"sentences": [{lone}]}}', "sentences.0"),
        ("/translate", f'{{"sentences": ["twelve"], "prefix": [{lone}]}}', "prefix.0"),
        ("/translate", f'{{"sentences": ["twelve"], "glossary": [["twelve", {lone}]]}}',
         "glossary.0.1"),
        ("/translate", f'{{"sentences": [{lone}], "document": true}}', "sentences.0"),
        ("/translate", f'{{"sentences": [{lone}], "markup": "html"}}', "sentences.0"),
        ("/score", f'{{"sources": ["twelve"], "targets": [{lone}]}}', "targets.0"),
        ("/score", f'{{"sources": [{lone}], "targets": ["douze"]}}', "sources.0"),
        ("/attention", f'{{"sentence": "twelve", "prefix": {lone}}}', "prefix"),
        ("/attention", f'{{"sentence": {lone}}}', "sentence"),
        ("/step-through", f'{{"sentence": {lone}}}', "sentence"),
    ]  # fmt: skip
    with client_for(torch_engine) as client:
        for path, body, field in cases:
            response = client.post(path, content=body.encode(),
                                   headers={"content-type": "application/json"})  # fmt: skip
            assert_error(response, 422, "invalid_request", field)
        fine = client.post("/translate", json={"sentences": ["tw\u00e9lve \U0001f600"]})
        assert fine.status_code == 200, fine.text
        # bytes that are no UTF-8 (it was a 400 naming nothing), and a key given twice (the
        # parser kept the last, where a proxy in front may have read the first)
        for body, words in ((b'{"sentences": ["one \xff two"]}', ["byte 0xff at offset 20"]),
                            (b'{"sentences": ["one"], "sentences": ["two"]}',
                             ['"sentences" is given twice']),
                            (b'{"sentences": ["one"], "glossary": [], "x": {"k": 1, "k": 2}}',
                             ['"k" is given twice'])):  # fmt: skip
            response = client.post("/translate", content=body,
                                   headers={"content-type": "application/json"})  # fmt: skip
            assert_error(response, 422, "invalid_request", *words)


@contextmanager
def stalled_worker(torch_engine, monkeypatch):
    """The worker blocks inside translate until the returned event is set; counts its calls."""
    gate, calls, real = threading.Event(), [], torch_engine.translate

    def waiting(*args, **kwargs):
        calls.append(args[0])
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_engine, "translate", waiting)
    try:
        yield gate, calls
    finally:
        gate.set()


async def _until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def test_a_full_queue_answers_429_with_retry_after(torch_engine, monkeypatch):
    app = create_app(torch_engine, ServeConfig(max_queue=3, max_sentences=3, max_wait_ms=0))
    batcher = app.state.served.batcher

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
            busy = asyncio.create_task(client.post("/translate", json={"sentences": ["one"]}))
            await _until(lambda: len(calls) == 1)  # the worker holds that one
            queued = asyncio.create_task(
                client.post("/translate", json={"sentences": ["two", "three"]})
            )
            await _until(lambda: batcher.in_flight == 2)
            refused = await client.post("/translate", json={"sentences": ["four", "five"]})
            gate.set()
            return refused, await busy, await queued

    with stalled_worker(torch_engine, monkeypatch) as (gate, calls):
        try:
            refused, busy, queued = asyncio.run(scenario())
        finally:
            batcher.close()
    assert_error(refused, 429, "queue_full", "2 sentences are waiting", "holds 3")
    assert refused.headers["retry-after"] == "1"
    assert busy.status_code == queued.status_code == 200
    assert len(queued.json()["translations"]) == 2


def test_a_request_that_waits_too_long_answers_504_and_is_not_decoded(torch_engine, monkeypatch):
    app = create_app(torch_engine, ServeConfig(timeout=0.3, max_wait_ms=0))
    batcher = app.state.served.batcher

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
            first = asyncio.create_task(client.post("/translate", json={"sentences": ["one"]}))
            await _until(lambda: len(calls) == 1)
            second = await client.post("/translate", json={"sentences": ["two"]})  # queued
            gate.set()
            return await first, second

    with stalled_worker(torch_engine, monkeypatch) as (gate, calls):
        try:
            first, second = asyncio.run(scenario())
        finally:
            batcher.close()
    assert_error(first, 504, "timeout", "0.3 s", "serve.timeout")
    assert_error(second, 504, "timeout")
    assert calls == [["one"]]  # the second had been given up on: the worker skipped it


def test_a_bug_is_a_500_whose_body_tells_nothing(torch_engine, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("secret internals at /home/someone")

    monkeypatch.setattr(torch_engine, "translate", broken)
    with client_for(torch_engine) as client, caplog.at_level(logging.ERROR):
        response = client.post("/translate", json={"sentences": ["one"]})
        after = client.get("/health")
    body = assert_error(response, 500, "internal_error", "log")
    assert "secret" not in json.dumps(body)
    assert "secret internals" in caplog.text  # the server's log has it
    assert after.status_code == 200  # the worker goes on
