"""transformer serve: the API against the library's own translations, dynamic batching under
concurrency, every limit with its JSON error, the API key, the access log, and a real uvicorn
process stopped by SIGTERM while requests are in flight."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.config import RuntimeConfig  # noqa: E402
from transformer.config_serve import API_KEY_ENV, ServeConfig  # noqa: E402
from transformer.errors import BadValue, UserError  # noqa: E402
from transformer.inference.translator import translate  # noqa: E402
from transformer.jobs import load_engine, load_translator  # noqa: E402
from transformer.serve import create_app  # noqa: E402
from transformer.serve.server import with_api_key  # noqa: E402

SENTENCES = ["one", "twelve", "one hundred", "seven hundred and seventy-one", "eighty",
             "four hundred and twelve", "ninety-one", "two hundred", "", "thirteen"]  # fmt: skip


@pytest.fixture(scope="module")
def translator(numbers_model):
    return load_translator(numbers_model, runtime=RuntimeConfig(device="cpu"))


@contextmanager
def client_for(translator, **limits):
    with TestClient(create_app(translator, ServeConfig(**limits))) as client:
        yield client


def expected(translator, sentences, **search):
    """What the library (no server, no batching across requests) gives for ``sentences``."""
    decode = replace(translator.decode, **search)
    return translate(translator.model, translator.tokenizers, sentences, decode).nbest


def assert_same(answer: dict, nbest) -> None:
    assert [t["text"] for t in answer["translations"]] == [n[0].text for n in nbest]
    for got, want in zip(answer["translations"], nbest, strict=True):
        assert [h["text"] for h in got["nbest"]] == [h.text for h in want]
        assert [h["score"] for h in got["nbest"]] == pytest.approx(
            [h.score for h in want], abs=1e-4
        )


def assert_error(response, status: int, code: str, *words: str) -> dict:
    """A JSON error of exactly {error, message}: one line, no traceback, naming ``words``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == code
    assert "\n" not in body["message"] and "Traceback" not in response.text
    for word in words:
        assert word in body["message"]
    return body


# ------------------------------------------------------------------------------- endpoints
def test_translate_gives_what_the_library_gives(translator):
    with client_for(translator) as client:
        response = client.post("/translate", json={"sentences": SENTENCES, "nbest": 3})
    assert response.status_code == 200
    answer = response.json()
    assert_same(answer, expected(translator, SENTENCES, nbest=3, beam_size=4))
    assert answer["translations"][SENTENCES.index("")]["text"] == ""
    assert answer["time_ms"] > 0 and answer["batch_sentences"] == len(SENTENCES)


def test_search_options_apply_per_request(translator):
    with client_for(translator) as client:
        greedy = client.post("/translate", json={"sentences": SENTENCES, "beam": 1}).json()
        short = client.post("/translate", json={"sentences": SENTENCES, "max_len": 2}).json()
        wide = client.post("/translate", json={"sentences": ["one"], "nbest": 6}).json()
        sampled = client.post("/translate", json={"sentences": ["one"], "sampling": True,
                                                  "nbest": 3}).json()  # fmt: skip
    assert_same(greedy, expected(translator, SENTENCES, beam_size=1))
    assert_same(short, expected(translator, SENTENCES, max_len_a=0.0, max_len_b=2))
    assert all(len(t["text"].split()) <= 2 for t in short["translations"])
    assert len(wide["translations"][0]["nbest"]) == 6  # the beam widened to the n-best
    assert len(sampled["translations"][0]["nbest"]) == 3


def test_attention_matches_the_translation_and_rows_sum_to_one(translator):
    config = translator.model.config
    with client_for(translator) as client:
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


def test_info_health_page_and_schema(translator):
    with client_for(translator, max_sentences=7, max_chars=99) as client:
        info = client.get("/info").json()
        health = client.get("/health").json()
        page = client.get("/")
        script = client.get("/page/app.js")
        style = client.get("/page/style.css")
        schema = client.get("/openapi.json").json()
    assert (info["source_language"], info["target_language"]) == ("en", "fr")
    assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert (info["engine"], info["device"]) == ("torch", "cpu")
    assert info["model"]["d_model"] == translator.model.config.d_model
    assert info["limits"]["max_sentences"] == 7
    assert health == {"status": "ok", "in_flight": 0}
    assert page.status_code == 200 and "<textarea" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert script.status_code == style.status_code == 200
    for text in (page.text, script.text, style.text):  # offline: nothing from a CDN
        assert "http://" not in text and "https://" not in text and "//cdn" not in text
    assert set(schema["paths"]) == {"/translate", "/attention", "/info", "/health"}
    request = schema["components"]["schemas"]["TranslateRequest"]["properties"]["sentences"]
    assert request["maxItems"] == 7 and request["items"]["maxLength"] == 99


