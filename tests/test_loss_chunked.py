"""The final linear layer fused into the label-smoothed loss, a chunk of positions at a time:
equal to loss.py's ``label_smoothed_nll`` of the whole logits in value and gradient, through the
model as well, and never holding the whole (N, V) logits."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from transformer.config import RuntimeConfig
from transformer.errors import BadValue
from transformer.training.chunked_loss import TrainingLoss, linear_label_smoothed_nll
from transformer.training.loss import label_smoothed_nll
from transformer.vocab import PAD_ID

from helpers import tiny_model


def inputs(n: int = 45, d: int = 16, v: int = 50, bias: bool = True, seed: int = 0):
    """Hidden states (3, n, d) that need a gradient, an output layer, targets with padding."""
    torch.manual_seed(seed)
    output = nn.Linear(d, v, bias=bias)
    if bias:
        nn.init.normal_(output.bias)  # not the zeros of a fresh layer: the bias must count
    hidden = torch.randn(3, n, d, requires_grad=True)
    target = torch.randint(PAD_ID + 1, v, (3, n))
    target[0, -7:] = PAD_ID
    target[2, -1] = PAD_ID
    return hidden, output, target


def loss_and_grads(hidden, output, total) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The summed loss divided by 7 (a normaliser, as the loop's token count), then its
    gradients with respect to the hidden states and the output layer's parameters."""
    wrt = [hidden, *output.parameters()]
    return total, list(torch.autograd.grad(total / 7, wrt))


def assert_equal_sums(fused, plain, rtol: float) -> None:
    assert fused.n_tokens.item() == plain.n_tokens.item()
    tokens = plain.n_tokens.item()
    # per token, as the loop reports them: a sum's rounding grows with the count
    assert fused.loss.item() / tokens == pytest.approx(plain.loss.item() / tokens, rel=rtol)
    assert fused.nll.item() / tokens == pytest.approx(plain.nll.item() / tokens, rel=rtol)


@pytest.mark.parametrize("chunk", [1, 7, 64, 135, 1000])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_value_and_gradient_equal_the_whole_logits_path(chunk, bias, epsilon):
    hidden, output, target = inputs(bias=bias)
    plain = label_smoothed_nll(output(hidden), target, epsilon)
    _, expected = loss_and_grads(hidden, output, plain.loss)
    fused = linear_label_smoothed_nll(hidden, output, target, epsilon, chunk)
    _, got = loss_and_grads(hidden, output, fused.loss)
    assert_equal_sums(fused, plain, rtol=1e-5)
    names = ["hidden", "weight", "bias"][: len(expected)]
    for name, g, e in zip(names, got, expected, strict=True):
        assert e.abs().max() > 0, name  # a gradient that is there to compare
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_ids_whose_bias_is_minus_infinity_are_left_out_as_in_the_whole_logits_path(chunk):
    # An imported Marian model's padding row: bias −inf, never produced, out of the smoothing.
    hidden, output, target = inputs()
    impossible = torch.tensor([PAD_ID, 17])
    target[target == 17] = 18  # a target is always a token the model can produce
    with torch.no_grad():
        output.bias[impossible] = float("-inf")
    plain = label_smoothed_nll(output(hidden), target, 0.1, impossible=impossible)
    _, expected = loss_and_grads(hidden, output, plain.loss)
    fused = linear_label_smoothed_nll(hidden, output, target, 0.1, chunk, impossible=impossible)
    _, got = loss_and_grads(hidden, output, fused.loss)
    assert torch.isfinite(fused.loss) and torch.isfinite(fused.nll)
    assert_equal_sums(fused, plain, rtol=1e-5)
    for name, g, e in zip(["hidden", "weight", "bias"], got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5, msg=name)
    assert (got[2][impossible] == 0).all()  # the −inf bias stays where it is


def test_an_rnn_with_its_loss_equals_the_plain_path():
    from transformer.config import ModelConfig
    from transformer.model.build import build_model

    config = ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20, architecture="rnn",
                                rnn_hidden=16, rnn_embedding=12, rnn_dropout=0.0)  # fmt: skip
    model = build_model(config)
    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]])
    tgt_in, tgt_out = (
        torch.tensor([[2, 8, 9, 0], [2, 4, 5, 6]]),
        torch.tensor([[8, 9, 3, 0], [4, 5, 6, 3]]),
    )
    assert torch.equal(model(src, tgt_in), model.output(model.hidden_states(src, tgt_in)))
    plain, fused = (TrainingLoss(model, 0.1, chunk)(src, tgt_in, tgt_out) for chunk in (0, 3))
    assert_equal_sums(fused, plain, rtol=1e-5)


