"""The command that brings a Hugging Face model in: import (its way out is ``export --to
huggingface``, translating.py)."""

from __future__ import annotations

import argparse

from jsonargparse import ArgumentParser


def import_options(p: ArgumentParser) -> None:
    p.add_argument("source", help="a Marian model's folder, or a Hugging Face Hub name such as "
                   "Helsinki-NLP/opus-mt-fr-en (needs pip install 'transformer[hub]')")  # fmt: skip
    p.add_argument("out", help="the model directory to write: new, empty, or an earlier import")


def import_command(ns: argparse.Namespace, given: dict[str, dict]) -> None:
    from ..hub.marian_import import import_marian

    info = import_marian(ns.source, ns.out, **given.get("decode", {}))
    model = info.config.model
    languages = info.config.data.src_lang, info.config.data.tgt_lang
    print(f"imported {ns.source} into {ns.out}: {model.n_encoder_layers}+{model.n_decoder_layers} "
          f"layers, d_model {model.d_model}, {model.tgt_vocab_size - 1} target pieces, "
          f"{'-'.join(languages)}; translate with: transformer translate {ns.out}")  # fmt: skip
