"""The fused final layer of the searches (inference/next_tokens.py) against the plain way: the
whole vocabulary's logits, log_softmax, PAD and BOS banned, top-k; and the searches unchanged by
taking the vocabulary in slices."""

import pytest
import torch
from torch import nn

import transformer.inference.next_tokens as next_tokens
from transformer.inference.next_tokens import best_next_tokens
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import four_searches, tiny_model


def plain(hidden, output, k, at_limit):
    """The reference: whole logits, log-softmax, bans, EOS forced, top-k."""
    log_probs = torch.log_softmax(output(hidden).float(), dim=-1)  # (N, V)
    log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
    eos = log_probs[at_limit, EOS_ID]
    log_probs[at_limit] = float("-inf")
    log_probs[at_limit, EOS_ID] = eos
    return log_probs.topk(k, dim=-1)


@pytest.mark.parametrize("vocab", [300, 1024, 2500, 4097])  # one slice; exactly one; several
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("k", [1, 8])
@pytest.mark.parametrize("group_bytes", [0, next_tokens.GROUP_BYTES])  # SLICE words a product
def test_best_next_tokens_equal_log_softmax_then_top_k(vocab, bias, k, group_bytes, monkeypatch):
    monkeypatch.setattr(next_tokens, "GROUP_BYTES", group_bytes)
    torch.manual_seed(0)
    output = nn.Linear(16, vocab, bias=bias)
    hidden = torch.randn(12, 16) * 3
    at_limit = torch.tensor([False, True] * 6)
    found = best_next_tokens(hidden, output, k, at_limit)
    values, tokens = plain(hidden, output, k, at_limit)
    finite = values.isfinite()
    assert torch.equal(found.tokens[finite], tokens[finite])
    assert torch.equal(found.log_probs.isfinite(), finite)
    assert (found.log_probs[finite] - values[finite]).abs().max() <= 2e-6
    if vocab <= next_tokens.SLICE:  # one slice: log_softmax and top-k themselves
        assert torch.equal(found.log_probs, values)
    assert (found.tokens[at_limit, 0] == EOS_ID).all()
    reference = torch.logsumexp(output(hidden).double(), dim=-1).float()
    assert (found.log_normaliser - reference).abs().max() <= 1e-5


@pytest.mark.parametrize("k", [1, 8])
def test_buffers_reused_from_step_to_step_give_what_new_ones_give(k):
    """A search's ``Scratch`` over steps of 3, 8 and 5 rows (the buffers grow, then serve
    fewer rows): the same numbers as new buffers, and nothing returned points into them."""
    torch.manual_seed(0)
    output = nn.Linear(16, 2500)  # three products, the last one shorter, V not whole blocks
    scratch = next_tokens.Scratch()
    kept = []
    with torch.inference_mode():
        for rows in (3, 8, 5):
            hidden = torch.randn(rows, 16) * 3
            at_limit = torch.arange(rows) % 3 == 1
            reused = best_next_tokens(hidden, output, k, at_limit, scratch)
            fresh = best_next_tokens(hidden, output, k, at_limit)
            for a, b in zip(reused.__dict__.values(), fresh.__dict__.values(), strict=True):
                assert torch.equal(a, b)
            kept.append((reused, fresh))
        assert set(scratch._buffers) == {"logits", "log_probs"}
        for buffer in scratch._buffers.values():
            buffer.fill_(float("nan"))
    for reused, fresh in kept:  # unchanged by later steps' writes into the buffers
        for a, b in zip(reused.__dict__.values(), fresh.__dict__.values(), strict=True):
            assert torch.equal(a, b)


def test_best_next_tokens_flags_non_finite_logits():
    output = nn.Linear(4, 3000)
    hidden = torch.randn(3, 4)
    with torch.no_grad():
        output.bias[2500] = float("nan")
        output.bias[7] = float("inf")  # row-independent: every row has one
    found = best_next_tokens(hidden, output, 2, torch.zeros(3, dtype=torch.bool))
    assert not found.log_normaliser.isfinite().any()


def test_greedy_takes_the_first_of_equal_best_tokens_as_argmax_does():
    output = nn.Linear(2, 3000, bias=True)
    with torch.no_grad():
        output.weight.zero_()
        output.bias.zero_()
        output.bias[[700, 1500, 2999]] = 5.0  # three equal best, in different slices
    found = best_next_tokens(torch.randn(4, 2), output, 1, torch.zeros(4, dtype=torch.bool))
    assert found.tokens[:, 0].tolist() == [700] * 4


def test_rows_few_enough_take_the_vocabulary_in_fewer_products(monkeypatch):
    products = []  # words per product
    real = next_tokens._linear_into
    monkeypatch.setattr(next_tokens, "_linear_into", lambda out, *a: products.append(out.size(1))
                        or real(out, *a))  # fmt: skip
    torch.manual_seed(0)
    output = nn.Linear(8, 5000).eval()
    for rows, expected in [(256, [1024] * 4 + [904]), (64, [4096, 904]), (16, [5000])]:
        products.clear()
        hidden, at_limit = torch.randn(rows, 8) * 3, torch.zeros(rows, dtype=torch.bool)
        with torch.inference_mode():
            found = best_next_tokens(hidden, output, 4, at_limit)
            values, tokens = plain(hidden, output, 4, at_limit)
        assert products == expected  # 1 MB of logits a product, at least 1,024 words
        assert torch.equal(found.tokens, tokens)
        assert (found.log_probs - values).abs().max() <= 2e-6


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_searches_are_the_same_with_the_vocabulary_in_slices(search, monkeypatch):
    model = tiny_model(40, 2600, dropout=0.0, norm_first=True, tie_output=False)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
        model.output.weight[EOS_ID] *= 1.5  # some end early
    sliced = four_searches(model, search)
    monkeypatch.setattr(next_tokens, "SLICE", 10**6)  # the whole vocabulary in one product
    whole = four_searches(model, search)
    assert [[h.tokens for h in hs] for hs in sliced] == [[h.tokens for h in hs] for hs in whole]
    for a, b in zip(sum(sliced, []), sum(whole, []), strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-4)
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


@pytest.mark.parametrize("rows_per_group", [1, 8, 64])
def test_logits_made_at_once_are_normalised_a_group_of_whole_rows_at_a_time(
    rows_per_group, monkeypatch
):
    """``_over_rows`` (the output layer packed): the normaliser of every row is its
    log-sum-exp and the blocks' maxima are theirs, however many groups the rows make."""
    monkeypatch.setattr(next_tokens, "ROW_GROUP_BYTES", 4 * 320 * rows_per_group)
    torch.manual_seed(rows_per_group)
    logits = torch.randn(37, 320) * 4  # (N, V'), V' = 5 blocks
    logits[:, 300:] = float("-inf")  # columns past V
    normaliser, maxima = next_tokens._over_rows(logits, next_tokens.Scratch())
    torch.testing.assert_close(normaliser, torch.logsumexp(logits, dim=1), rtol=0, atol=2e-6)
    assert torch.equal(maxima, logits.view(37, 5, 64).amax(dim=-1))


def test_the_normaliser_of_rows_asks_for_a_contiguous_buffer():
    z = torch.randn(4, 128)
    columns = torch.empty(4, 256)[:, :128]  # a strided slice: the kernel would write it wrong
    with pytest.raises(AssertionError):
        next_tokens._log_sum_exp(z, z.amax(1, keepdim=True), columns)
