"""Re-runs a probe of bad input against a freshly trained tiny model: user files that a command
must not lose, damaged and extreme files from outside, extreme numbers on the command line, and
the server's cost budget. Prints a markdown table, one row per case: the exit code (or HTTP
status), whether stderr was one line or held a traceback, whether every file the user had is
byte-identical afterwards, and the verdict.

    .venv/bin/python benchmarks/trust_probe.py [--output benchmarks/results/trust_probe.md]

Everything happens in a temporary folder, deleted after: a tiny number-words model (60 steps,
seconds), a copy of it per case, an export (needs ctranslate2) and a random Hugging Face Marian
folder (needs transformers; tests/marian_models.py). Every command runs as a user runs it,
``python -m transformer ...`` in a child process (seconds each), the server
as ``transformer serve MODEL --port 0`` on loopback: 7 to 13 minutes on a shared 2-core CPU.

A case is fine when there is no traceback, every file that was there before is still there and
byte-identical, a failure is exit 2 with one line on stderr (the server: not 500, not 504),
and a case that must be refused (the input is wrong) is not answered with exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # helpers.TINY_NUMBERS, marian_models
DEEP = "[" * 100_000 + "]" * 100_000


@dataclass
class Outcome:
    code: int  # exit code, or HTTP status
    lines: int  # stderr lines (HTTP: 1)
    traceback: bool
    intact: bool
    said: str  # the last stderr line (HTTP: the body), shortened


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != ".lock"
    }


def transformer(*args: str, timeout: float = 300) -> tuple[int, list[str]]:
    """``python -m transformer ARGS``: (exit code, stderr lines)."""
    done = subprocess.run([sys.executable, "-m", "transformer", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
    return done.returncode, done.stderr.splitlines()


class Probe:
    """The temporary folder, the trained model and what the cases share."""

    def __init__(self, root: Path) -> None:
        from transformer.training.loop import train

        from helpers import TINY_NUMBERS, train_config

        self.root, self.n = root, 0
        self.model = root / "model"
        args = [*TINY_NUMBERS, "--max_steps", "60", "--save_every", "30", "--validate_every",
                "30", "--bleu_sentences", "0", "--best_metric", "loss"]  # fmt: skip
        train(train_config(args), self.model, progress=False)
        self.export = root / "export"
        if transformer("export", str(self.model), "--to", "ctranslate2", str(self.export))[0]:
            self.export = None
        try:
            import marian_models

            self.marian = marian_models.marian_folder(root / "marian")
        except ImportError:
            self.marian = None

    def home(self) -> Path:
        """A new user's folder: M (a copy of the model), OTHER (another), in.txt, ref.txt."""
        self.n += 1
        home = self.root / f"case{self.n}"
        for name in ("M", "OTHER"):
            shutil.copytree(self.model, home / name, ignore=shutil.ignore_patterns(".lock"))
        (home / "in.txt").write_text("twelve\nforty two\n")
        (home / "ref.txt").write_text("douze\nquarante-deux\n")
        return home


# ------------------------------------------------------------------------------- damage
def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    values = json.loads(path.read_text())
    change(values)
    path.write_text(json.dumps(values))


def model_keys(**changes: object) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        m = home / "M"
        for path in [m / "config.json", *m.glob("checkpoints/step_*/config.json")]:
            edit_json(path, lambda v: v["model"].update(changes))

    return damage


