"""Every speed table of docs/benchmarks.md in one command, written to one file.

    .venv/bin/pip install -e '.[ct2,bench]'      # ctranslate2, and transformers for Marian
    .venv/bin/python benchmarks/speed_tables.py --demo runs/numbers-en-fr \\
        --multi30k runs/multi30k-de-en          # about an hour on 2 cores

One after the other, each table in fresh processes, the engines of a table interleaved and the
fastest of ``--rounds`` passes kept (the scripts' own rules):
- ``translate_speed.py --size demo|small|opus-mt``: random models of the three sizes
  (sizes.py), fixed 26-step outputs, greedy and beam 4, on 2 and then 1 thread(s): ours,
  CTranslate2 fp32 and int8, ``MarianMTModel.generate``;
- ``translate_speed.py --model MULTI30K --settings run``: a trained model on its test split
  (test2016), natural lengths, with each engine's BLEU and the outputs compared to ours;
- the demo's whole command: ``transformer translate DEMO`` against ``transformer translate
  EXPORT --engine ctranslate2`` (the same model exported in fp32) on 3,000 numbers, greedy and
  beam 4, start-up included, the two commands in turn;
- ``train_speed.py --no-compile``: ours against ``nn.Transformer``, training the ``small``
  preset (fp32; bf16 too on a CPU with native bf16).

``--only`` picks some of them (``opus-mt,run,command,train``...). Writes
``results/speed_tables.md`` (``--markdown``).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformer.config.files import build_config
from transformer.data.numbers import number_pairs
from transformer.data.readers import read_lines

HERE = Path(__file__).parent
RESULTS = HERE / "results"
SIZES = ("demo", "small", "opus-mt")
ENGINES = "torch,ct2-float32,ct2-int8,marian"


def run_script(script: str, args: list[str], out: Path) -> str:
    """One benchmark script with ``--markdown``/``--report`` ``out``; its tables."""
    flag = "--report" if script == "train_speed.py" else "--markdown"
    command = [sys.executable, str(HERE / script), *args, flag, str(out)]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    return out.read_text()


def demo_numbers(demo: Path) -> list[str]:
    """The 3,000 numbers (English, seeded) that the demo's whole-command table translates."""
    config = build_config(json.loads((demo / "config.json").read_text()), str(demo))
    numbers = random.Random(0).sample(range(config.data.numbers_max + 1), 3000)
    return [source for source, _ in number_pairs(config.data, numbers)]


def diagnostic_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments a diagnostic script shares: the model, its sentences (``sentences``), the
    search, the rounds and where the table goes."""
    parser.add_argument("--model", type=Path, default=Path("runs/numbers-en-fr"))
    parser.add_argument("--input", type=Path, help="sentences, one a line (.gz too); "
                        "default: the demo's 3,000 numbers")  # fmt: skip
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences (0: all)")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the table here")


def sentences(args: argparse.Namespace) -> list[str]:
    """A diagnostic script's sentences: ``--input`` (one a line, .gz too) or the demo's 3,000
    numbers for ``--model``, the first ``--limit`` of them (0: all)."""
    lines = read_lines(args.input) if args.input else demo_numbers(args.model)
    return lines[: args.limit] if args.limit else lines


def publish(table: str, markdown: Path | None) -> None:
    """Prints a script's table, and writes it to ``markdown`` if given."""
    print(table)
    if markdown:
        markdown.write_text(table)


def whole_command(demo: Path, rounds: int, work: Path) -> str:
    """The demo's ``transformer translate`` against ``--engine ctranslate2`` on 3,000 numbers."""
    source = work / "numbers.en"
    source.write_text("".join(f"{s}\n" for s in demo_numbers(demo)))
    export = work / "export"
    cli = [sys.executable, "-m", "transformer"]
    subprocess.run([*cli, "export", str(demo), "--to", "ctranslate2", str(export)], check=True)
    commands = {
        "ours": [*cli, "translate", str(demo)],
        "CTranslate2 fp32": [*cli, "translate", str(export), "--engine", "ctranslate2"],
    }
    lines = [f"The demo model ({demo}), 3,000 numbers, whole `transformer translate` command "
             f"(start-up included), 2 threads, the fastest of {rounds} runs, the two in turn:",
             "", "| search | ours | CTranslate2 fp32 | ours ÷ CTranslate2 (speed) |",
             "|---|---|---|---|"]  # fmt: skip
    for beam in (1, 4):
        best = dict.fromkeys(commands, float("inf"))
        outputs = {}
        for _ in range(rounds):
            for name, command in commands.items():
                start = time.perf_counter()
                done = subprocess.run(
                    [*command, "--decode.beam_size", str(beam), "--runtime.threads", "2",
                     "--input", str(source)], check=True, capture_output=True, text=True,
                )  # fmt: skip
                best[name] = min(best[name], time.perf_counter() - start)
                outputs[name] = done.stdout.splitlines()
        same = sum(a == b for a, b in zip(*outputs.values(), strict=True))
        ours, ct2 = best.values()
        search = "greedy" if beam == 1 else f"beam {beam}"
        equal = f"outputs equal: {same} of 3,000"
        lines.append(f"| {search} | {ours:.2f} s | {ct2:.2f} s | {ct2 / ours:.2f} ({equal}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, help="the demo's model directory")
    parser.add_argument("--multi30k", type=Path, help="a trained Multi30k model directory")
    parser.add_argument("--rounds", type=int, default=3, help="passes per row; the fastest counts")
    parser.add_argument("--threads", default="2,1")
    parser.add_argument("--only", help="some of: demo,small,opus-mt,run,command,train")
    parser.add_argument("--markdown", type=Path, default=RESULTS / "speed_tables.md")
    args = parser.parse_args()
    parts = args.only.split(",") if args.only else [*SIZES, "run", "command", "train"]
    sections = [f"`python benchmarks/speed_tables.py {' '.join(sys.argv[1:])}`\n"]
    with tempfile.TemporaryDirectory(prefix="speed-tables-") as tmp:
        work = Path(tmp)
        rounds = ["--rounds", str(args.rounds)]
        for size in [s for s in SIZES if s in parts]:
            sections.append(f"## Fixed lengths, {size} size\n")
            sections.append(run_script("translate_speed.py", [
                "--size", size, "--settings", "fixed", "--engines", ENGINES,
                "--threads", args.threads, *rounds], work / f"{size}.md"))  # fmt: skip
        if "run" in parts and args.multi30k:
            sections.append(f"## A trained model on its test split ({args.multi30k})\n")
            sections.append(run_script("translate_speed.py", [
                "--model", str(args.multi30k), "--settings", "run", "--engines", ENGINES,
                "--threads", args.threads, *rounds], work / "run.md"))  # fmt: skip
        if "command" in parts and args.demo:
            sections.append("## The demo, whole command\n")
            sections.append(whole_command(args.demo, args.rounds, work))
        if "train" in parts:
            sections.append("## Training, ours against nn.Transformer\n")
            sections.append(run_script("train_speed.py", [
                "--no-compile", "--threads", "2", "--rounds", str(max(args.rounds, 5))],
                work / "train.md"))  # fmt: skip
    args.markdown.parent.mkdir(parents=True, exist_ok=True)
    args.markdown.write_text("\n".join(sections))
    print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
