"""Load test of ``transformer serve``: many concurrent clients on loopback, and what dynamic
batching buys over translating the same sentences one at a time.

    make demo                                      # creates runs/numbers-en-fr
    .venv/bin/python benchmarks/serve_load.py [MODEL_DIR] [--clients 32] [--requests 2000]
        [--engine torch|ctranslate2] [--output benchmarks/results/serve_load.md --note "..."]

The script starts ``python -m transformer serve MODEL_DIR --host 127.0.0.1 --port 0`` (loopback
only: the address is not an option), waits for /health, sends a few warm-up requests, then:

1. ``--requests`` POST /translate requests in all from ``--clients`` concurrent clients, each
   with 1 to ``--max-sentences`` sentences drawn (seeded) from the model's test split;
2. the first ``--sequential`` of those sentences again, one per request from a single client;

then stops the server with SIGTERM (it must exit 0), and translates every sentence in-process
through the same engine (``--engine``: ours, or CTranslate2 converting the model on the fly):
one sentence per call (no batching at all), and all of them in one call (offline batching: the
most batching can give). It checks that the server gave each sentence the same translation as
the one-by-one run, and prints a markdown table (``--output`` also writes it to a file).
Latencies are per request (HTTP) or per call (library).

Bounded: a fixed number of requests, each with a 60 s client timeout. The server, the clients
and the library runs share this machine's cores, so the figures depend on what else runs here.
Run by hand, not by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch
from machine import cpu_name

from transformer.config import RuntimeConfig
from transformer.data.corpora import load_splits
from transformer.inference.engine import Engine, load_engine

HOST = "127.0.0.1"  # loopback only


@dataclass
class Run:
    """One row of the table: what was sent, how long it took, each latency, what failed."""

    name: str
    requests: int
    sentences: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0


def start_server(
    model_dir: str, engine: str, runtime: RuntimeConfig, log: Path
) -> tuple[subprocess.Popen, str]:
    """The server on a free loopback port, its stderr (access log) going to ``log``; its URL."""
    command = [sys.executable, "-m", "transformer", "serve", model_dir, "--host", HOST,
               "--port", "0", "--engine", engine, "--device", runtime.device,
               "--runtime.threads", str(runtime.threads)]  # fmt: skip
    with log.open("w") as stderr:
        proc = subprocess.Popen(command, stderr=stderr)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        said = [line for line in log.read_text().splitlines() if "listening on" in line]
        if said:
            url = said[0].rsplit(" ", 1)[1]
            httpx.get(f"{url}/health", timeout=30).raise_for_status()
            return proc, url
        if proc.poll() is not None:
            sys.exit(f"the server ended with code {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not start within 120 s")


async def load(url: str, requests: list[list[str]], clients: int) -> tuple[list, list, float]:
    """Sends every request, ``clients`` at a time; (latencies ms, answers, wall seconds).

    An answer is the response's JSON when it is a 200, else the response or the exception."""
    latencies: list[float] = [0.0] * len(requests)
    answers: list[object] = [None] * len(requests)
    todo = iter(range(len(requests)))  # shared: each client takes the next request
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(http: httpx.AsyncClient) -> None:
        for i in todo:
            start = time.perf_counter()
            try:
                response = await http.post("/translate", json={"sentences": requests[i]})
                answers[i] = response.json() if response.status_code == 200 else response
            except httpx.HTTPError as error:
                answers[i] = error
            latencies[i] = (time.perf_counter() - start) * 1000

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return latencies, answers, time.perf_counter() - start


def one_by_one(engine: Engine, sentences: list[str]) -> tuple[list[str], list[float], float]:
    """Each sentence in its own call to ``translate``; (translations, latencies ms, seconds)."""
    translations, latencies = [], []
    start = time.perf_counter()
    for sentence in sentences:
        called = time.perf_counter()
        translations.append(engine.translate([sentence]).best[0])
        latencies.append((time.perf_counter() - called) * 1000)
    return translations, latencies, time.perf_counter() - start


