"""Label-smoothed cross-entropy (Vaswani et al. §5.4, Szegedy et al. 2016).

Training compares the softmax output with the target word. With ε = 0 the target is the
notes' one-hot vector and the loss is −log p(correct word). Label smoothing moves ε of the
probability mass from the correct word to a uniform distribution over the vocabulary:

    q = (1 − ε)·one_hot(y) + ε / V,      loss = −Σ_v q_v · log p_v
      = (1 − ε)·(−log p_y) + ε·mean_v(−log p_v)

This is the definition ``torch.nn.functional.cross_entropy(label_smoothing=ε)`` uses (tested).
Padding positions contribute nothing. Tokens the model can never produce (logit −inf: an
imported Marian model's padding row, ``hub/marian_vocab.py``) are left out of the uniform part,
which then spreads over the V' others, so that the loss stays finite; ``impossible_tokens`` finds
them once per model, so a model without any pays nothing for the rule.

Shapes: N target positions (B·T flattened), V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..vocab import PAD_ID


@dataclass
class LossSums:
    """Sums over the non-padding positions of a batch; divide by ``n_tokens`` for means."""

    loss: Tensor  # label-smoothed loss (what is minimised), scalar
    nll: Tensor  # plain negative log-likelihood (for perplexity), scalar
    n_tokens: Tensor  # real target tokens, scalar (a tensor: counting does not stop a GPU)


def impossible_tokens(model: nn.Module) -> Tensor | None:
    """The target ids whose output bias is −inf, (K,), or None when there are none."""
    bias = getattr(getattr(model, "output", None), "bias", None)
    if bias is None:
        return None
    ids = (bias == float("-inf")).nonzero().squeeze(1)  # (K,)
    return ids if ids.numel() else None


def label_smoothed_nll(
    logits: Tensor,
    target: Tensor,
    epsilon: float,
    ignore_index: int = PAD_ID,
    impossible: Tensor | None = None,
) -> LossSums:
    """Label-smoothed negative log-likelihood, summed over real tokens.

    Args:
        logits: unnormalised scores (..., V), e.g. (B, T, V).
        target: correct ids (...), e.g. (B, T); ``ignore_index`` positions are skipped.
        epsilon: label smoothing ε in [0, 1).
        impossible: ids whose logit is always −inf (``impossible_tokens``), left out of the
            smoothing; None: every id may be produced.
    Shape:
        returns scalar sums and the token count.
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1).flatten(0, -2)  # (N, V)
    target = target.flatten()  # (N,)
    keep = target != ignore_index  # (N,) padding is masked, not removed: no device sync
    nll = -log_probs.gather(1, target.clamp(min=0)[:, None]).squeeze(1)  # (N,) −log p_y
    if impossible is None:
        uniform = -log_probs.mean(dim=-1)  # (N,) mean_v −log p_v
    else:  # (N,) mean over the V' possible tokens
        possible = log_probs.size(-1) - impossible.numel()
        uniform = -log_probs.index_fill(1, impossible, 0.0).sum(dim=-1) / possible
    loss = (1.0 - epsilon) * nll + epsilon * uniform  # (N,)
    zero = torch.zeros((), device=loss.device)
    return LossSums(
        loss=torch.where(keep, loss, zero).sum(),
        nll=torch.where(keep, nll, zero).sum(),
        n_tokens=keep.sum(),
    )
