"""``transformer attention``: one sentence through the model, every attention map drawn.

``inspect_sentence`` translates a sentence and re-runs the model on (source, <s> +
translation) to collect the attention weights of every layer and head; ``attention_job`` draws
them (and the positional-encoding plots) into a folder, with an optional HTML report: a
report folder (``transformer-report.json``), built aside and replaced whole, so that a file of
the user's in it is never overwritten (``files.check_replaceable``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..config import DecodeConfig
from ..data.batching import encode_source
from ..data.tokenizer import Tokenizers
from ..errors import UserError
from ..files import mark_folder, replace_folder
from ..inference.engine import TorchEngine
from ..inference.inputs import check_text
from ..inference.search import Stopped
from ..inference.translation import translate
from ..model.base import AttentionMaps, EncoderDecoder
from ..vocab import BOS_ID
from .report import write_html_report
from .trace import check_sentence
from .visualize import save_positional_plots, write_attention_figures


@dataclass
class Inspection:
    """One sentence, its translation, and every attention weight of the forward pass."""

    source: str
    translation: str
    maps: AttentionMaps
    src_labels: list[str]  # source pieces + </s>
    tgt_labels: list[str]  # decoder input: <s> + translation pieces


def inspect_sentence(
    model: EncoderDecoder,
    tokenizers: Tokenizers,
    sentence: str,
    decode: DecodeConfig,
    prefix: str | None = None,
    stopped: Stopped | None = None,
) -> Inspection:
    """Translates ``sentence`` (starting with ``prefix``, if given) and re-runs the model on
    (source, <s> + translation) to collect the attention weights of every layer and head;
    ``stopped(0)``: nobody waits for it any more (the search ends at its next step)."""
    check_text(sentence, "sentence")
    if not sentence.strip():
        raise UserError("the sentence to inspect is empty")
    prefixes = [prefix] if prefix else None
    best = translate(model, tokenizers, [sentence], replace(decode, nbest=1), prefixes,
                     stopped).nbest[0][0]  # fmt: skip
    src_ids = encode_source(tokenizers.src.encode(sentence))[: model.config.max_positions]
    tgt_ids = [BOS_ID, *best.tokens]
    device = next(model.parameters()).device  # the ids go where the weights are (a GPU too)
    src, tgt = torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device)
    maps = model.attention_maps(src, tgt)  # (1, S), (1, T)
    src_labels = [tokenizers.src.id_to_piece(i) for i in src_ids]
    tgt_labels = [tokenizers.tgt.id_to_piece(i) for i in tgt_ids]
    return Inspection(sentence, best.text, maps, src_labels, tgt_labels)


def attention_job(
    engine: TorchEngine,
    sentence: str,
    out: Path,
    layer: int | None,
    head: int | None,
    html_report: bool,
) -> list[str]:
    """What ``transformer attention`` does: translate ``sentence``, draw every attention map
    (or one layer / head) and the positional-encoding plots into ``out``, and optionally the
    HTML report. Returns the lines to show."""
    model = engine.model
    ids = encode_source(engine.tokenizers.src.encode(sentence))
    check_sentence(sentence, ids, model.config.max_positions, "inspect")  # never cut short
    with engine.precision():
        seen = inspect_sentence(model, engine.tokenizers, sentence, engine.decode)
    with replace_folder(out, "report", "--out", {}) as staging:  # replaced whole
        files = write_attention_figures(seen.maps, seen.src_labels, seen.tgt_labels, staging,
                                        layer, head, progress=True)  # fmt: skip
        if model.encodes_positions:
            positions = min(model.config.max_positions, 100)
            files += save_positional_plots(model.width, positions, staging)
        if html_report:
            numbers = {"checkpoint": str(engine.path)}
            write_html_report(staging / "report.html", seen.source, seen.translation, seen.maps,
                              seen.src_labels, seen.tgt_labels, numbers)  # fmt: skip
        mark_folder(staging, "report", format="attention")
    lines = [f"source:      {seen.source}", f"translation: {seen.translation}",
             f"wrote {len(files)} figures (PNG and SVG) to {out}"]  # fmt: skip
    if html_report:
        lines.append(f"HTML report: {out / 'report.html'}")
    return lines