def weights(how: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        for file in (home / "M").glob("checkpoints/step_*/model.safetensors"):
            state = load_file(file)
            for tensor in state.values():
                if how == "nan":
                    tensor.fill_(float("nan"))
                else:
                    tensor.view(-1)[::7] = float("inf") if how == "inf" else 3e38
            save_file(state, file, metadata={"format": "pt"})

    return damage


def best_elsewhere(home: Path) -> None:
    index = home / "M" / "checkpoints" / "index.json"
    other = json.loads((home / "OTHER" / "checkpoints" / "index.json").read_text())["best"]
    edit_json(index, lambda v: v.update(best=str(home / "OTHER" / "checkpoints" / other)))


def deep(name: str) -> Callable[[Path], None]:
    """``name`` (a glob under M) nested 100,000 levels deep."""

    def damage(home: Path) -> None:
        for path in (home / "M").glob(name):
            path.write_text(DEEP)

    return damage


def translate(*extra: str) -> Callable[[Path], list[str]]:
    return lambda home: ["translate", str(home / "M"), "-i", str(home / "in.txt"), *extra]


def best_file(home: Path, name: str) -> str:
    return str(next((home / "M" / "checkpoints").glob("step_*")) / name)


# --------------------------------------------------------------------------------- cases
@dataclass
class Case:
    group: str
    name: str
    damage: Callable[[Path], None] | None
    args: Callable[[Path], list[str]]
    refuse: bool  # True: exit 0 is wrong


def cases(probe: Probe) -> list[Case]:
    found = [
        Case("files lost", "explain --html M/config.json --force", None,
             lambda h: ["explain", str(h / "M"), "twelve", "--html", str(h / "M" / "config.json"),
                        "--force"], True),
        Case("files lost", "explain --html M/checkpoints/index.json --force", None,
             lambda h: ["explain", str(h / "M"), "twelve", "--html",
                        str(h / "M" / "checkpoints" / "index.json"), "--force"], True),
        Case("files lost", "explain --html (a checkpoint's model.safetensors) --force", None,
             lambda h: ["explain", str(h / "M"), "twelve", "--html",
                        best_file(h, "model.safetensors"), "--force"], True),
        Case("files lost", "compare --out R, R an earlier report holding my-notes.md",
             lambda h: (transformer("compare", str(h / "M"), "--out", str(h / "R")),
                        (h / "R" / "my-notes.md").write_text("mine\n")),
             lambda h: ["compare", str(h / "M"), "--out", str(h / "R")], False),
        Case("files lost", "compare --out inside the run's checkpoints/", None,
             lambda h: ["compare", str(h / "M"), "--out", str(h / "M" / "checkpoints" / "R")],
             True),
        Case("damaged file", "the checkpoints' config.json nested 100,000 deep",
             deep("checkpoints/step_*/config.json"), translate(), True),
        Case("damaged file", "checkpoints/index.json nested 100,000 deep (falls back, warns)",
             deep("checkpoints/index.json"), translate(), False),
        Case("damaged file", "max_positions 10^12", model_keys(max_positions=10**12),
             translate(), True),
        Case("damaged file", "d_model 10^6", model_keys(d_model=10**6), translate(), True),
        Case("damaged file", "n_encoder_layers 10^7", model_keys(n_encoder_layers=10**7),
             translate(), True),
        Case("damaged file", "index.json best: another model's checkpoint, absolute",
             best_elsewhere, translate(), True),
        Case("damaged file", "weights all NaN", weights("nan"), translate(), True),
        Case("damaged file", "weights every 7th +inf", weights("inf"), translate(), True),
        Case("damaged file", "weights every 7th 3e38, greedy", weights("huge"), translate(), True),
        Case("damaged file", "weights every 7th 3e38, beam 4", weights("huge"),
             translate("--decode.beam_size", "4"), True),
        Case("damaged file", "weights every 7th 3e38, sampling", weights("huge"),
             translate("--decode.sampling"), True),
        Case("damaged file", "weights every 7th 3e38, score", weights("huge"),
             lambda h: ["score", str(h / "M"), "--src", str(h / "in.txt"), "--ref",
                        str(h / "ref.txt")], True),
        Case("command line", "--decode.temperature 1e-300 --decode.sampling", None,
             translate("--decode.temperature", "1e-300", "--decode.sampling"), False),
        Case("command line", "--decode.temperature 1e300 --decode.sampling", None,
             translate("--decode.temperature", "1e300", "--decode.sampling"), False),
        Case("command line", "--decode.top_p 1e-300 --decode.sampling", None,
             translate("--decode.top_p", "1e-300", "--decode.sampling"), False),
        Case("command line", "--decode.length_penalty 1e300", None,
             translate("--decode.length_penalty", "1e300"), False),
        Case("command line", "--decode.beam_size 10^9", None,
             translate("--decode.beam_size", "1000000000"), True),
    ]  # fmt: skip
    if probe.export is not None:
        export = probe.export

        def marker(change: Callable[[Path], None]) -> Callable[[Path], None]:
            def damage(home: Path) -> None:
                shutil.copytree(export, home / "E")
                change(home / "E" / "transformer-export.json")

            return damage

        ct2 = ["--engine", "ctranslate2"]
        found += [
            Case("damaged file", "export marker nested 100,000 deep",
                 marker(lambda p: p.write_text(DEEP)),
                 lambda h: ["translate", str(h / "E"), "-i", str(h / "in.txt"), *ct2], True),
            Case("damaged file", "export marker cut in half",
                 marker(lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])),
                 lambda h: ["info", str(h / "E")], True),
        ]  # fmt: skip
    if probe.marian is not None:
        marian = probe.marian

        def hf(change: Callable[[Path], None]) -> Callable[[Path], None]:
            def damage(home: Path) -> None:
                shutil.copytree(marian, home / "hf")
                change(home / "hf")

            return damage

        def hf_key(name: str, **changes: object) -> Callable[[Path], None]:
            return hf(lambda f: edit_json(f / name, lambda v: v.update(changes)))

        def imported_notes(home: Path) -> None:
            hf(lambda f: None)(home)
            transformer("import", str(home / "hf"), str(home / "OUT"))
            (home / "OUT" / "NOTES.md").write_text("mine\n")
            (home / "OUT" / "test.hyp").write_text("mine\n")

        def import_then_translate(h: Path) -> list[str]:
            transformer("import", str(h / "hf"), str(h / "OUT"))
            return ["translate", str(h / "OUT"), "-i", str(h / "in.txt")]

        to_out = lambda h: ["import", str(h / "hf"), str(h / "OUT")]  # noqa: E731
        found += [
            Case("files lost", "import into an earlier import holding NOTES.md, test.hyp",
                 imported_notes, to_out, False),
            Case("damaged file", "Marian config.json nested 100,000 deep",
                 hf(lambda f: (f / "config.json").write_text(DEEP)), to_out, True),
            Case("damaged file", "Marian vocab.json nested 100,000 deep",
                 hf(lambda f: (f / "vocab.json").write_text(DEEP)), to_out, True),
            Case("damaged file", "Marian activation_function a list",
                 hf_key("config.json", activation_function=["gelu"]), to_out, True),
            Case("damaged file", "Marian max_position_embeddings 10^8",
                 hf_key("config.json", max_position_embeddings=10**8), to_out, True),
            Case("damaged file", "Marian max_position_embeddings 10^12",
                 hf_key("config.json", max_position_embeddings=10**12), to_out, True),
            Case("damaged file", "Marian d_model 10^6", hf_key("config.json", d_model=10**6),
                 to_out, True),
            Case("damaged file", "Marian num_beams 10^9: import, then translate",
                 hf_key("generation_config.json", num_beams=10**9), import_then_translate,
                 True),
        ]  # fmt: skip
    return found


