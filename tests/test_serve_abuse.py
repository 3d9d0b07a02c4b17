"""The server under abuse, in bounded time: idle connections and slow clients are cut off, a
request whose client left is not decoded, one request cannot ask for unbounded work, HEAD works
wherever GET does, the page cannot be framed, and a client that leaves is logged as 499.

The timeouts and the disconnects need real sockets: a server process (``server_process``) or
uvicorn in a thread, with a stand-in engine whose decoding takes as long as the test says.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from transformer.config import DecodeConfig
from transformer.inference import beam_search, greedy_search
from transformer.inference.translation import Translation, TranslationResult
from transformer.serve.batcher import Batcher
from transformer.vocab import EOS_ID

from helpers import A, B, Stub, assert_error, client_for, padded

pytest.importorskip("fastapi")


# ------------------------------------------------------------- a search stops when told to
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_a_search_stops_a_sentence_nobody_waits_for(search):
    never_ends = {A: 0.6, B: 0.4 - 1e-9, EOS_ID: 1e-9}  # EOS only where forced, at the limit
    model = Stub({}, default=never_ends)
    src = padded([[5, 6, EOS_ID], [7, EOS_ID]])
    config = DecodeConfig(beam_size=1 if search == "greedy" else 3, max_len_a=0, max_len_b=200)
    run = greedy_search if search == "greedy" else beam_search
    alone = run(Stub({}, default=never_ends), src[1:, :2], config)  # sentence 1 only
    steps = {"n": 0}

    def stopped(i: int) -> bool:
        steps["n"] += i == 0
        return i == 0 and steps["n"] > 5  # sentence 0's caller leaves at the 6th step

    found = run(model, src, config, stopped=stopped)
    rows = model.rows_seen
    assert len(rows) == 201  # sentence 1 still goes to its limit, with EOS forced
    assert sum(r > (1 if search == "greedy" else 3) for r in rows) <= 7  # sentence 0 left
    kept = found[1] if search == "greedy" else found[1][0]
    want = alone[0] if search == "greedy" else alone[0][0]
    assert kept.tokens == want.tokens and kept.score == pytest.approx(want.score)


# ----------------------------------------------------------------- the batcher lets go
@dataclass
class SlowEngine:
    """An engine whose sentence "slow" decodes for ``seconds`` unless its caller leaves."""

    inner: object
    seconds: float = 20.0
    decoded: list[str] = field(default_factory=list)
    name = "torch"

    def __getattr__(self, name: str) -> object:  # tokenizers, decode, config, path, ...
        return getattr(self.inner, name)

    def translate(self, sentences, decode=None, prefixes=None, stopped=None) -> TranslationResult:
        # As in_length_batches: a sentence already stopped is not decoded at all.
        self.decoded += [s for i, s in enumerate(sentences) if not (stopped and stopped(i))]
        end = time.monotonic() + self.seconds
        for i, sentence in enumerate(sentences):
            while sentence == "slow" and time.monotonic() < end and not (stopped and stopped(i)):
                time.sleep(0.01)
        return TranslationResult([[Translation(s, 0.0, [])] for s in sentences], [])


def test_an_abandoned_job_leaves_the_queue_or_stops_decoding(torch_engine):
    engine = SlowEngine(torch_engine)
    batcher = Batcher(engine, batch_tokens=8, max_wait_ms=0, max_queue=100)
    try:
        slow = batcher.translate(["slow"], engine.decode)
        time.sleep(0.2)  # the worker is decoding it
        queued = batcher.translate(["never"], engine.decode)
        batcher.abandon(queued)
        assert queued.cancelled()
        start = time.monotonic()
        batcher.abandon(slow)  # its caller left: the worker stops at the next check
        slow.result(timeout=5)
        assert time.monotonic() - start < 2
        quick = batcher.translate(["quick"], engine.decode).result(timeout=5)
        assert quick.result.best == ["quick"]
        assert "never" not in engine.decoded
    finally:
        batcher.close(5)


# ------------------------------------------------------ the budget, HEAD, framing (in-process)
def test_a_request_over_the_cost_budget_is_a_422_naming_it(torch_engine):
    # cost = sentences x (source + hypotheses x (max_len + 1)), worked out by hand here: the
    # source is its pieces and EOS, each hypothesis decodes max_len tokens and EOS
    n = len(torch_engine.tokenizers.src.encode("twelve")) + 1
    budget = 5 * (n + 4 * 6)
    with client_for(torch_engine, max_cost=budget) as client:
        within = {"sentences": ["twelve"] * 5, "beam_size": 4, "max_len_a": 0.0, "max_len_b": 5}
        assert client.post("/translate", json=within).status_code == 200
        over = client.post("/translate", json={**within, "max_len_a": 0.0, "max_len_b": 6})
        assert_error(over, 422, "over_budget", "serve.max_cost", f"{5 * (n + 4 * 7)} tokens",
                     f"allows {budget}")  # fmt: skip
        sampled = {
            "sentences": ["twelve"] * 5,
            "sampling": True,
            "nbest": 5,
            "max_len_a": 0.0,
            "max_len_b": 5,
        }
        cost = 5 * (5 * n + 5 * 6)  # each sample encodes its own copy of the source
        assert_error(client.post("/translate", json=sampled), 422, "over_budget", f"{cost} tokens")
        empty = {"sentences": [""] * 64, "beam_size": 16}  # empty sentences are not decoded
        assert client.post("/translate", json=empty).status_code == 200
        assert client.get("/info").json()["limits"]["max_cost"] == budget


def test_head_works_wherever_get_does_and_the_page_cannot_be_framed(torch_engine):
    with client_for(torch_engine) as client:
        for path in ("/", "/health", "/info", "/openapi.json", "/page/app.js"):
            get, head = client.get(path), client.head(path)
            assert head.status_code == get.status_code == 200, path
            assert head.content == b"" and head.headers["content-type"] == get.headers[
                "content-type"
            ]  # fmt: skip
        assert client.head("/translate").status_code == 405
        page = client.get("/").headers
        assert "frame-ancestors 'none'" in page["content-security-policy"]
        assert page["x-frame-options"] == "DENY"


# ---------------------------------------------------------------- real sockets, real time
def _request(host: str, port: int, body: dict, timeout: float = 30,
             path: str = "/translate") -> socket.socket:  # fmt: skip
    sock = socket.create_connection((host, port), timeout=timeout)
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()  # fmt: skip
    sock.sendall(head + data)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` before its timeout (10 s) runs out."""
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.slow
def test_idle_connections_and_slow_headers_are_closed(numbers_model, server_process):
    _, url = server_process(numbers_model, "--serve.idle_timeout", "1")
    host, port = url[len("http://") :].split(":")
    start = time.monotonic()
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(100)]
    slow = socket.create_connection((host, int(port)), timeout=10)
    for byte in b"GET /health HTTP/1.1\r\nHost: x\r\n":  # a header a byte at a time
        try:
            slow.send(bytes([byte]))
        except OSError:
            break
        time.sleep(0.05)
    assert all(_closed_by_server(s) for s in [*idle, slow])
    elapsed = time.monotonic() - start
    assert 1 <= elapsed < 8, elapsed  # cut at the timeout, not held for as long as they like


