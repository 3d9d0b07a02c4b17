"""The final linear layer and the label-smoothed loss fused, a chunk of target positions at a time.

``loss.py`` computes the logits Z = H·Wᵀ (N, V), their fp32 log-probabilities (N, V) and, in the
backward pass, two more (N, V) gradients: at V = 32k and 8k target tokens each is 1 GB in fp32,
more than everything else a ``small`` step keeps. Here the N positions go C at a time. For each
chunk the logits, the loss, and the gradient of the summed loss with respect to the logits,

    ∂loss/∂z_v = p_v − (1 − ε)·[v = y] − ε / V        (p = softmax(z); 0 at padding),

which is the derivative of loss.py's (1 − ε)·(−log p_y) + ε·mean_v(−log p_v), are computed,
then ∂loss/∂H = G·W and ∂loss/∂W += Gᵀ·H at once; only one (C, V) block is ever alive. The loss
is a sum, so the backward pass only scales these gradients by the one number that reaches it
(the fused linear cross-entropy of Liger-Kernel, Hsu et al. 2024, works the same way). Equal to
``label_smoothed_nll(H·Wᵀ + b, ...)`` in value and gradient (tests/test_loss_chunked.py), also
with ids whose bias is −inf (an imported model's padding row), which the smoothing leaves out.

Under autocast the products run in the autocast type and the softmax in fp32, as in the plain
path. ``TrainingLoss`` wraps a model and this loss in one module, so that DDP and
``torch.compile`` see the whole training forward pass.

Shapes: B batch, S source length, T target length, N target positions (B·T), C positions per
chunk, D model width, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..device import compiled
from ..model.products import product
from ..vocab import PAD_ID
from .loss import LossSums, label_smoothed_nll


def chunk_loss_and_grad(
    z: Tensor, index: Tensor, epsilon: float, impossible: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The loss of one chunk of logits and its gradient, in fp32 whatever the logits' type.

    Few passes over the (C, V) block, which bound the loss's time (docs/speed.md): one softmax
    gives p, whose largest value (at each row's largest logit, at least 1/V, so never rounded
    to 0) gives log Σ exp z without a separate log-sum-exp, and p becomes the gradient in
    place. On a CPU the softmax is written over z (``_softmax_into``): z is the caller's no
    more. Padding rows are left to the caller. ``TrainingLoss(compile=True)`` compiles this
    function into a few fused kernels.

    Args:
        z: logits (C, V), fp32 or the autocast type; index: correct ids (C, 1).
        impossible: ids whose logit is −inf, left out of the smoothing (None: none).
    Shape:
        returns −log p_y (C, 1), the label-smoothed loss (C, 1) and ∂loss/∂z (C, V) in z's type.
    """
    possible = z.size(-1) - (0 if impossible is None else impossible.numel())  # V'
    z_type, z = z.dtype, z.float()  # (C, V) fp32: a CPU reduces bf16 rows 10x slower
    kept = z if impossible is None else z.index_fill(1, impossible, 0.0)
    z_sum = kept.sum(dim=-1, keepdim=True)  # (C, 1) Σ over the V' ids
    z_y = z.gather(1, index)  # (C, 1)
    top = z.amax(dim=-1, keepdim=True)  # (C, 1) each row's largest logit
    p = _softmax_into(z)  # (C, V) over z where it may
    del z, kept
    # p is largest where z is: log Σ_v exp z_v = max z − log max p, and max p ≥ 1/V
    lse = top - p.amax(dim=-1, keepdim=True).log()  # (C, 1) log Σ_v exp z_v
    nll = lse - z_y  # (C, 1) −log p_y
    uniform = lse - z_sum / possible  # (C, 1) mean over the V' ids of −log p_v
    loss = (1.0 - epsilon) * nll + epsilon * uniform
    p.scatter_add_(1, index, torch.full_like(lse, epsilon - 1.0))  # −(1 − ε) at y
    grad = p.sub_(epsilon / possible)  # (C, V) ∂loss/∂z = p − (1 − ε)·[v = y] − ε/V'
    if impossible is not None:
        grad.index_fill_(1, impossible, 0.0)  # p = 0 there, and no smoothing mass
    return nll, loss, grad.to(z_type)


def _softmax_into(z: Tensor) -> Tensor:
    """softmax(z) over the last dim, written over z where that is safe and pays: on a CPU,
    uncompiled (each row is read before it is written, and a new (C, V) block would be memory
    faulted in afresh at every chunk); elsewhere a new tensor. Shape: (C, V) -> (C, V)."""
    if z.is_cpu and z.is_contiguous() and not torch.compiler.is_compiling():
        return torch._softmax(z, -1, False, out=z)
    return torch.softmax(z, dim=-1)