def run_case(probe: Probe, case: Case) -> Outcome:
    home = probe.home()
    if case.damage:
        case.damage(home)
    args = case.args(home)
    before = snapshot(home)
    code, stderr = transformer(*args)
    after = snapshot(home)
    intact = all(after.get(k) == v for k, v in before.items())
    traceback = any("Traceback" in line for line in stderr)
    return Outcome(
        code,
        len(stderr),
        traceback,
        intact,
        shorten(stderr[-1].replace(f"{home}/", "") if stderr else ""),
    )


def shorten(text: str, width: int = 110) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def fine(outcome: Outcome, refuse: bool, http: bool = False) -> bool:
    if outcome.traceback or not outcome.intact:
        return False
    if http:
        return outcome.code not in (500, 504) and (outcome.code != 200 or not refuse)
    if outcome.code == 0:
        return not refuse
    return outcome.code == 2 and outcome.lines == 1


# ------------------------------------------------------------------------------- server
SERVER_CASES = [
    ("top_p 1e-300 with sampling", {"sentences": ["twelve"], "sampling": True, "top_p": 1e-300},
     False),
    ("top_p 1e-300, repetition_penalty 0.01", {"sentences": ["twelve"], "sampling": True,
     "top_p": 1e-300, "repetition_penalty": 0.01}, False),
    ("64 x 'one', beam 16, min_len 511", {"sentences": ["one"] * 64, "beam_size": 16,
     "min_len": 511}, True),
    ("64 x 'one', beam 16, min_len 47 (the model's limit)", {"sentences": ["one"] * 64,
     "beam_size": 16, "min_len": 47}, True),
    ("64 prefixes of 511 pieces, max_len 1 (over max_body_bytes)", {"sentences": ["one"] * 64,
     "prefix": [" ".join(["un"] * 511)] * 64, "max_len_a": 0, "max_len_b": 1}, True),
    ("64 prefixes of 40 words, beam 16, max_len 1", {"sentences": ["one"] * 64,
     "prefix": [" ".join(["un"] * 40)] * 64, "beam_size": 16, "max_len_a": 0,
     "max_len_b": 1}, True),
    ("64 prefixes of 20 words, max_len 1 (within the budget)", {"sentences": ["one"] * 64,
     "prefix": [" ".join(["un"] * 20)] * 64, "max_len_a": 0, "max_len_b": 1}, False),
]  # fmt: skip