# -------------------------------------------------------------------------------- batching
async def _post_all(app, bodies: list[dict]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
        return await asyncio.gather(*(client.post("/translate", json=b) for b in bodies))


def test_concurrent_requests_are_decoded_together_and_each_gets_its_own(translator):
    # 12 callers with different sentences and different searches at once: the worker waits
    # 300 ms for company, so they share batches; each must get exactly its own translations.
    app = create_app(translator, ServeConfig(max_wait_ms=300))
    bodies = [{"sentences": SENTENCES[i % 7 : i % 7 + 1 + i % 3], "beam": 1 + i % 2}
              for i in range(12)]  # fmt: skip
    try:
        responses = asyncio.run(_post_all(app, bodies))
    finally:
        app.state.batcher.close()
    for body, response in zip(bodies, responses, strict=True):
        assert response.status_code == 200, response.text
        assert_same(
            response.json(), expected(translator, body["sentences"], beam_size=body["beam"])
        )
    shared = [r.json()["batch_sentences"] for r in responses]
    assert max(shared) > 3  # more sentences than any one request had were decoded together


def test_the_worker_alone_runs_the_model(translator, monkeypatch):
    threads, real = set(), translator.translate

    def recording(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(translator, "translate", recording)
    app = create_app(translator, ServeConfig(max_wait_ms=20))
    try:
        asyncio.run(_post_all(app, [{"sentences": [s]} for s in SENTENCES if s]))
    finally:
        app.state.batcher.close()
    assert threads == {"transformer-batcher"}


# ---------------------------------------------------------------------------------- limits
def test_request_limits_are_json_4xx_errors(translator):
    with client_for(translator, max_sentences=3, max_chars=20, max_body_bytes=2000,
                    max_beam=5) as client:  # fmt: skip
        post = client.post
        assert_error(post("/translate", json={"sentences": ["one"] * 4}), 422,
                     "invalid_request", "at most 3", "serve.max_sentences")  # fmt: skip
        too_long = post("/translate", json={"sentences": ["x" * 21]})
        assert_error(too_long, 422, "invalid_request", "sentences.0", "20 char", "serve.max_chars")
        assert_error(post("/attention", json={"sentence": "x" * 21}), 422, "invalid_request",
                     "serve.max_chars")  # fmt: skip
        assert_error(post("/translate", json={"sentences": ["one"], "beam": 6}), 422,
                     "invalid_request", "beam", "serve.max_beam")  # fmt: skip
        declared = post("/translate", content=b"x" * 2001)  # refused by its Content-Length
        assert_error(declared, 413, "body_too_large", "has 2001 bytes", "serve.max_body_bytes")

        def chunks():  # no Content-Length: the limit counts what arrives
            for _ in range(30):
                yield b"x" * 100

        assert_error(post("/translate", content=chunks()), 413, "body_too_large", "at least")


def test_invalid_requests_name_the_field_without_echoing_it(translator):
    secret = "do-not-echo-this"
    cases = [
        ({"sentences": [secret], "beam": "4"}, "beam"),
        ({"sentences": [secret], "beam_size": 4}, "beam_size"),
        ({"sentences": [secret], "nbest": 5, "beam": 2}, "nbest (5) cannot exceed beam (2)"),
        ({"sentences": []}, "sentences"),
        ({"sentence": secret}, "sentences"),
        ({"sentences": [secret], "max_len": 0}, "max_len"),
        ({"sentences": secret}, "sentences"),
    ]
    with client_for(translator) as client:
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


@contextmanager
def stalled_worker(translator, monkeypatch):
    """The worker blocks inside translate until the returned event is set; counts its calls."""
    gate, calls, real = threading.Event(), [], translator.translate

    def waiting(*args, **kwargs):
        calls.append(args[0])
        gate.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(translator, "translate", waiting)
    try:
        yield gate, calls
    finally:
        gate.set()


async def _until(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def test_a_full_queue_answers_429_with_retry_after(translator, monkeypatch):
    app = create_app(translator, ServeConfig(max_queue=3, max_sentences=3, max_wait_ms=0))
    batcher = app.state.batcher

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

    with stalled_worker(translator, monkeypatch) as (gate, calls):
        try:
            refused, busy, queued = asyncio.run(scenario())
        finally:
            batcher.close()
    assert_error(refused, 429, "queue_full", "2 sentences are waiting", "holds 3")
    assert refused.headers["retry-after"] == "1"
    assert busy.status_code == queued.status_code == 200
    assert len(queued.json()["translations"]) == 2


def test_a_request_that_waits_too_long_answers_504_and_is_not_decoded(translator, monkeypatch):
    app = create_app(translator, ServeConfig(timeout=0.3, max_wait_ms=0))
    batcher = app.state.batcher

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
            first = asyncio.create_task(client.post("/translate", json={"sentences": ["one"]}))
            await _until(lambda: len(calls) == 1)
            second = await client.post("/translate", json={"sentences": ["two"]})  # queued
            gate.set()
            return await first, second

    with stalled_worker(translator, monkeypatch) as (gate, calls):
        try:
            first, second = asyncio.run(scenario())
        finally:
            batcher.close()
    assert_error(first, 504, "timeout", "0.3 s", "serve.timeout")
    assert_error(second, 504, "timeout")
    assert calls == [["one"]]  # the second had been given up on: the worker skipped it


def test_a_bug_is_a_500_whose_body_tells_nothing(translator, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("secret internals at /home/someone")

    monkeypatch.setattr(translator, "translate", broken)
    with client_for(translator) as client, caplog.at_level(logging.ERROR):
        response = client.post("/translate", json={"sentences": ["one"]})
        after = client.get("/health")
    body = assert_error(response, 500, "internal_error", "log")
    assert "secret" not in json.dumps(body)
    assert "secret internals" in caplog.text  # the server's log has it
    assert after.status_code == 200  # the worker goes on


# --------------------------------------------------------------------------------- API key
def test_the_api_key_is_required_when_set(translator):
    with client_for(translator, api_key="s3cret") as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            for response in (
                client.post("/translate", json={"sentences": ["one"]}, headers=headers),
                client.post("/attention", json={"sentence": "one"}, headers=headers),
                client.get("/info", headers=headers),
            ):
                assert_error(response, 401, "unauthorized", "Bearer")
                assert response.headers["www-authenticate"] == "Bearer"
        good = {"Authorization": "Bearer s3cret"}
        assert (
            client.post("/translate", json={"sentences": ["one"]}, headers=good).status_code == 200
        )
        assert client.get("/info", headers=good).status_code == 200
        assert client.get("/health").status_code == 200  # readiness probes need no key
        assert client.get("/").status_code == 200  # the page asks for the key itself


def test_an_api_key_is_needed_off_loopback():
    for host in ("127.0.0.1", "127.3.2.1", "::1", "localhost"):
        assert ServeConfig(host=host).on_loopback
        assert with_api_key(ServeConfig(host=host), {}).api_key is None
    for host in ("0.0.0.0", "192.168.1.20", "::", "example.org"):
        assert not ServeConfig(host=host).on_loopback
        with pytest.raises(UserError, match=API_KEY_ENV):
            with_api_key(ServeConfig(host=host), {})
        assert with_api_key(ServeConfig(host=host), {API_KEY_ENV: "k"}).api_key == "k"
        assert with_api_key(ServeConfig(host=host, api_key="o"), {API_KEY_ENV: "k"}).api_key == "o"


def test_serve_off_loopback_without_a_key_is_refused_before_loading(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    missing = tmp_path / "no-such-model"  # never read: the address is checked first
    assert main(["serve", str(missing), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--api-key" in err and API_KEY_ENV in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--port", "70000"], ["ServeConfig.port", "70000"]),
        (["--serve.max_wait_ms", "nan"], ["max_wait_ms"]),
        (["--max_queue", "2", "--max_sentences", "5"], ["max_queue (2)", "max_sentences (5)"]),
        (["--api-key", " "], ["api_key"]),
        (["--timeout", "0"], ["timeout"]),
    ],
)
def test_bad_serve_options_are_one_line_errors(args, words, numbers_model, capsys):
    assert main(["serve", str(numbers_model), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    for word in words:
        assert word in err


def test_serve_config_checks_its_values():
    with pytest.raises(BadValue, match="max_chars"):
        ServeConfig(max_chars=0)
    with pytest.raises(BadValue, match="host"):
        ServeConfig(host=" ")


# ------------------------------------------------------------------- the ctranslate2 engine
def test_the_ctranslate2_engine_serves_what_it_translates(numbers_model, translator):
    pytest.importorskip("ctranslate2")
    engine = load_engine(numbers_model, "ctranslate2", runtime=RuntimeConfig(device="cpu"))
    with client_for(engine) as client:
        greedy = client.post("/translate", json={"sentences": SENTENCES, "beam": 1})
        beam = client.post("/translate", json={"sentences": SENTENCES, "beam": 3, "nbest": 2})
        info = client.get("/info").json()
        attention = client.post("/attention", json={"sentence": "twelve"})
    # The search settings of each request reach CTranslate2: what the engine itself gives.
    for response, search in ((greedy, {"beam_size": 1}), (beam, {"beam_size": 3, "nbest": 2})):
        assert response.status_code == 200, response.text
        want = engine.translate(SENTENCES, replace(engine.decode, **search)).nbest
        assert_same(response.json(), want)
    assert [len(t["nbest"]) for t in beam.json()["translations"]] == [2] * 8 + [1, 2]
    # Greedy through CTranslate2 is ours, sentence for sentence (tests/test_export.py).
    ours = expected(translator, SENTENCES, beam_size=1)
    assert [t["text"] for t in greedy.json()["translations"]] == [n[0].text for n in ours]
    assert (info["engine"], info["device"]) == ("ctranslate2", "cpu")
    assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
    assert_error(attention, 501, "not_implemented", "torch engine", "ctranslate2")


def test_serve_engine_ctranslate2_on_an_export(numbers_model, tmp_path, server_process, capsys):
    pytest.importorskip("ctranslate2")
    export = tmp_path / "ct2"
    assert main(["export", str(numbers_model), "--to", "ctranslate2", str(export),
                 "--quantization", "int8"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["serve", str(export), "--port", "0"]) == 2  # the torch engine cannot load it
    assert "--engine ctranslate2" in capsys.readouterr().err
    proc, url = server_process(export, "--engine", "ctranslate2")
    said = httpx.post(f"{url}/translate", json={"sentences": ["twelve", "", "one"]}, timeout=30)
    info = httpx.get(f"{url}/info", timeout=5).json()
    assert said.status_code == 200, said.text
    texts = [t["text"] for t in said.json()["translations"]]
    assert texts[1] == "" and all(texts[i] for i in (0, 2))
    assert info["engine"] == "ctranslate2" and info["checkpoint"] == "ct2"


# ------------------------------------------------------------------ a real server process
def test_port_in_use_is_a_one_line_error(numbers_model, capsys, server_process):
    _, url = server_process(numbers_model)
    port = url.rsplit(":", 1)[1]
    assert main(["serve", str(numbers_model), "--port", port]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"port {port}" in err and "in use" in err


def test_sigterm_finishes_the_requests_in_flight_then_exits_0(numbers_model, server_process):
    # The worker waits 1.5 s to batch, so the requests are still in flight at SIGTERM.
    proc, url = server_process(numbers_model, "--max_wait_ms", "1500")
    bodies = [{"sentences": SENTENCES[i : i + 2]} for i in range(4)]
    answers: list[httpx.Response | Exception] = [None] * len(bodies)  # type: ignore[list-item]

    def send(i: int) -> None:
        try:
            answers[i] = httpx.post(f"{url}/translate", json=bodies[i], timeout=30)
        except Exception as error:  # reported by the assertions below
            answers[i] = error

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/health", timeout=5).json()["in_flight"] < len(bodies):
        assert time.monotonic() < deadline, "the requests never arrived"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    refused = False
    while not refused and time.monotonic() < deadline:  # it stops accepting connections
        try:
            httpx.get(f"{url}/health", timeout=1)
            time.sleep(0.02)
        except httpx.TransportError:
            refused = True
    for thread in threads:
        thread.join(30)
    code = proc.wait(30)
    err = proc.stderr.read()
    assert code == 0, err
    assert refused
    for body, answer in zip(bodies, answers, strict=True):
        assert isinstance(answer, httpx.Response), answer
        assert answer.status_code == 200
        assert len(answer.json()["translations"]) == len(body["sentences"])
    assert "Traceback" not in err
    access = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    translated = [line for line in access if line["path"] == "/translate"]
    assert len(translated) == len(bodies) and {line["status"] for line in translated} == {200}
    assert all("text" not in line for line in access)  # no request text by default
    assert all(SENTENCES[1] not in line for line in err.splitlines())


def test_the_access_log_has_one_line_per_request_and_text_only_if_asked(translator, caplog):
    with caplog.at_level(logging.INFO, logger="transformer.serve.access"):
        with client_for(translator) as client:
            client.post("/translate", json={"sentences": ["twelve", "one"]})
            client.get("/nowhere")
        with client_for(translator, log_text=True) as client:
            client.post("/translate", json={"sentences": ["thirteen"]})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("access")]
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/translate", 200), ("/nowhere", 404), ("/translate", 200)
    ]  # fmt: skip
    assert lines[0]["sentences"] == 2 and lines[0]["chars"] == len("twelve") + len("one")
    assert "text" not in lines[0] and "twelve" not in json.dumps(lines[0])
    assert lines[2]["text"] == ["thirteen"]
    assert {"time", "client", "method", "ms"} <= set(lines[0])


@pytest.mark.gpu
def test_translate_and_attention_on_the_gpu(numbers_model):
    on_gpu = load_translator(numbers_model, runtime=RuntimeConfig(device="cuda"))
    with client_for(on_gpu) as client:
        assert client.get("/info").json()["device"].startswith("cuda")
        said = client.post("/translate", json={"sentences": SENTENCES})
        seen = client.post("/attention", json={"sentence": SENTENCES[3]})
    assert said.status_code == 200 and seen.status_code == 200
    assert seen.json()["translation"] == said.json()["translations"][3]["text"]
