"""Validation during training: loss and perplexity on the validation split, and BLEU (with
exact-match accuracy) of greedy translations of its first ``bleu_sentences`` sentences."""

from __future__ import annotations

import math
from dataclasses import replace

import sacrebleu
import torch

from ..config import RunConfig
from ..data.batching import collate, make_batches
from ..inference.translation import translate
from ..model.base import EncoderDecoder
from .chunked_loss import TrainingLoss
from .loss import impossible_tokens


@torch.inference_mode()
def validation_loss(model: EncoderDecoder, prepared, config: RunConfig) -> dict[str, float]:
    """Label-smoothed loss and perplexity (exp of the plain NLL) per target token."""
    model.eval()
    device = next(model.parameters()).device
    loss = nll = torch.zeros((), device=device)
    tokens = torch.zeros((), dtype=torch.long, device=device)
    order = make_batches(prepared.valid, config.train.max_tokens, 0, 0, shuffle=False)
    scored = TrainingLoss(model, config.train.label_smoothing, config.runtime.loss_chunk,
                          impossible_tokens(model))  # fmt: skip
    for indices in order:
        batch = collate([prepared.valid[i] for i in indices]).to(device)
        sums = scored(batch.src, batch.tgt_in, batch.tgt_out)
        loss, nll, tokens = loss + sums.loss, nll + sums.nll, tokens + sums.n_tokens
    loss, nll, tokens = float(loss), float(nll), max(int(tokens), 1)
    return {
        "valid_loss": loss / tokens,
        "valid_nll": nll / tokens,
        "valid_ppl": math.exp(min(nll / tokens, 50)),
    }


def validation_bleu(model: EncoderDecoder, prepared, config: RunConfig) -> dict[str, float]:
    """Greedy translations of a fixed validation subset: sacreBLEU, and exact-match accuracy for
    a corpus of classes (the numbers corpus, whose outputs are short and have one right form;
    on sentences it would be near 0 and mean nothing)."""
    pairs = prepared.valid_pairs[: config.train.bleu_sentences]
    if not pairs:
        return {}
    decode = replace(config.decode, beam_size=1, nbest=1, sampling=False, alignment=False)
    hypotheses = translate(model, prepared.tokenizers, [s for s, _ in pairs], decode).best
    references = [t for _, t in pairs]
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    if not prepared.by_class:
        return {"valid_bleu": bleu}
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return {"valid_bleu": bleu, "valid_exact": exact / len(pairs)}


def validate(model: EncoderDecoder, prepared, config: RunConfig) -> dict[str, float]:
    """All validation metrics; leaves the model in eval mode."""
    metrics = validation_loss(model, prepared, config)
    if config.train.bleu_sentences:
        metrics.update(validation_bleu(model, prepared, config))
    return metrics
