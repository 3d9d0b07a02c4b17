"""Where a decoding step's time goes: torch.profiler over greedy search and beam 4.

    .venv/bin/python benchmarks/profile_decode.py --threads 2
    .venv/bin/python benchmarks/profile_decode.py --sizes opus-mt --searches "beam 4" --top 25

The three sizes of ``sizes.py`` (demo, small, opus-mt), each with seeded random weights (the
time of a step does not depend on what the weights say, only on the shapes), 64 source
sentences of 10-30 tokens, and every output held to ``--steps`` tokens + EOS
(``decode_speed.hold_back_eos``), so that every run does the same work. The linear layers are
packed as ``transformer translate`` packs them on a CPU (``runtime.pack_weights``,
model/linear.py); ``--no-pack`` leaves them plain.

For each size and search: the wall time of one pass (best of ``--rounds``, the profiler off),
then one profiled pass. The report gives ms per decoder step, operator calls per step, and the
self CPU time grouped by what it is for (the groups below), then the operators with the most
self time. Writes ``--report`` (default results/profile_decode_cpu.md).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import torch
from decode_speed import hold_back_eos, random_sentences
from machine import cpu_name
from sizes import SIZES, random_model
from torch.profiler import ProfilerActivity, profile

from transformer.config import DecodeConfig
from transformer.inference import translate_ids
from transformer.inference.engine import pack_for_translation
from transformer.model import Transformer

RESULTS = Path(__file__).parent / "results"
SEARCHES = {"greedy": 1, "beam 4": 4}
# The operators counted: PyTorch's own and oneDNN's / MKL's products (model/products.py and
# packed layers call ``mkldnn::_linear_pointwise``, which aten's names alone would miss).
NAMESPACES = ("aten::", "mkldnn::", "mkl::")
# What each operator is for: the first group whose names it matches.
GROUPS = [
    ("matrix products (linear layers, Q·Kᵀ, weights·V)", ("addmm", "mm", "bmm", "matmul",
                                                        "linear", "baddbmm", "_linear_pointwise",
                                                        "_mkl_linear")),
    ("vocabulary work (log-softmax, top-k, argmax over V)", ("log_softmax", "topk", "argmax",
                                                             "logsumexp", "max", "sort")),
    ("key/value cache (cat, index_select, copies)", ("cat", "index_select", "copy_", "clone",
                                                     "contiguous", "index", "gather")),
    ("attention softmax and masks", ("softmax", "masked_fill", "any", "where", "logical")),
    ("layer norm", ("layer_norm",)),
    ("element-wise (add, mul, activations)", ("add", "mul", "div", "sub", "relu", "silu",
                                              "gelu", "fill", "exp", "neg", "eq", "ne", "lt",
                                              "le", "ge", "gt", "bitwise", "isnan", "isfinite",
                                              "sum", "embedding")),
]  # fmt: skip


def model_of(size: str, seed: int, pack: bool) -> tuple[Transformer, int]:
    model = hold_back_eos(random_model(size, seed))
    if pack:  # as the engine packs them (inference/engine.py)
        pack_for_translation(model)
    return model, model.config.tgt_vocab_size


def group_of(name: str) -> str:
    op = name.partition("::")[2]
    for group, names in GROUPS:
        if any(op == n or op.startswith(n + "_") or op.endswith("_" + n) for n in names):
            return group
    return "other operators"


def profile_one(size: str, search: str, args: argparse.Namespace) -> dict:
    model, vocab = model_of(size, args.seed, args.pack)
    sentences = random_sentences(argparse.Namespace(
        seed=args.seed, min_len=10, max_len=30, sentences=args.sentences, vocab=vocab))  # fmt: skip
    decode = DecodeConfig(beam_size=SEARCHES[search], max_len_a=0.0, max_len_b=args.steps,
                          batch_size=args.sentences)  # fmt: skip
    translate_ids(model, sentences[:8], decode)  # warm-up
    best = float("inf")
    for _ in range(args.rounds):
        start = time.perf_counter()
        outputs = translate_ids(model, sentences, decode)
        best = min(best, time.perf_counter() - start)
    assert all(len(h[0].tokens) == args.steps for h in outputs)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        translate_ids(model, sentences, decode)
    events = [e for e in prof.key_averages() if e.key.startswith(NAMESPACES)]
    steps = args.steps + 1
    calls = sum(e.count for e in events)
    total = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = defaultdict(float)
    for e in events:
        groups[group_of(e.key)] += e.self_cpu_time_total
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]
    return {
        "size": size, "search": search, "seconds": best, "ms_per_step": best / steps * 1e3,
        "calls_per_step": calls / steps, "op_ms": total / 1e3, "groups": dict(groups),
        "top": [(e.key, e.count / steps, e.self_cpu_time_total / 1e3) for e in top],
    }  # fmt: skip


def report(rows: list[dict], args: argparse.Namespace) -> str:
    out = [f"`python benchmarks/profile_decode.py --threads {args.threads} --steps {args.steps} "
           f"--sentences {args.sentences}`", "",
           f"{time.strftime('%Y-%m-%d %H:%M')}; torch {torch.__version__}, {args.threads} "
           f"threads, {cpu_name()}; weights {'packed' if args.pack else 'plain'}; load average "
           f"before: {args.load}.", "",
           "| size | search | pass (s) | ms / step | operator calls / step |",
           "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        out.append(f"| {r['size']} | {r['search']} | {r['seconds']:.3f} | "
                   f"{r['ms_per_step']:.2f} | {r['calls_per_step']:.0f} |")  # fmt: skip
    names = [g for g, _ in GROUPS] + ["other operators"]
    out += ["", "Self CPU time by group, share of all operators' self time (profiled pass):", "",
            "| group | " + " | ".join(f"{r['size']} {r['search']}" for r in rows) + " |",
            "|---|" + "---|" * len(rows)]  # fmt: skip
    for name in names:
        cells = [f"{100 * r['groups'].get(name, 0) / 1e3 / r['op_ms']:.1f}%" for r in rows]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    for r in rows:
        out += ["", f"**{r['size']}, {r['search']}**: top operators by self CPU time", "",
                "| operator | calls / step | self ms (pass) | share |",
                "|---|---|---|---|"]  # fmt: skip
        for key, calls, ms in r["top"]:
            out.append(f"| `{key}` | {calls:.1f} | {ms:.1f} | {100 * ms / r['op_ms']:.1f}% |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--searches", default=",".join(SEARCHES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-pack",
        dest="pack",
        action="store_false",
        help="leave the linear layers' weights plain (runtime.pack_weights false)",
    )
    parser.add_argument("--report", type=Path, default=RESULTS / "profile_decode_cpu.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.load = Path("/proc/loadavg").read_text().split()[0]
    rows = []
    for size in args.sizes.split(","):
        for search in args.searches.split(","):
            rows.append(profile_one(size, search, args))
            r = rows[-1]
            print(f"{size:8s} {search:7s} {r['seconds']:.3f} s  {r['ms_per_step']:.2f} ms/step  "
                  f"{r['calls_per_step']:.0f} calls/step", flush=True)  # fmt: skip
    text = report(rows, args)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