def all_at_once(engine: Engine, sentences: list[str]) -> float:
    """Seconds to translate ``sentences`` in one call (sorted by length and batched inside)."""
    start = time.perf_counter()
    engine.translate(sentences)
    return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def table(runs: list[Run]) -> list[str]:
    """The runs as a markdown table."""
    lines = ["| run | requests | sentences | wall s | requests/s | sentences/s | p50 ms | p95 ms "
             "| p99 ms | errors |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]  # fmt: skip
    for run in runs:
        ms = [f"{percentile(run.latencies_ms, q):.0f}" if run.latencies_ms else "–"
              for q in (50, 95, 99)]  # fmt: skip
        lines.append(
            f"| {run.name} | {run.requests} | {run.sentences} | {run.seconds:.1f} | "
            f"{run.requests / run.seconds:.1f} | {run.sentences / run.seconds:.1f} | "
            f"{' | '.join(ms)} | {run.errors} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", default="runs/numbers-en-fr")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--max-sentences", type=int, default=4, help="per request (1 to this)")
    parser.add_argument("--sequential", type=int, default=200,
                        help="sentences sent one per request by one client (0: skip)")  # fmt: skip
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads of the server and the library runs (0: torch's "
                        "default; 1 is steadier on a machine busy with other work)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="also write the table here (markdown)")
    parser.add_argument("--note", default="", help="a line for --output: where it ran")
    args = parser.parse_args()
    if not 1 <= args.clients <= 256 or not 1 <= args.requests <= 100_000:
        sys.exit("--clients must be in 1..256 and --requests in 1..100000")
    if not 1 <= args.max_sentences <= 64:
        sys.exit("--max-sentences must be in 1..64 (the server's default limit)")
    if not (Path(args.model_dir) / "checkpoints").is_dir():
        sys.exit(f"{args.model_dir} is not a model directory; `make demo` creates "
                 "runs/numbers-en-fr, or give another one")  # fmt: skip

    runtime = RuntimeConfig(device=args.device, threads=args.threads)
    engine = load_engine(args.model_dir, args.engine, runtime=runtime)
    sources = [src for src, _ in load_splits(engine.config.data).test]
    rng = random.Random(args.seed)
    requests = [rng.sample(sources, rng.randint(1, min(args.max_sentences, len(sources))))
                for _ in range(args.requests)]  # fmt: skip
    sentences = [s for request in requests for s in request]
    alone_requests = [[s] for s in sentences[: args.sequential]]

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "serve.log"
        proc, url = start_server(args.model_dir, args.engine, runtime, log)
        try:
            asyncio.run(load(url, requests[:8], 8))  # warm-up, not counted
            latencies, answers, wall = asyncio.run(load(url, requests, args.clients))
            if alone_requests:
                seq_latencies, seq_answers, seq_wall = asyncio.run(load(url, alone_requests, 1))
        finally:
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(60)
        server_said = log.read_text().splitlines()
    access_lines = sum(line.startswith("{") for line in server_said)
    failed = [a for a in answers if not isinstance(a, dict)]
    batched = [a["batch_sentences"] for a in answers if isinstance(a, dict)]
    runs = [Run(f"serve: {args.clients} concurrent clients, 1–{args.max_sentences} sentences "
                "per request (dynamic batching)", len(requests), len(sentences), wall, latencies,
                len(failed))]  # fmt: skip
    if alone_requests:
        seq_failed = [a for a in seq_answers if not isinstance(a, dict)]
        failed += seq_failed
        runs.append(Run("serve: 1 client, 1 sentence per request", len(alone_requests),
                        len(alone_requests), seq_wall, seq_latencies, len(seq_failed)))  # fmt: skip

    alone, alone_ms, alone_s = one_by_one(engine, sentences)
    offline_s = all_at_once(engine, sentences)
    runs.append(Run("library `translate`: 1 sentence per call", len(sentences), len(sentences),
                    alone_s, alone_ms))  # fmt: skip
    runs.append(Run("library `translate`: all sentences in 1 call (offline)", 1, len(sentences),
                    offline_s))  # fmt: skip

    # Each request's translations against the same sentences translated alone.
    mine = dict(zip(sentences, alone, strict=True))
    served = [(s, t["text"]) for request, answer in zip(requests, answers, strict=True)
              if isinstance(answer, dict)
              for s, t in zip(request, answer["translations"], strict=True)]  # fmt: skip
    same = sum(mine[s] == text for s, text in served)
    gain = (len(sentences) / wall) / (len(sentences) / alone_s)

    threads = args.threads or torch.get_num_threads()  # 0: the library's default
    header = [
        f"Model `{args.model_dir}` ({engine.path.name}, {engine.parameters:,} "
        f"parameters), engine {args.engine}, beam {engine.decode.beam_size}, device "
        f"{args.device}; {os.cpu_count()} CPU cores ({cpu_name()}), torch {torch.__version__}, "
        f"{threads} thread(s) each; server defaults (max_wait_ms 5, batch_tokens 4096).",
    ]
    if args.note:
        header.append(args.note)
    summary = [
        f"Dynamic batching: {gain:.1f}× the sentences/s of the library translating one sentence "
        f"per call. Sentences decoded together per server call: median "
        f"{percentile(batched, 50) if batched else 0}, max {max(batched, default=0)}. Same "
        f"translation as alone: {same}/{len(served)}. Server: exit code {exit_code} after "
        f"SIGTERM, {access_lines} access-log lines.",
    ]
    text = "\n".join([*header, "", *table(runs), "", *summary]) + "\n"
    print(text, end="")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(f"# Serve load test\n\n{text}", encoding="utf-8")
    if failed or exit_code != 0:
        where = f"first error: {failed[0]!r}" if failed else "\n".join(server_said[-5:])
        sys.exit(f"{len(failed)} errors, server exit code {exit_code}; {where}")


if __name__ == "__main__":
    main()
