"""Two batches at once: two threads in one process against two processes of one thread each.

    .venv/bin/python benchmarks/threads_processes.py --model runs/numbers-en-fr
    .venv/bin/python benchmarks/threads_processes.py --model runs/multi30k-de-en \\
        --input test_2016_flickr.de --beam 4

``runtime.inter_threads`` translates a file's batches on worker threads of one process
(inference/parallel.py): torch lets go of Python's global lock inside each operator, but the
Python between operators runs one thread at a time. This measures what that costs, on the same
sentences:
- *threads*: one process, ``threads 2, inter_threads 2`` (the default on 2 cores);
- *processes*: two processes at once, each ``threads 1, inter_threads 1`` on half of the
  sentences (the time is the slower one's);
- *forked* (``--forked``): one process of one thread loads the model, translates a few
  sentences, then forks a second (``multiprocessing``'s fork context): the two share the loaded
  and packed model, copy on write, and each translates half of the sentences.
Each process loads the model and translates a few sentences first; the timed translations of a
round start together. A fork made while torch's OpenMP threads are set to more than one hung in
the child here, also when the child set one thread itself; forked after ``set_num_threads(1)``
it ran, which is why the forked process is of one thread from the start. Seconds are the search
only (no start-up), the fastest of ``--rounds``.
The demo's numbers (3,000, as benchmarks/speed_tables.py) are the default input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from speed_tables import diagnostic_arguments, publish, sentences

CHILD = """
import json, sys, time
from pathlib import Path
from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine
model, threads, beam, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
lines = json.loads(Path(sys.argv[5]).read_text(encoding="utf-8"))
runtime = RuntimeConfig(threads=threads, inter_threads=threads)
engine = load_torch_engine(Path(model), runtime=runtime, beam_size=beam)
engine.translate(lines[:64])
print(time.time() - start)  # > 0: ready late, after the others had begun
while time.time() < start:
    time.sleep(0.001)
began = time.perf_counter()
engine.translate(lines)
print(time.perf_counter() - began)
"""


FORKED = """
import json, multiprocessing, sys, time
from pathlib import Path
import torch
from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine
model, beam, start = sys.argv[1], int(sys.argv[3]), float(sys.argv[4])
lines = json.loads(Path(sys.argv[5]).read_text(encoding="utf-8"))
runtime = RuntimeConfig(threads=1, inter_threads=1)
engine = load_torch_engine(Path(model), runtime=runtime, beam_size=beam)
engine.translate(lines[:64])
torch.set_num_threads(1)
half = len(lines) // 2
def translate(part):
    return engine.translate(lines[part]).best
with multiprocessing.get_context("fork").Pool(1) as pool:
    pool.apply(translate, (slice(0, 8),))  # the fork is made and warm
    print(time.time() - start)
    while time.time() < start:
        time.sleep(0.001)
    began = time.perf_counter()
    theirs = pool.apply_async(translate, (slice(half, None),))
    engine.translate(lines[:half])
    theirs.get(timeout=600)
    print(time.perf_counter() - began)
"""


def run_at_once(
    jobs: list[tuple[list[str], int]], model: Path, beam: int, child: str = CHILD
) -> float:
    """Starts one process per (sentences, threads) job, running ``child``; their searches begin
    together. The slowest search's seconds."""
    start = time.time() + 15  # room to import torch and load the model
    with tempfile.TemporaryDirectory() as folder:
        children = []
        for i, (lines, threads) in enumerate(jobs):
            sentences = Path(folder) / f"{i}.json"
            sentences.write_text(json.dumps(lines), encoding="utf-8")
            command = [sys.executable, "-c", child, str(model), str(threads), str(beam),
                       str(start), str(sentences)]  # fmt: skip
            children.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True))
        seconds = []
        for child in children:
            out, _ = child.communicate()
            if child.returncode:
                sys.exit(f"a translating process failed (exit {child.returncode})")
            late, took = (float(x) for x in out.split()[-2:])
            if late > 0:
                sys.exit(f"a process was ready {late:.1f} s after the start: raise its lead")
            seconds.append(took)
    return max(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    diagnostic_arguments(parser)
    parser.add_argument("--forked", action="store_true", help="also two forked processes")
    args = parser.parse_args()
    lines = sentences(args)
    half = len(lines) // 2
    modes = {"threads": [(lines, 2)], "processes": [(lines[:half], 1), (lines[half:], 1)]}
    if args.forked:
        modes["forked"] = [(lines, 1)]
    best = dict.fromkeys(modes, float("inf"))
    for _ in range(args.rounds):
        for name, jobs in modes.items():
            child = FORKED if name == "forked" else CHILD
            best[name] = min(best[name], run_at_once(jobs, args.model, args.beam, child))
            print(name, f"{best[name]:.2f} s", flush=True)
    table = (
        f"`python benchmarks/threads_processes.py {' '.join(sys.argv[1:])}`: {len(lines)} "
        f"sentences, beam {args.beam}, the search's seconds, fastest of {args.rounds}.\n\n"
        "| two threads in one process | two processes of one thread | processes ÷ threads |"
        + (" one process forked in two | forked ÷ threads |" if args.forked else "")
        + "\n|---|---|---|" + ("---|---|" if args.forked else "") + "\n"
        f"| {best['threads']:.2f} s | {best['processes']:.2f} s | "
        f"{best['threads'] / best['processes']:.2f}× |"
        + (f" {best['forked']:.2f} s | {best['threads'] / best['forked']:.2f}× |"
           if args.forked else "")
        + "\n"
    )  # fmt: skip
    publish(table, args.markdown)


if __name__ == "__main__":
    main()