@pytest.mark.slow
def test_a_slow_body_is_cut_off_with_a_408(numbers_model, server_process):
    _, url = server_process(numbers_model, "--serve.body_timeout", "1")
    host, port = url[len("http://") :].split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{")  # fmt: skip
    start, answer = time.monotonic(), b""
    sock.settimeout(0.2)
    while not answer.endswith(b"}") and time.monotonic() - start < 10:
        try:
            sock.send(b" ")  # one byte every 0.2 s: the body would take 20 s
            answer += sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            break
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"serve.body_timeout" in answer
    assert 1 <= time.monotonic() - start < 4


@contextmanager
def served_in_a_thread(engine):
    """``engine``'s app served by uvicorn in a thread (as ``serve`` configures it); its port."""
    import uvicorn

    from transformer.serve.app import create_app
    from transformer.serve.config import ServeConfig
    from transformer.serve.server import listen, uvicorn_config

    config = ServeConfig(port=0)
    server = uvicorn.Server(uvicorn_config(create_app(engine, config), config))
    listener = listen("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def threaded_server(torch_engine, caplog):
    """The app on a SlowEngine, served by uvicorn in a thread."""
    engine = SlowEngine(torch_engine)
    caplog.set_level(logging.INFO, logger="transformer.serve.access")
    with served_in_a_thread(engine) as port:
        yield engine, port


@pytest.mark.slow
def test_a_request_whose_client_left_is_not_decoded_and_logged_as_499(threaded_server, caplog):
    engine, port = threaded_server
    gone = _request("127.0.0.1", port, {"sentences": ["slow"], "beam_size": 1})
    time.sleep(0.5)  # being decoded: 20 s unless stopped
    queued = _request("127.0.0.1", port, {"sentences": ["never"], "beam_size": 1})
    time.sleep(0.3)  # waiting behind "slow"
    queued.close()  # its client leaves: out of the queue
    time.sleep(0.3)
    gone.close()  # its client leaves: "slow" stops at the next check
    start = time.monotonic()
    waiting = _request("127.0.0.1", port, {"sentences": ["quick"], "beam_size": 1})
    answer = waiting.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert time.monotonic() - start < 3  # not 20 s behind the request whose client left
    time.sleep(0.5)
    lines = [json.loads(r.message) for r in caplog.records if r.name.endswith("access")]
    statuses = sorted(line["status"] for line in lines if line["path"] == "/translate")
    assert statuses == [200, 499, 499], lines
    assert "never" not in engine.decoded


def test_the_new_limits_are_checked_where_they_are_set():
    from transformer.errors import BadValue
    from transformer.serve.config import ServeConfig

    for key, value in (("idle_timeout", 0), ("body_timeout", -1), ("max_cost", 0),
                       ("body_timeout", float("nan"))):  # fmt: skip
        with pytest.raises(BadValue, match=key):
            ServeConfig(**{key: value})


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/attention", "/step-through"])
def test_an_attention_view_whose_client_left_stops_its_search(torch_engine, caplog, path):
    # Every decoder step takes 0.1 s: the view's beam search of 47 steps would take about 5 s.
    steps = []

    def slow_step(module, args) -> None:
        steps.append(time.monotonic())
        time.sleep(0.1)

    hook = torch_engine.model.decoder.register_forward_pre_hook(slow_step)
    caplog.set_level(logging.INFO, logger="transformer.serve.access")
    try:
        with served_in_a_thread(torch_engine) as port:
            body = {"sentence": "one", "beam_size": 4, "min_len": 47}
            gone = _request("127.0.0.1", port, body, path=path)
            time.sleep(0.5)  # being decoded
            gone.close()
            time.sleep(0.5)  # the search notices at its next step
            left = time.monotonic()
            waiting = _request("127.0.0.1", port, {"sentences": ["one"], "beam_size": 1,
                                                   "max_len_a": 0.0, "max_len_b": 2})  # fmt: skip
            answer = waiting.recv(65536)
            answered = time.monotonic()
    finally:
        hook.remove()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert answered - left < 2, answered - left  # not the 4 s left of the abandoned search
    assert len([t for t in steps if t < left]) < 20  # the search stopped early
    lines = [json.loads(r.message) for r in caplog.records if r.name.endswith("access")]
    assert [line["status"] for line in lines if line["path"] == path] == [499]
    assert "Traceback" not in caplog.text and "never retrieved" not in caplog.text


@pytest.mark.slow
def test_texts_that_make_more_sentences_than_the_queue_holds_are_refused_not_retried(
    torch_engine,
):
    # 200 sentences in one document: a retry could never fit a queue of 64 (it was a 429)
    with client_for(torch_engine, max_queue=64) as client:
        body = {"sentences": ["one. " * 199 + "one."], "document": True}
        answer = client.post("/translate", json=body)
    assert_error(answer, 422, "invalid_request", "200 sentences", "serve.max_queue")


@pytest.mark.slow
def test_planning_is_dropped_for_a_client_that_left_and_counts_in_the_timeout(
    torch_engine, monkeypatch
):
    from transformer.serve import texts

    planned = []

    def slow_plan(*args):  # each text takes 1 s to read
        planned.append(time.monotonic())
        time.sleep(1.0)
        return plan_for(*args)

    plan_for = texts.plan_for
    monkeypatch.setattr(texts, "plan_for", slow_plan)
    body = {"sentences": ["one. two."], "document": True}
    with served_in_a_thread(torch_engine) as port:
        first = _request("127.0.0.1", port, body)
        time.sleep(0.3)  # being planned
        gone = [_request("127.0.0.1", port, body) for _ in range(3)]  # waiting for the planner
        time.sleep(0.2)
        for sock in gone:
            sock.close()
        assert first.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(1.5)  # what a leftover plan would take
    assert len(planned) == 1, planned  # the three that left were never planned
    with client_for(torch_engine, timeout=0.5) as client:
        start = time.monotonic()
        late = client.post("/translate", json=body)
        waited = time.monotonic() - start
    assert_error(late, 504, "timeout", "serve.timeout")
    assert waited < 0.9, waited  # not the 1 s of planning, then the search


@pytest.mark.slow
def test_requests_beyond_what_the_planner_may_hold_are_a_429(torch_engine, monkeypatch):
    from transformer.serve import texts

    plan_for = texts.plan_for
    monkeypatch.setattr(texts, "plan_for", lambda *args: time.sleep(1.0) or plan_for(*args))
    monkeypatch.setattr(texts, "MAX_PLANS", 2)
    body = {"sentences": ["one. two."], "document": True}
    deadline = time.monotonic() + 10
    while texts.PLANNER.held and time.monotonic() < deadline:  # another test's last plan
        time.sleep(0.05)
    with served_in_a_thread(torch_engine) as port:
        held = [_request("127.0.0.1", port, body) for _ in range(2)]  # read, and waiting to be
        time.sleep(0.3)
        start = time.monotonic()
        sock = _request("127.0.0.1", port, body)
        over = sock.recv(65536)
        refused = time.monotonic() - start
        over += sock.recv(65536) if over.endswith(b"\r\n\r\n") else b""  # the body apart
        answers = [sock.recv(65536) for sock in held]
    assert over.startswith(b"HTTP/1.1 429") and b"queue_full" in over and b"retry-after" in over
    assert refused < 0.5, refused  # at once, not after the 2 s the others take
    assert all(a.startswith(b"HTTP/1.1 200") for a in answers), answers
