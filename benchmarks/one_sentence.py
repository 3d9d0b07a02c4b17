"""Milliseconds per sentence when each sentence is translated alone, as ``serve`` answers a lone
request or ``translate`` a line typed at the terminal: ours against CTranslate2 fp32.

    .venv/bin/python benchmarks/one_sentence.py --model runs/numbers-en-fr --input numbers.txt \\
        [--old /tmp/old/src] [--sentences 200] [--beams 1,4] [--rounds 3] [--markdown F]

Each row is a fresh process on 2 threads: it loads the engine (``load_engine``, the model's own
search settings but the beam size), translates 20 sentences one at a time (start-up work),
then the first ``--sentences`` lines one at a time, ``--rounds`` times; the fastest round
counts. ``torch`` is this checkout's engine; ``--old SRC`` adds another checkout's ``src``
folder (the same engine before a change); ``ctranslate2`` is the model exported in fp32 (made
once in a temporary folder). The rows run in turn in every round of processes (``--repeat``),
and the table gives each one's fastest, and whether its outputs equal this checkout's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import child_json, cpu_name, publish

HERE = Path(__file__).resolve().parent
CHILD = """
import hashlib, json, sys, time
from transformer.config import RuntimeConfig
from transformer.inference import load_engine

model, engine, text, beam, count, rounds = sys.argv[1:7]
lines = open(text, encoding="utf-8").read().splitlines()[: int(count)]
translator = load_engine(model, engine, runtime=RuntimeConfig(threads=2), beam_size=int(beam))
for line in lines[:20]:
    translator.translate([line])
best = float("inf")
for _ in range(int(rounds)):
    start = time.perf_counter()
    outputs = [translator.translate([line]).best[0] for line in lines]
    best = min(best, time.perf_counter() - start)
digest = hashlib.md5("\\n".join(outputs).encode()).hexdigest()
print(json.dumps({"ms": 1000 * best / len(lines), "outputs": digest}))
"""


def one(src: Path, model: str, engine: str, text: str, beam: int, args) -> dict:
    """One fresh process's fastest round."""
    arguments = [model, engine, text, str(beam), str(args.sentences), str(args.rounds)]
    return child_json(["-c", CHILD, *arguments], src, f"{engine} ({src}), beam {beam}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained model directory")
    parser.add_argument("--input", required=True, help="one sentence a line")
    parser.add_argument("--old", type=Path, help="another checkout's src folder")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--rounds", type=int, default=3, help="rounds inside each process")
    parser.add_argument("--repeat", type=int, default=2, help="processes per row, in turn")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    model, src = str(Path(args.model).resolve()), HERE.parent / "src"
    with tempfile.TemporaryDirectory() as folder:
        export = str(Path(folder, "ct2"))
        subprocess.run(
            [sys.executable, "-m", "transformer", "export", model, "--to", "ctranslate2", export],
            check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(src)},
        )  # fmt: skip
        rows = {"ours": (src, model, "torch")}
        if args.old:
            rows = {"ours, before (--old)": (args.old.resolve(), model, "torch"), **rows}
        rows["CTranslate2 fp32"] = (src, export, "ctranslate2")
        found: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.repeat):
            for beam in (int(b) for b in args.beams.split(",")):
                for name, (code, weights, engine) in rows.items():
                    row = one(code, weights, engine, args.input, beam, args)
                    found.setdefault((name, beam), []).append(row)
                    print(name, beam, row, flush=True)
    lines = [
        f"`python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`", "",
        f"{cpu_name()}, 2 threads; {args.sentences} sentences, each translated alone; the "
        f"fastest of {args.rounds} rounds in each of {args.repeat} processes per row, in turn.",
        "", "| search | engine | ms a sentence (fastest; slowest process) | outputs as ours |",
        "|---|---|---|---|",
    ]  # fmt: skip
    for (name, beam), runs in found.items():
        ours = found[("ours", beam)][0]["outputs"]
        fastest = sorted(r["ms"] for r in runs)
        same = "yes" if all(r["outputs"] == ours for r in runs) else "no"
        search = "greedy" if beam == 1 else f"beam {beam}"
        lines.append(f"| {search} | {name} | {fastest[0]:.2f}; {fastest[-1]:.2f} | {same} |")
    publish(lines, args.markdown)


if __name__ == "__main__":
    main()
