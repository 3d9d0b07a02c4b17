"""Follow the data through translate, train and serve: which modules each path enters, in order.

    .venv/bin/python benchmarks/walks.py [--keep FOLDER]

Trains a tiny number-words model for 4 steps (the train walk), translates one sentence with it
(the translate walk) and sends one request to the server's /translate in-process (the serve
walk), with a profile hook that records every call into a module of the package. Calls inside
the network (``transformer.model.*``) are left out: a forward pass runs the layers in a loop on
purpose. Consecutive calls in one module count once; a module entered again after the walk left
it is a return (loops over pairs and steps repeat them, so compare the same walk before and after
a change). Prints, for each walk, the modules entered, how often, the number of returns, and the
distinct caller -> callee pairs of modules.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import runpy
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

PACKAGE = "transformer."
NETWORK = "transformer.model."


class Walk:
    """The sequence of package modules entered, consecutive repeats collapsed."""

    def __init__(self) -> None:
        self.modules: list[str] = []
        self.edges: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def hook(self, frame, event, arg):  # noqa: ARG002 (the profile hook's signature)
        if event != "call" or frame.f_code.co_name == "<module>":  # an import, not the walk
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(PACKAGE) or module.startswith(NETWORK):
            return
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        with self.lock:
            if caller.startswith(PACKAGE) and caller != module:
                self.edges.add((caller, module))
            if not self.modules or self.modules[-1] != module:
                self.modules.append(module)

    @contextlib.contextmanager
    def recording(self):
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]


def run_cli(*argv: str) -> None:
    sys.argv = ["transformer", *argv]
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
        runpy.run_module("transformer", run_name="__main__", alter_sys=False)


def serve_once(model: Path) -> Walk:
    from fastapi.testclient import TestClient

    from transformer.config import RuntimeConfig
    from transformer.inference.engine import load_torch_engine
    from transformer.serve.app import create_app

    engine = load_torch_engine(model, runtime=RuntimeConfig(device="cpu"))
    walk = Walk()
    with walk.recording(), TestClient(create_app(engine)) as client:
        answer = client.post("/translate", json={"sentences": ["forty-two"]})
        assert answer.status_code == 200, answer.text
    return walk


def report(name: str, walk: Walk) -> None:
    entries = Counter(walk.modules)
    returns = len(walk.modules) - len(entries)
    print(
        f"\n## {name}: {len(entries)} modules, {len(walk.modules)} entries, {returns} returns, "
        f"{len(walk.edges)} distinct calls from one module into another"
    )
    for module, count in entries.most_common():
        print(f"  {count:4d}  {module.removeprefix(PACKAGE)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="train into this folder instead of a temporary")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = (args.keep or Path(tmp)) / "walk-model"
        train = Walk()
        with train.recording():
            run_cli(
                "train", "--preset", "tiny", "--corpus", "numbers", "--numbers_max", "999",
                "--numbers_train", "400", "--numbers_valid", "20", "--numbers_test", "30",
                "--vocab_size", "80", "--max_tokens", "800", "--max_positions", "48",
                "--warmup_steps", "2", "--max_steps", "4",
                "--validate_every", "2", "--save_every", "2", "--bleu_sentences", "4",
                "--out", str(model), "--threads", "1", "--quiet",
            )  # fmt: skip
        source = Path(tmp) / "src.txt"
        source.write_text("forty-two\n")
        translate = Walk()
        with translate.recording():
            run_cli("translate", str(model), "-i", str(source), "-o", str(Path(tmp) / "out.txt"))
        serve = serve_once(model)
        for name, walk in (("train", train), ("translate", translate), ("serve", serve)):
            report(name, walk)


if __name__ == "__main__":
    main()
