"""The small building blocks every layer uses: layer normalisation, the feed-forward net and
dropout.

"Add & norm" itself is written out in the encoder and decoder layers, where it reads like the
figure: ``x = norm(x + dropout(sublayer(x)))``.

Shapes: B batch, T sequence length, D model width, F feed-forward width (d_ff).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .linear import Linear


def layer_norm_reference(x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> Tensor:
    """Layer normalisation in the notes' four steps, over the last dim: (..., D) -> (..., D)."""
    mean = x.mean(dim=-1, keepdim=True)  # step 1: μ
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # step 2: σ² (divide by D, not D - 1)
    x_hat = (x - mean) / torch.sqrt(var + eps)  # step 3: normalise
    return gamma * x_hat + beta  # step 4: scale and shift


class LayerNorm(nn.Module):
    """Layer normalisation (Ba et al. 2016): y = γ · (x − μ) / √(σ² + ε) + β over the last dim.

    γ (``gamma``) starts at 1 and β (``beta``) at 0, both learned; ε keeps the division finite.
    The forward pass uses PyTorch's fused kernel (7% faster training steps on CPU for the
    ``small`` preset); it equals ``layer_norm_reference`` and ``torch.nn.LayerNorm`` (tested).
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """(..., D) -> (..., D)."""
        return F.layer_norm(x, self.gamma.shape, self.gamma, self.beta, self.eps)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (§5.4): in training each element is zeroed with probability p and the
    rest are scaled by 1 / (1 − p), so that the expectation stays x; in eval mode, nothing.

    On a CPU the mask is drawn four times faster. ``F.dropout`` draws one random number per
    element (``bernoulli_``, about 2.5 ns each): 9% of a ``small`` training step on 2 threads
    (docs/speed.md). Here one 64-bit random word gives four elements 15 random bits each, so p
    is rounded to a multiple of 1/32768 (0.1 -> 0.100006) and the kept elements are scaled by
    the inverse of what they keep exactly. Elsewhere (a GPU draws fast) ``F.dropout`` as it is.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x  # a decoding step calls it 4 times a layer: no call into F.dropout
        if x.device.type != "cpu" or self.p >= 1.0:
            return super().forward(x)
        return x * dropout_mask(x, self.p)


DROPOUT_LEVELS = 32768  # 15 random bits an element


def dropout_mask(x: Tensor, p: float) -> Tensor:
    """0 where an element of x is dropped (probability ``round(p · 32768) / 32768``), else
    1 / (the probability of keeping it); x's shape and dtype."""
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # [0, 2⁶³)
    bits = words.view(torch.int16)[:n].view(x.shape) & (DROPOUT_LEVELS - 1)  # uniform [0, 2¹⁵)
    dropped = round(p * DROPOUT_LEVELS)
    keep = bits >= dropped  # (…) probability (32768 − dropped) / 32768
    return keep.to(x.dtype).mul_(DROPOUT_LEVELS / (DROPOUT_LEVELS - dropped))


# The feed-forward activations (ModelConfig.activation). ReLU is the paper's (§3.3); GELU
# (Hendrycks & Gimpel 2016, the exact erf form) and SiLU/swish, x·σ(x) (Ramachandran et al.
# 2017), are what Marian-trained OPUS-MT models use ("swish" in their config.json).
ACTIVATION_FUNCTIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "swish": F.silu}
# Their in-place forms, where PyTorch has one.
IN_PLACE = {F.relu: F.relu_, F.silu: lambda x: F.silu(x, inplace=True)}


def activated(activation: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """activation(x), written over x where no gradient is kept and the activation has an
    in-place form: in inference a new (rows, d_ff) tensor costs more than its arithmetic, the
    first write to each of its pages (at Multi30k's size, 2.9 ms for the ReLU of an encoder
    batch's 1,344 positions; translating test2016 greedily, 1.04× faster; docs/speed.md)."""
    in_place = None if torch.is_grad_enabled() else IN_PLACE.get(activation)
    return activation(x) if in_place is None else in_place(x)


class FeedForward(nn.Module):
    """Position-wise feed-forward network (§3.3): FFN(x) = ReLU(x·W1 + b1)·W2 + b2.

    Applied to every position separately and identically; D -> F -> D (512 -> 2048 -> 512).
    ``activation`` replaces the ReLU by another of ``ACTIVATION_FUNCTIONS``.
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.linear1 = Linear(d_model, d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATION_FUNCTIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, D)."""
        hidden = self.dropout(activated(self.activation, self.linear1(x)))  # (B, T, F)
        return self.linear2(hidden)  # (B, T, D)