class _LinearLabelSmoothedNll(torch.autograd.Function):
    """(loss, nll) sums of H·Wᵀ + b against ``target``; gradients made in the forward pass."""

    @staticmethod
    def forward(
        ctx, hidden, weight, bias, target, epsilon, chunk, ignore_index, impossible, grad_enabled,
        loss_and_grad,
    ):  # fmt: skip
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        # needs_input_grad is True under no_grad too: the caller's grad mode decides
        need_h, need_w, need_b = (grad_enabled and need for need in ctx.needs_input_grad[:3])
        with torch.autocast(device, enabled=False):  # the casts are made here, once
            w = weight.to(dtype) if dtype else weight  # (V, D)
            b = bias.to(dtype) if dtype is not None and bias is not None else bias  # (V,)
            grad_h = torch.empty_like(hidden) if need_h else None  # (N, D)
            grad_w = torch.zeros_like(weight) if need_w else None  # (V, D)
            grad_b = torch.zeros_like(bias) if need_b else None  # (V,)
            keep_all = (target != ignore_index)[:, None]  # (N, 1) padding masked, not removed
            nll = torch.empty(keep_all.shape, device=hidden.device)  # (N, 1) −log p_y
            loss = torch.empty_like(nll)  # (N, 1) label-smoothed
            for start in range(0, hidden.size(0), chunk):
                rows = slice(start, start + chunk)
                h = hidden[rows].to(dtype) if dtype else hidden[rows]  # (C, D)
                keep = keep_all[rows]  # (C, 1)
                index = target[rows].clamp(min=0)[:, None]  # (C, 1) a valid id at padding too
                z = product(h, w, b)  # (C, V)
                nll[rows], loss[rows], g = loss_and_grad(z, index, epsilon, impossible)
                del z  # one (C, V) block alive between chunks: g
                if not (need_h or need_w or need_b):
                    continue
                # Padding rows get no gradient: their rows of H (C, D) are zeroed, not g's (C, V).
                h = h * keep
                if need_h:
                    grad_h[rows] = product(g, w.t()) * keep  # (C, D)
                if need_w and g.dtype == grad_w.dtype:  # fp32: the sum inside the product
                    # MKL's, not products': oneDNN would copy g's transpose, a (C, V) block more
                    grad_w.addmm_(g.t(), h)  # (V, D)
                elif need_w:  # the chunks' bf16 products summed in fp32
                    grad_w.add_(g.t() @ h)  # (V, D)
                if need_b:
                    grad_b.add_((g * keep).sum(dim=0))  # (V,)
                del g
            loss = torch.where(keep_all, loss, 0.0).sum()
            nll = torch.where(keep_all, nll, 0.0).sum()
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scaled = [g * grad_loss if g is not None else None for g in (grad_h, grad_w, grad_b)]
        return *scaled, None, None, None, None, None, None, None


def linear_label_smoothed_nll(
    hidden: Tensor,
    output: nn.Linear,
    target: Tensor,
    epsilon: float,
    chunk: int,
    ignore_index: int = PAD_ID,
    impossible: Tensor | None = None,
    loss_and_grad: Callable = chunk_loss_and_grad,
) -> LossSums:
    """``label_smoothed_nll(output(hidden), target, epsilon)`` without the whole (N, V) logits.

    Args:
        hidden: the decoder output before the final linear layer, (..., D), e.g. (B, T, D).
        output: the final linear layer, D -> V (with or without a bias).
        target: correct ids (...), e.g. (B, T); ``ignore_index`` positions are skipped.
        epsilon: label smoothing ε in [0, 1).
        chunk: target positions computed at once (C).
        impossible: ids whose logit is always −inf (``loss.impossible_tokens``), left out of
            the smoothing; None: every id may be produced.
        loss_and_grad: ``chunk_loss_and_grad``, or the same compiled.
    Shape:
        returns scalar sums and the token count; ``nll`` carries no gradient.
    """
    hidden = hidden.reshape(-1, hidden.size(-1))  # (N, D)
    target = target.reshape(-1)  # (N,)
    real = target != ignore_index  # (N,) padding has no loss: its logits are never made
    hidden, target = hidden[real], target[real]  # (N', D), (N',)
    loss, nll = _LinearLabelSmoothedNll.apply(
        hidden, output.weight, output.bias, target, epsilon, chunk, ignore_index, impossible,
        torch.is_grad_enabled(), loss_and_grad,
    )  # fmt: skip
    return LossSums(loss=loss, nll=nll, n_tokens=real.sum())


class TrainingLoss(nn.Module):
    """A model and its label-smoothed loss as one module, so that DDP and ``torch.compile``
    wrap the whole training forward pass.

    With ``chunk`` > 0 the final linear layer is fused into the loss (``model.hidden_states``
    and ``model.output``); with 0 the model makes the whole logits and ``loss.py`` scores them.
    ``impossible``: ids whose logit is always −inf (``loss.impossible_tokens``).

    ``compile`` (``runtime.compile``): ``torch.compile`` the model's forward pass and, with
    chunks, ``chunk_loss_and_grad``, each once for any batch shape (``dynamic=True``). The loop
    over the chunks stays in Python: compiled whole, it would be compiled again for every
    number of chunks a batch has. Without a compiler it runs uncompiled (``device.compiled``).
    """

    def __init__(
        self, model: nn.Module, epsilon: float, chunk: int, impossible: Tensor | None = None,
        compile: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.model = model
        self.epsilon = epsilon
        self.chunk = chunk
        self.impossible = impossible
        self.hidden_states, self.logits = model.hidden_states, model.forward
        self.loss_and_grad = chunk_loss_and_grad
        if compile:
            device = next(model.parameters()).device
            if chunk:
                self.hidden_states = compiled(model.hidden_states, device, "the model")
                self.loss_and_grad = compiled(chunk_loss_and_grad, device, "the loss")
            else:
                self.logits = compiled(model.forward, device, "the model")

    def forward(self, src_ids: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> LossSums:
        """Args:
            src_ids (B, S); tgt_in: decoder input (B, T); tgt_out: the words to predict (B, T).
        Shape:
            returns the sums of loss.py over the batch's real target tokens.
        """
        if self.chunk == 0:
            logits = self.logits(src_ids, tgt_in)  # (B, T, V)
            return label_smoothed_nll(logits, tgt_out, self.epsilon, impossible=self.impossible)
        hidden = self.hidden_states(src_ids, tgt_in)  # (B, T, D)
        return linear_label_smoothed_nll(
            hidden, self.model.output, tgt_out, self.epsilon, self.chunk,
            impossible=self.impossible, loss_and_grad=self.loss_and_grad,
        )  # fmt: skip