def server_cases(probe: Probe) -> list[tuple[str, Outcome, bool]]:
    home = probe.home()
    before = snapshot(home)
    command = [sys.executable, "-m", "transformer", "serve", str(home / "M"), "--port", "0",
               "--device", "cpu", "--serve.max_cost", "20000"]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    rows = []
    try:
        line = ""
        while "listening on" not in line:
            line = proc.stderr.readline()
            if not line:
                raise SystemExit("the server did not start")
        url = line.rsplit(" ", 1)[1].strip()
        for name, body, refuse in SERVER_CASES:
            request = urllib.request.Request(f"{url}/translate", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})  # fmt: skip
            start = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=90) as response:
                    status, text = response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                status, text = error.code, error.read().decode()
            seconds = time.perf_counter() - start
            outcome = Outcome(status, 1, "Traceback" in text, True, shorten(text))
            rows.append((f"POST /translate: {name} ({seconds:.1f} s)", outcome, refuse))
    finally:
        proc.terminate()
        proc.wait(30)
    intact = all(snapshot(home).get(k) == v for k, v in before.items())
    return [(n, Outcome(o.code, o.lines, o.traceback, intact, o.said), r) for n, o, r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", help="also write the table to this markdown file")
    args = parser.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trust-probe-") as tmp:
        probe = Probe(Path(tmp))
        rows = []
        for case in cases(probe):
            outcome = run_case(probe, case)
            rows.append((case.group, case.name, outcome, fine(outcome, case.refuse)))
            print(f"{case.name}: exit {outcome.code}", file=sys.stderr, flush=True)
        for name, outcome, refuse in server_cases(probe):
            rows.append(("server", name, outcome, fine(outcome, refuse, http=True)))
    table = [
        "| group | case | exit (HTTP status) | stderr | files intact | fine | what it said |",
        "|---|---|---|---|---|---|---|",
    ]
    for group, name, o, ok in rows:
        said = "traceback" if o.traceback else ("one line" if o.lines == 1 else f"{o.lines} lines")
        table.append(f"| {group} | {name} | {o.code} | {said} | {'yes' if o.intact else 'NO'} "
                     f"| {'yes' if ok else 'NO'} | {o.said} |")  # fmt: skip
    good = sum(ok for *_, ok in rows)
    table.append("")
    table.append(f"{len(rows)} cases, {good} fine; {time.perf_counter() - start:.0f} s in all.")
    text = "\n".join(table) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
