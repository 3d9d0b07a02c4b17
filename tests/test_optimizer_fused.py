"""The fused AdamW kernel: the same update as PyTorch's per-tensor loop (to float rounding),
deterministic, and kept by a resumed run, so that exact resume stays bit for bit."""

from __future__ import annotations

import torch

from transformer.config import ModelConfig, TrainConfig
from transformer.model import Transformer
from transformer.training.optimizer import make_optimizer, parameter_groups

SRC, TGT = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]]), torch.tensor([[2, 8, 9], [2, 4, 0]])


def model() -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20, dropout=0.0)
    return Transformer(config)


def train_steps(m: Transformer, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = 1e-2 / (step + 1)
        optimizer.zero_grad()
        m(SRC, TGT).logsumexp(-1).sum().backward()
        optimizer.step()


def test_fused_is_the_per_tensor_update_to_rounding():
    # The same gradients for both (random, fixed per step): a model's own gradients would
    # differ in rounding once the weights do, and Adam, ε = 1e-9, turns the rounding noise of
    # a gradient that is 0 in exact arithmetic (the key biases') into steps of size lr.
    t = TrainConfig(weight_decay=0.01)
    fused, loop = model(), model()
    ours = make_optimizer(fused, t)
    assert all(group["fused"] for group in ours.param_groups)
    reference = torch.optim.AdamW(parameter_groups(loop, 0.01), lr=0.0, betas=(0.9, 0.98),
                                  eps=1e-9, foreach=False)  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    for step in range(5):
        for m, optimizer in ((fused, ours), (loop, reference)):
            generator.manual_seed(step)
            for p in m.parameters():
                p.grad = torch.randn(p.shape, generator=generator)
            for group in optimizer.param_groups:
                group["lr"] = 1e-2 / (step + 1)
            optimizer.step()
    moved = 0.0
    for (name, p), q, p0 in zip(fused.named_parameters(), loop.parameters(),
                                model().parameters(), strict=True):  # fmt: skip
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=name)
        moved = max(moved, float((p - p0).detach().abs().max()))
    assert moved > 1e-2  # the comparison is between weights that did change


def test_a_resumed_run_keeps_its_implementation_and_ends_bit_identical():
    t = TrainConfig()
    whole = model()
    train_steps(whole, make_optimizer(whole, t), 6)

    first = model()
    optimizer = make_optimizer(first, t)
    train_steps(first, optimizer, 3)
    saved = {k: v.clone() for k, v in first.state_dict().items()}, optimizer.state_dict()
    resumed = model()
    resumed.load_state_dict(saved[0])
    again = make_optimizer(resumed, t)
    again.load_state_dict(saved[1])
    # the remaining steps with the learning rates an uninterrupted run would use
    for step in range(3, 6):
        for group in again.param_groups:
            group["lr"] = 1e-2 / (step + 1)
        again.zero_grad()
        resumed(SRC, TGT).logsumexp(-1).sum().backward()
        again.step()
    for (name, p), q in zip(whole.named_parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_a_state_saved_by_the_per_tensor_loop_resumes_with_the_loop():
    m = model()
    old = torch.optim.AdamW(parameter_groups(m, 0.0), lr=1e-3, foreach=False)
    train_steps(m, old, 1)
    new = make_optimizer(m, TrainConfig())
    new.load_state_dict(old.state_dict())
    assert not any(group["fused"] for group in new.param_groups)
