"""The commands that train and describe models: info, train, demo, average."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from jsonargparse import ArgumentParser

from ..config import RunConfig, build_config, builtin_configs, load_config
from ..errors import UserError


def _info_options(p: ArgumentParser) -> None:
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")


def _info(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..inspect.info import describe

    print(describe(load_config(None, given).model))


def _train_options(p: ArgumentParser) -> None:
    p.add_argument("--config", help=f"a YAML file, or a built-in config: {builtin_configs()}")
    p.add_argument("--model.preset", help="tiny, small, base (default) or big")
    p.add_argument("--out", help="model directory (default: runs/CORPUS-SRC-TGT)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _train(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..training.loop import train

    config, out = run_config(ns, given)
    result = train(config, out, resume=ns.resume, overwrite=ns.overwrite, progress=not ns.quiet)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 speaks for the job
        print(f"trained {result.step} steps in {result.seconds:.0f} s; model directory: {out}")


def run_config(ns: argparse.Namespace, given: dict[str, dict]) -> tuple[RunConfig, Path]:
    """The run's config (--config, or the saved one on --resume, with the options on top) and
    its model directory."""
    from ..model_dir import check_replaceable
    from ..training.rundir import RunDir

    data = given.get("data", {})
    if "src" in data and "corpus" not in data:
        data["corpus"] = None  # files given: no named corpus
    if ns.resume and ns.config is None:
        if ns.out is None:
            raise UserError("--resume needs --out DIR (the run to continue)")
        check_replaceable(ns.out, "run")  # before its config is read (train checks it again)
        base = RunDir(ns.out).saved_config().to_dict()
        config = build_config(_merged(base, given), f"{ns.out} with the options")
    else:
        config = load_config(ns.config, given)
    if ns.out is not None:
        return config, Path(ns.out)
    d = config.data
    return config, Path("runs") / f"{d.corpus or 'custom'}-{d.src_lang}-{d.tgt_lang}"


def _merged(values: dict, given: dict) -> dict:
    return {s: {**values.get(s, {}), **given.get(s, {})} for s in {*values, *given}}


def _demo_options(p: ArgumentParser) -> None:
    p.add_argument("--out", default="runs/numbers-en-fr", help="model directory (a demo run there "
                   "is replaced; any other run is refused)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _demo(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..demo import run_demo

    run_demo(Path(ns.out), progress=not ns.quiet, overrides={"runtime": given.get("runtime", {})})


def _average_options(p: ArgumentParser) -> None:
    p.add_argument("model_dir", help="model directory")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints")


def _average(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..training.average import average_last

    folder = average_last(Path(ns.model_dir), ns.last)
    print(f"averaged the last {ns.last} checkpoints into {folder}")
