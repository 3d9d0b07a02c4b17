"""The decoder's step compiled ahead of time (AOTInductor) against the default eager search.

    .venv/bin/python benchmarks/aot_step.py --size small --sentences 1000 --rounds 3

``runtime.compile`` compiles the step with ``torch.compile`` in the process that translates,
tens of seconds before the first sentence. AOTInductor compiles the same step once
(``torch.export``, then ``aoti_compile_and_package`` with frozen weights, which inductor hands
to oneDNN's packed products) into a shared library that a later process loads in milliseconds.
This script measures whether that would pay: the export and compile time, the load time, how
much of the interpreter's lock a call to the compiled package holds (a Python thread counting
beside it), and whole greedy and beam-4 searches of random sentences (every output held to
``--steps`` tokens, ``decode_speed.hold_back_eos``) four ways:

- ``default``: as ``transformer translate`` runs on a CPU, every layer packed and two batches at
  once, one thread each (``runtime.inter_threads``);
- ``default, one batch``: the same, one batch at a time on all the threads;
- ``aot, one batch``: the compiled step (``inference/compiled.py``'s, with ``torch.compile``
  replaced by the package), the output layer packed, one batch at a time on all the threads;
- ``aot, two batches``: the package with two runners, two batches at once (from 2 threads).

Needs a C++ compiler. Writes ``--report`` (default results/aot_step_cpu.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import torch
from decode_speed import hold_back_eos
from machine import cpu_name
from sizes import SIZES, random_model
from torch._inductor.package.package import load_package

from transformer.config import DecodeConfig, RuntimeConfig
from transformer.inference import compiled, translate_ids
from transformer.inference.engine import pack_for_translation
from transformer.inference.next_tokens import BLOCK
from transformer.inference.parallel import DecodeThreads, decode_threads

RESULTS = Path(__file__).parent / "results"
EOS = 2


class AheadOfTime:
    """What ``compiled._compiled_step`` gets in place of ``torch.compile``: at its first call
    the step is exported for any rows, source and cache length, compiled into a package with
    frozen weights and loaded; every call runs the package."""

    def __init__(self, model: torch.nn.Module, folder: str, runners: int) -> None:
        self.model, self.folder, self.runners = model, folder, runners
        self.times: dict[str, float] = {}
        self.package_mb = 0.0

    def __call__(self, step, dynamic: bool = True):  # torch.compile's place
        runner = None

        def run(*args):
            nonlocal runner
            if runner is None:
                runner = self._build(step, args)
            return runner(*args)

        return run

    def _build(self, step, args):
        model = self.model

        class Step(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model  # its weights: parameters of the exported program

            def forward(self, new, memory, src_mask, position, keys, values, cross_k, cross_v):
                return step(new, memory, src_mask, position, keys, values, cross_k, cross_v)

        rows = torch.export.Dim("rows", min=1, max=4096)
        source = torch.export.Dim("source", min=2, max=1024)
        cache = torch.export.Dim("cache", min=2, max=1024)
        layers = len(args[4])
        shapes = ({0: rows}, {0: rows, 1: source}, {0: rows, 3: source}, None,
                  [{0: rows, 2: cache}] * layers, [{0: rows, 2: cache}] * layers,
                  [{0: rows, 2: source}] * layers, [{0: rows, 2: source}] * layers)  # fmt: skip
        start = time.perf_counter()
        program = torch.export.export(Step().eval(), args, dynamic_shapes=shapes)
        self.times["export"] = time.perf_counter() - start
        path = os.path.join(self.folder, "step.pt2")
        start = time.perf_counter()
        torch._inductor.aoti_compile_and_package(
            program, package_path=path, inductor_configs={"freezing": True}
        )
        self.times["compile"] = time.perf_counter() - start
        self.package_mb = os.path.getsize(path) / 2**20
        start = time.perf_counter()
        runner = load_package(path, num_runners=self.runners)
        self.times["load"] = time.perf_counter() - start
        self.call = lambda: runner(*args)  # the first step again, for ``lock_share``
        return runner


def sentences_of(args: argparse.Namespace, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(10, 31, (args.sentences,), generator=g).tolist()
    return [torch.randint(4, vocab, (n,), generator=g).tolist() + [EOS] for n in lengths]


def lock_share(run) -> float:
    """How fast a Python thread counts beside ``run()`` in a loop (for about a second), as a
    share of how fast it counts alone: near 1 where ``run`` lets go of the interpreter's lock
    while it works, near 0 where it holds it."""
    count, stop = [0], [False]

    def spin() -> None:
        while not stop[0]:
            count[0] += 1

    rates = []
    for beside in (False, True):
        count[0], stop[0] = 0, False
        thread = threading.Thread(target=spin)
        start = time.perf_counter()
        thread.start()
        while time.perf_counter() - start < 1.0:
            run() if beside else time.sleep(0.05)
        stop[0] = True
        thread.join()
        rates.append(count[0] / (time.perf_counter() - start))
    return rates[1] / rates[0]


def measure(args: argparse.Namespace, folder: str) -> dict:
    torch.set_num_threads(args.threads)
    default = hold_back_eos(random_model(args.size, args.seed))
    pack_for_translation(default)
    aot = hold_back_eos(random_model(args.size, args.seed))
    aot.output.pack(BLOCK, torch.float)
    ahead = AheadOfTime(aot, folder, runners=2)
    with mock.patch.object(compiled.torch, "compile", ahead):
        compiled.compile_decoding(aot)
    sentences = sentences_of(args, aot.config.src_vocab_size)
    at_once = decode_threads(RuntimeConfig(threads=args.threads), torch.device("cpu"))
    one = DecodeThreads(1, args.threads)
    ways = {"default": (default, at_once), "default, one batch": (default, one),
            "aot, one batch": (aot, one)}  # fmt: skip
    if args.threads >= 2:
        ways["aot, two batches"] = (aot, DecodeThreads(2, args.threads))
    rows = {}
    for beam in (1, 4):
        decode = DecodeConfig(beam_size=beam, max_len_a=0.0, max_len_b=args.steps, batch_size=64)
        translate_ids(aot, sentences[:64], decode, True, threads=one)  # compiles at the first
        seconds: dict[str, float] = {}
        outputs = {}
        for _ in range(args.rounds):
            for name, (model, threads) in ways.items():
                start = time.perf_counter()
                found = translate_ids(model, sentences, decode, True, threads=threads)
                took = time.perf_counter() - start
                seconds[name] = min(seconds.get(name, took), took)
                outputs[name] = [h[0].tokens for h in found]
        same = sum(
            a == b for a, b in zip(outputs["default"], outputs["aot, one batch"], strict=True)
        )
        rows[beam] = (seconds, same)
    torch.set_num_threads(1)
    square = torch.randn(384, 384)
    shares = {"aot": lock_share(ahead.call), "product": lock_share(lambda: square @ square)}
    return {"rows": rows, "times": ahead.times, "package_mb": ahead.package_mb, "shares": shares}


def report(result: dict, args: argparse.Namespace, load: str) -> str:
    times = result["times"]
    out = [f"`python benchmarks/aot_step.py --size {args.size} --sentences {args.sentences} "
           f"--threads {args.threads} --rounds {args.rounds}`", "",
           f"{time.strftime('%Y-%m-%d %H:%M')}; {cpu_name()}; torch {torch.__version__}; "
           f"{args.threads} threads; load average before: {load}. Random weights, "
           f"{args.sentences} sentences of 10-30 tokens, every output {args.steps} tokens + "
           f"EOS, fastest of {args.rounds} rounds (the four in turn).", "",
           f"Export {times['export']:.1f} s, compile {times['compile']:.1f} s (package "
           f"{result['package_mb']:.1f} MB), load {times['load']:.3f} s.", "",
           "A Python thread counting beside a loop of calls, as a share of its rate alone "
           "(one thread): beside a 384 × 384 product (torch lets go of the lock inside) "
           f"{result['shares']['product']:.2f}, beside the package's step for the first batch "
           f"{result['shares']['aot']:.2f}.", "",
           "| search | " + " | ".join(result["rows"][1][0]) + " | outputs equal, aot / default |",
           "|---|" + "---|" * (len(result["rows"][1][0]) + 1)]  # fmt: skip
    for beam, (seconds, same) in result["rows"].items():
        name = "greedy" if beam == 1 else f"beam {beam}"
        cells = " | ".join(f"{s:.2f} s" for s in seconds.values())
        out.append(f"| {name} | {cells} | {same} of {args.sentences} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="small")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", type=Path, default=RESULTS / "aot_step_cpu.md")
    args = parser.parse_args()
    load = Path("/proc/loadavg").read_text().split()[0]
    with tempfile.TemporaryDirectory() as folder:
        result = measure(args, folder)
    text = report(result, args, load)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