def test_padding_and_ignore_index_count_nothing():
    hidden, output, target = inputs(bias=False)
    target[1] = -100
    plain = label_smoothed_nll(output(hidden), target, 0.1, ignore_index=-100)
    fused = linear_label_smoothed_nll(hidden, output, target, 0.1, 16, ignore_index=-100)
    assert_equal_sums(fused, plain, rtol=1e-5)
    (grad,) = torch.autograd.grad(fused.loss, hidden)
    assert grad[1].abs().max() == 0  # ignored positions get no gradient


def test_under_bf16_autocast_it_matches_the_whole_logits_path():
    hidden, output, target = inputs(n=60, d=32, v=80)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = label_smoothed_nll(output(hidden), target, 0.1)
        _, expected = loss_and_grads(hidden, output, plain.loss)
        fused = linear_label_smoothed_nll(hidden, output, target, 0.1, 50)
        _, got = loss_and_grads(hidden, output, fused.loss)
    assert_equal_sums(fused, plain, rtol=1e-5)  # the same bf16 logits, softmax in fp32
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype == torch.float32
        # the plain path rounds ∂/∂W to bf16 once; the chunks add bf16 parts in fp32
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-3)


def test_without_grad_mode_no_gradient_is_made():
    hidden, output, target = inputs()
    with torch.no_grad():
        fused = linear_label_smoothed_nll(hidden, output, target, 0.1, 16)
    plain = label_smoothed_nll(output(hidden), target, 0.1)
    assert not fused.loss.requires_grad
    assert_equal_sums(fused, plain, rtol=1e-5)


@pytest.mark.parametrize("tie_output", [True, False])
def test_the_model_with_its_loss_equals_the_plain_path(tie_output):
    """TrainingLoss (what the loop and validation call) with chunks and with 0 (the model's
    whole logits): the same loss and the same gradient on every parameter, the tied output
    projection included."""
    model = tiny_model(20, 20, tie_output=tie_output, share_embeddings=True, dropout=0.0)
    src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]])
    tgt_in = torch.tensor([[2, 8, 9, 0], [2, 4, 5, 6]])
    tgt_out = torch.tensor([[8, 9, 3, 0], [4, 5, 6, 3]])
    results = []
    for chunk in (0, 3):
        model.zero_grad()
        sums = TrainingLoss(model, 0.1, chunk)(src, tgt_in, tgt_out)
        (sums.loss / sums.n_tokens).backward()
        results.append((sums, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (plain, expected), (fused, got) = results
    assert_equal_sums(fused, plain, rtol=1e-5)
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-5, msg=name)


def test_forward_is_the_output_layer_of_the_hidden_states():
    model = tiny_model(20, 20)
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    assert torch.equal(model(src, tgt), model.output(model.hidden_states(src, tgt)))


def peak_bytes(step) -> int:
    """The most bytes of CPU tensors alive at once during ``step()``, beyond those alive before
    (torch.profiler's memory events)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    return max(e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]")


def test_the_whole_logits_never_exist():
    n, d, v = 3 * 512, 8, 2048
    hidden, output, target = inputs(n=512, d=d, v=v, bias=False)
    logits_bytes = n * v * 4

    def step(chunk: int):
        def run():
            if chunk:
                sums = linear_label_smoothed_nll(hidden, output, target, 0.1, chunk)
            else:
                sums = label_smoothed_nll(output(hidden), target, 0.1)
            torch.autograd.grad(sums.loss, [hidden, output.weight])

        return run

    block_bytes = 128 * v * 4  # a twelfth of the logits
    assert peak_bytes(step(0)) >= 2 * logits_bytes  # the measure sees the plain path's blocks
    # one (128, V) block and the gradients (64 KB): on a CPU the softmax is written over the
    # logits, where a new block beside them made the peak 2.2 blocks
    assert peak_bytes(step(128)) < 1.5 * block_bytes


def test_a_negative_chunk_is_a_clear_error():
    with pytest.raises(BadValue, match="RuntimeConfig.loss_chunk must be >= 0, got -1"):
        RuntimeConfig(loss_chunk=-1)
