"""Peak resident memory of a translation, with the runtime's memory options, against the code
of another checkout on the same machine.

    .venv/bin/python benchmarks/peak_memory.py --model runs/multi30k-de-en \\
        --input test_2016_flickr.de --rounds 3 [--old /tmp/old/src --old-model DIR]

Each row is a fresh process: it imports torch and the package, then loads the model with
``load_engine`` (2 threads; the model's own sentences a batch, as
``DecodeConfig.sentences_per_batch`` gives them, 64 for the other checkout), translates the
first 64 sentences (start-up work), then all of them. Peak memory is the process's peak
resident memory (VmHWM) above its resident memory before the model was loaded: the model, its
packed copies and every search.
The variants:
- *default*: what ``transformer translate`` runs (two batches at once, packed layers);
- *64 sentences a batch*: ``--decode.batch_size 64`` (greedy search's default is 128 for the
  Multi30k model);
- *one batch*: ``--runtime.inter_threads 1``;
- *one batch, unpacked*: ``--runtime.inter_threads 1 --runtime.pack_weights false``;
- the same with ``TRANSFORMER_CPU_PRODUCTS=mkl`` (PyTorch's own float32 products);
- *old* (``--old SRC``): the ``src`` folder of another checkout, e.g. a worktree of the code
  before the speed work, with its own defaults (``--old-model``: a copy of the model whose
  config that code reads). The variants run in turn in every round; the table gives each one's
  smallest and largest peak and its fastest time.

``--heap`` (glibc): a thread also samples the C library's heap every 2 ms (``mallinfo2``), and
the table gives, at the sample with the most resident memory, what the heap then held above
what it held before the model was loaded: in use (the model, oneDNN's compiled products, the
searches' tensors), held free (memory freed inside the heap, which the process keeps) and in
chunks mapped on their own. The sampling slows the pass, so its seconds are not comparable.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import sys
import tempfile
from pathlib import Path

from machine import child_json, cpu_name, publish

HERE = Path(__file__).resolve().parent
CHILD = """
import ctypes, json, sys, threading, time, torch
from pathlib import Path
from transformer.config import RuntimeConfig
from transformer.inference import load_engine

def rss(field="VmRSS"):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024

class Heap(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

def heap():  # MB the C library's heap holds in use, held free, and in mapped chunks
    info = mallinfo2()
    return info.uordblks / 2**20, info.fordblks / 2**20, info.hblkhd / 2**20

model, text, beam, runtime = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
sample = sys.argv[5] == "1"
if sample:
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = Heap
lines = Path(text).read_text().splitlines()
torch.set_num_threads(2)
base, base_heap = rss(), heap() if sample else None
# this code: the model's own batches unless the variant sets some; the other checkout: 64
batch = runtime.pop("batch_size", 0) if runtime is not None else 64
kwargs = {"runtime": RuntimeConfig(threads=2, **runtime)} if runtime is not None else {}
kwargs |= {"batch_size": batch} if batch else {}
engine = load_engine(model, "torch", beam_size=beam, **kwargs)
engine.translate(lines[:64])
samples, running = [], True

def watch():
    while running:
        samples.append((rss(), *heap()))
        time.sleep(0.002)

watcher = threading.Thread(target=watch)
if sample:
    watcher.start()
start = time.perf_counter()
engine.translate(lines)
seconds = time.perf_counter() - start
running = False
row = {"peak": rss("VmHWM") - base, "seconds": seconds}
if sample:
    watcher.join()
    top = max(samples)  # the sample of the most resident memory
    row.update(in_use=top[1] - base_heap[0], free=top[2] - base_heap[1],
               mapped=top[3] - base_heap[2])
print(json.dumps(row))
"""
# name -> (runtime fields, or None for the other checkout's defaults; environment)
VARIANTS = {
    "default": ({}, {}),
    "64 sentences a batch": ({"batch_size": 64}, {}),
    "one batch": ({"inter_threads": 1}, {}),
    "one batch, unpacked": ({"inter_threads": 1, "pack_weights": False}, {}),
    "one batch, unpacked, MKL products": (
        {"inter_threads": 1, "pack_weights": False},
        {"TRANSFORMER_CPU_PRODUCTS": "mkl"},
    ),
}


def one(
    src: Path, model: str, text: Path, beam: int, runtime: dict | None, env: dict, heap: bool
) -> dict:
    arguments = [model, str(text), str(beam), json.dumps(runtime), "1" if heap else "0"]
    return child_json(["-c", CHILD, *arguments], src, f"{model}, beam {beam}, {runtime}", env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True, help="one sentence a line (.gz read too)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--old", type=Path, help="another checkout's src folder")
    parser.add_argument("--old-model", help="the model as that code reads it (default: --model)")
    parser.add_argument(
        "--heap", action="store_true",
        help="also sample the C library's heap (glibc) every 2 ms: in use and held free at the "
        "sample of the most resident memory (the sampling slows the pass)",
    )  # fmt: skip
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.heap and not hasattr(ctypes.CDLL(None), "mallinfo2"):
        sys.exit("--heap reads glibc's mallinfo2 (glibc 2.33 or later); this C library lacks it")
    opener = gzip.open if args.input.endswith(".gz") else open
    with opener(args.input, "rt", encoding="utf-8") as f:
        text = f.read()
    src, model = HERE.parent / "src", str(Path(args.model).resolve())
    runs: list[tuple[str, Path, str, dict | None, dict]] = [
        (name, src, model, runtime, env) for name, (runtime, env) in VARIANTS.items()
    ]
    if args.old:
        old_model = str(Path(args.old_model or args.model).resolve())
        runs.append((f"old ({args.old})", args.old.resolve(), old_model, None, {}))
    results: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as folder:  # the input as plain text, for every child
        text_file = Path(folder, "input.txt")
        text_file.write_text(text, encoding="utf-8")
        for _ in range(args.rounds):
            for beam in (int(b) for b in args.beams.split(",")):
                for name, code, model, runtime, env in runs:
                    row = one(code, model, text_file, beam, runtime, env, args.heap)
                    results.setdefault((name, beam), []).append(row)
                    print(name, beam, row, flush=True)
    heap_columns = (
        " | at the most resident sample: heap in use, held free, mapped (MB, least-most)"
        if args.heap else ""
    )  # fmt: skip
    lines = [
        f"`python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`", "",
        f"{cpu_name()}, 2 threads, {args.rounds} rounds, each row a fresh process; peak MB "
        "above the process before the model was loaded"
        + (", and the C library's heap above it then" if args.heap else "") + ".", "",
        f"| search | variant | peak MB (least-most) | seconds (fastest){heap_columns} |",
        "|---|---|---|---|" + ("---|" if args.heap else ""),
    ]  # fmt: skip
    for (name, beam), rows in results.items():
        peaks = sorted(r["peak"] for r in rows)
        fastest = min(r["seconds"] for r in rows)
        search = "greedy" if beam == 1 else f"beam {beam}"
        row = f"| {search} | {name} | {peaks[0]:.0f}-{peaks[-1]:.0f} | {fastest:.2f} |"
        if args.heap:
            row += (
                " "
                + ", ".join(
                    f"{min(r[k] for r in rows):.0f}-{max(r[k] for r in rows):.0f}"
                    for k in ("in_use", "free", "mapped")
                )
                + " |"
            )
        lines.append(row)
    publish(lines, args.markdown)


if __name__ == "__main__":
    main()
