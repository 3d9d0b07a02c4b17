"""The commands that train and describe models: info, train, demo, average."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jsonargparse import ArgumentParser

from ..config import RunConfig, builtin_configs, load_config
from ..errors import UserError
from .options import checkpoint_option


def info_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", nargs="?", help="a model directory (or one of its checkpoint "
                   "folders) to describe; without it, the model the options describe")  # fmt: skip
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")
    checkpoint_option(p)


def info_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..export.folder import is_export, read_export
    from ..inspect.info import describe
    from ..model_dir.checkpoints import read_config, resolve_checkpoint

    if ns.model_dir is None:
        print(describe(load_config(None, given).model))
        return
    if given.get("model"):
        raise UserError("give MODEL_DIR or --model.* options, not both")
    path = Path(ns.model_dir)
    if is_export(path):  # a CTranslate2 export keeps the config it was made from
        print(f"{path} (CTranslate2 export)\n{describe(read_export(path).config.model)}")
        return
    folder = resolve_checkpoint(path, ns.checkpoint)
    print(f"{folder}\n{describe(read_config(folder).model)}")


def train_options(p: ArgumentParser) -> None:
    p.add_argument("--config", help=f"a YAML file, or a built-in config: {builtin_configs()}")
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")
    p.add_argument("--out", help="model directory (default: runs/CORPUS-SRC-TGT)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def train_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..training.loop import train

    config, out = run_config(ns, given)
    result = train(config, out, resume=ns.resume, overwrite=ns.overwrite, progress=not ns.quiet)
    if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 speaks for the job
        return
    early = f" (stopped early: train.patience {config.train.patience})" if (
        result.stopped_early) else ""  # fmt: skip
    if result.steps_here == 0:
        why = "stopped early (train.patience)" if result.stopped_early else (
            "already reached its limits")  # fmt: skip
        print(f"nothing to train: the run in {out} had {why} at step {result.step} (raise "
              "--max_steps, --max_epochs, --max_minutes or --patience to go on)")  # fmt: skip
    elif result.first_step:
        print(f"trained {_steps(result.steps_here, 'more ')} (from step {result.first_step} to "
              f"{result.step}){early}; model directory: {out}")  # fmt: skip
    else:
        print(f"trained {_steps(result.step)} in {result.seconds:.0f} s{early}; model directory: "
              f"{out}")  # fmt: skip


def _steps(n: int, more: str = "") -> str:
    return f"{n:,} {more}step{'' if n == 1 else 's'}"


def run_config(ns: argparse.Namespace, given: dict[str, dict]) -> tuple[RunConfig, Path]:
    """The run's config (--config, or the saved one on --resume, with the options on top) and
    its model directory (``model_dir.runs.run_config``)."""
    from ..model_dir.runs import run_config as of_run

    return of_run(ns.config, ns.out, ns.resume, given)


def demo_options(p: ArgumentParser) -> None:
    from ..demo import DEMOS

    p.add_argument("--corpus", default="numbers", choices=list(DEMOS),
                   help="numbers: en->fr number words, 4 minutes; tatoeba-fr-en: French to "
                   "English everyday sentences, 60 minutes")  # fmt: skip
    p.add_argument("--out", default=None, help="model directory (a run the demo made there "
                   "is replaced; any other run is refused; default: runs/numbers-en-fr or "
                   "runs/fr-en)")  # fmt: skip
    p.add_argument("--data_dir", default=None, help="a local copy of the corpus (tatoeba-fr-en: "
                   "the folder holding tatoeba/fra-eng.zip); default: download it")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def demo_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..demo import run_demo

    overrides: dict[str, dict] = {"runtime": given.get("runtime", {})}
    if ns.data_dir is not None:
        overrides["data"] = {"data_dir": ns.data_dir}
    out = Path(ns.out) if ns.out is not None else None
    run_demo(out, progress=not ns.quiet, overrides=overrides, corpus=ns.corpus)


def average_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", help="model directory")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints")


def average_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..model_dir.checkpoints import average_last

    folder = average_last(Path(ns.model_dir), ns.last)
    print(f"averaged the last {ns.last} checkpoints into {folder}")
