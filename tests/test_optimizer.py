"""AdamW with parameter groups: weight decay only on the weight matrices of linear layers; with
the paper's decay of 0 it is exactly Adam. Old optimizer states give a clear message."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer.config import ModelConfig, TrainConfig
from transformer.model import Transformer
from transformer.training.optimizer import make_optimizer, parameter_groups


def model(**fields) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20, **fields))


@pytest.mark.parametrize("tie_output", [True, False])
def test_decay_reaches_linear_weight_matrices_only(tie_output):
    m = model(tie_output=tie_output)
    decay, no_decay = parameter_groups(m, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in m.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    linear = {f"{name}.weight" for name, mod in m.named_modules() if isinstance(mod, nn.Linear)}
    assert decayed == linear - ({"output.weight"} if tie_output else set())
    kept = {names[id(p)] for p in no_decay["params"]}
    assert {n for n in kept if "gamma" in n or "beta" in n or n.endswith("bias")} == {
        n for n, _ in m.named_parameters() if "gamma" in n or "beta" in n or n.endswith("bias")
    }
    assert "src_embed.tokens.weight" in kept and "tgt_embed.tokens.weight" in kept
    assert ("output.weight" in decayed) == (not tie_output)  # a tied output is an embedding
    assert len(decayed) + len(kept) == len(list(m.parameters()))  # each tensor exactly once


def test_with_no_decay_it_is_exactly_adam():
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    a, b = model(), model()
    ours = make_optimizer(a, TrainConfig())
    adam = torch.optim.Adam(b.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9, fused=True)
    for optimizer, m in ((ours, a), (adam, b)):
        for group in optimizer.param_groups:
            group["lr"] = 1e-3
        torch.manual_seed(1)  # the same dropout masks for both
        for _ in range(3):
            optimizer.zero_grad()
            m(src, tgt).logsumexp(-1).sum().backward()
            optimizer.step()
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name
