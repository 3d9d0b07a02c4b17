"""Label-smoothed cross-entropy and the warmup / inverse-square-root schedule."""

import math

import pytest
import torch
import torch.nn.functional as F

from transformer.training.loss import label_smoothed_nll
from transformer.training.schedule import inverse_sqrt_lr, schedule_factor
from transformer.vocab import PAD_ID


def test_one_hot_cross_entropy_by_hand():
    # The notes' "I am a student" vocabulary of 6 words; the target is "am" (index 1).
    logits = torch.tensor([[0.1, 2.0, 0.3, -1.0, 0.5, 0.0]])
    sums = label_smoothed_nll(logits, torch.tensor([1]), epsilon=0.0, ignore_index=-100)
    exps = [math.exp(v) for v in logits[0].tolist()]
    expected = -math.log(exps[1] / sum(exps))
    assert sums.loss.item() == pytest.approx(expected, abs=1e-6)
    assert sums.nll.item() == pytest.approx(expected, abs=1e-6)
    assert sums.n_tokens == 1


def test_label_smoothing_by_hand():
    logits = torch.tensor([[1.0, 0.0, -1.0]])
    eps = 0.1
    exps = [math.exp(v) for v in (1.0, 0.0, -1.0)]
    log_p = [math.log(e / sum(exps)) for e in exps]
    # q = (1 - ε)·one_hot(0) + ε/3 for every class.
    q = [(1 - eps) + eps / 3, eps / 3, eps / 3]
    expected = -sum(qi * lp for qi, lp in zip(q, log_p, strict=True))
    sums = label_smoothed_nll(logits, torch.tensor([0]), epsilon=eps, ignore_index=-100)
    assert sums.loss.item() == pytest.approx(expected, abs=1e-6)
    assert sums.nll.item() == pytest.approx(-log_p[0], abs=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_matches_torch_cross_entropy_and_ignores_padding(eps):
    torch.manual_seed(0)
    logits = torch.randn(4, 7, 11)
    target = torch.randint(1, 11, (4, 7))
    target[0, 5:] = PAD_ID
    target[2, 3:] = PAD_ID
    sums = label_smoothed_nll(logits, target, epsilon=eps)
    ref = F.cross_entropy(
        logits.flatten(0, 1),
        target.flatten(),
        ignore_index=PAD_ID,
        label_smoothing=eps,
        reduction="sum",
    )
    assert sums.n_tokens == int((target != PAD_ID).sum()) == 28 - 2 - 4
    assert abs(sums.loss.item() - ref.item()) < 1e-4
    # Changing logits at padded positions changes nothing.
    logits2 = logits.clone()
    logits2[0, 5:] = 100.0
    assert label_smoothed_nll(logits2, target, epsilon=eps).loss.item() == pytest.approx(
        sums.loss.item()
    )


def test_schedule_values():
    d, warmup = 512, 4000
    peak = (d * warmup) ** -0.5  # = 1 / sqrt(2,048,000) = 6.98771e-4
    assert peak == pytest.approx(6.98771e-4, rel=1e-5)
    assert inverse_sqrt_lr(warmup, d, warmup) == pytest.approx(peak, rel=1e-12)
    assert inverse_sqrt_lr(1, d, warmup) == pytest.approx(peak / warmup, rel=1e-12)  # linear warmup
    assert inverse_sqrt_lr(1000, d, warmup) == pytest.approx(peak / 4, rel=1e-12)
    assert inverse_sqrt_lr(4 * warmup, d, warmup) == pytest.approx(peak / 2, rel=1e-12)  # 1/√step
    assert inverse_sqrt_lr(100 * warmup, d, warmup) == pytest.approx(peak / 10, rel=1e-12)
    assert inverse_sqrt_lr(4000, d, warmup, factor=2.0) == pytest.approx(2 * peak, rel=1e-12)
    # The peak is the maximum.
    values = [inverse_sqrt_lr(s, d, warmup) for s in range(1, 20000, 7)]
    assert max(values) <= peak * (1 + 1e-12)


def test_peak_lr_sets_the_maximum():
    factor = schedule_factor(64, 100, lr_factor=1.0, peak_lr=2e-3)
    assert inverse_sqrt_lr(100, 64, 100, factor) == pytest.approx(2e-3, rel=1e-12)
    assert inverse_sqrt_lr(400, 64, 100, factor) == pytest.approx(1e-3, rel=1e-12)
    assert schedule_factor(64, 100, lr_factor=3.0, peak_lr=0.0) == 3.0
