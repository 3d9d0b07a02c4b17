"""transformer serve, around the API: the API key, the ctranslate2 engine, a real uvicorn process
(a port in use, SIGTERM while requests are in flight), the access log, and the GPU."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from dataclasses import replace

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402

from transformer.cli import main  # noqa: E402
from transformer.config import RuntimeConfig  # noqa: E402
from transformer.errors import BadValue, UserError  # noqa: E402
from transformer.inference.engine import load_engine, load_torch_engine  # noqa: E402
from transformer.serve.config import API_KEY_ENV, ServeConfig  # noqa: E402
from transformer.serve.server import with_api_key  # noqa: E402

from helpers import assert_error, assert_served, client_for, expected  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains or starts processes

SENTENCES = ["one", "twelve", "one hundred", "seven hundred and seventy-one", "eighty",
             "four hundred and twelve", "ninety-one", "two hundred", "", "thirteen"]  # fmt: skip


# --------------------------------------------------------------------------------- API key
def test_the_api_key_is_required_when_set(torch_engine):
    with client_for(torch_engine, api_key="s3cret") as client:
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


def test_a_key_from_the_environment_that_no_client_could_send_is_refused():
    """A key read from bytes that are not UTF-8 made every request a 500 (its ``encode`` failed);
    one with a space or a letter outside ASCII could never match what a client sends."""
    for key, words in (("s3cr\udcffet", "the byte 0xFF, which is not UTF-8"),
                       ("s3 cret", "character 3 is ' '"), ("s3cr\tet", "U+0009")):  # fmt: skip
        with pytest.raises(UserError, match=API_KEY_ENV) as refused:
            with_api_key(ServeConfig(), {API_KEY_ENV: key})
        assert words in str(refused.value)
    assert with_api_key(ServeConfig(), {API_KEY_ENV: "A-z_0.9~+/="}).api_key == "A-z_0.9~+/="


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
        (["--api-key", "two words"], ["api_key", "character 4 is ' '"]),
        (["--api-key", "clé"], ["api_key", "character 3"]),
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
    # a limit that feeds a search setting stays within DecodeConfig's range for it
    with pytest.raises(
        BadValue, match=r"max_beam must be in \[1, 1024\] \(DecodeConfig.beam_size\)"
    ):
        ServeConfig(max_beam=1025)
    with pytest.raises(BadValue, match=r"batch_tokens must be in \[1, 16777216\]"):
        ServeConfig(batch_tokens=1 << 25)


# ------------------------------------------------------------------- the ctranslate2 engine
def test_the_ctranslate2_engine_serves_what_it_translates(numbers_model, torch_engine):
    pytest.importorskip("ctranslate2")
    engine = load_engine(numbers_model, "ctranslate2", runtime=RuntimeConfig(device="cpu"))
    with client_for(engine) as client:
        greedy = client.post("/translate", json={"sentences": SENTENCES, "beam_size": 1})
        beam = client.post("/translate", json={"sentences": SENTENCES, "beam_size": 3, "nbest": 2})
        info = client.get("/info").json()
        attention = client.post("/attention", json={"sentence": "twelve"})
        masking = client.post("/translate", json={"sentences": ["twelve"], "alignment": True,
                                                  "alignment_method": "masking"})  # fmt: skip
    # The search settings of each request reach CTranslate2: what the engine itself gives.
    for response, search in ((greedy, {"beam_size": 1}), (beam, {"beam_size": 3, "nbest": 2})):
        assert response.status_code == 200, response.text
        want = engine.translate(SENTENCES, replace(engine.decode, **search)).nbest
        assert_served(response.json(), want)
    assert [len(t["nbest"]) for t in beam.json()["translations"]] == [2] * 8 + [1, 2]
    # Greedy through CTranslate2 is ours, sentence for sentence (tests/test_export.py).
    ours = expected(torch_engine, SENTENCES, beam_size=1)
    assert [t["text"] for t in greedy.json()["translations"]] == [n[0].text for n in ours]
    assert (info["engine"], info["device"]) == ("ctranslate2", "cpu")
    assert info["parameters"] == sum(p.numel() for p in torch_engine.model.parameters())
    assert_error(attention, 501, "not_implemented", "torch engine", "ctranslate2")
    assert_error(masking, 422, "invalid_request", "alignment_method", "per source word")


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


def test_the_access_log_has_one_line_per_request_and_text_only_if_asked(torch_engine, caplog):
    with caplog.at_level(logging.INFO, logger="transformer.serve.access"):
        with client_for(torch_engine) as client:
            client.post("/translate", json={"sentences": ["twelve", "one"]})
            client.get("/nowhere")
        with client_for(torch_engine, log_text=True) as client:
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
    on_gpu = load_torch_engine(numbers_model, runtime=RuntimeConfig(device="cuda"))
    with client_for(on_gpu) as client:
        assert client.get("/info").json()["device"].startswith("cuda")
        said = client.post("/translate", json={"sentences": SENTENCES})
        seen = client.post("/attention", json={"sentence": SENTENCES[3]})
    assert said.status_code == 200 and seen.status_code == 200
    assert seen.json()["translation"] == said.json()["translations"][3]["text"]
