"""Searches on a stub model whose next-token distributions are set by hand, so that the best
answer is known by construction: beam against greedy, the length-penalty bound, banned and
forced tokens, finished sentences leaving the batch, and sampling's distribution."""

import math

import pytest
import torch

from transformer.config import DecodeConfig
from transformer.inference import greedy_search, sample
from transformer.inference.beam import beam_search
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import A, B, C, D, Stub, X, Y, Z, padded

DC = DecodeConfig

SRC = torch.tensor([[A, EOS_ID]])


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_beats_myopic_greedy_and_does_not_stop_at_the_first_eos(use_cache):
    # Greedy takes A (0.5) then EOS (0.6): P = 0.30. At step 2 the beam has ended "A" (0.30)
    # but still runs "B Y" (0.36), which then ends with P = 0.36: a search that stops at the
    # first finished hypothesis returns "A".
    stub = Stub({(): {A: 0.5, B: 0.4, C: 0.1}, (A,): {EOS_ID: 0.6, X: 0.4}, (B,): {Y: 0.9, Z: 0.1}})
    greedy = greedy_search(stub, SRC, use_cache=use_cache)[0]
    assert greedy.tokens == [A]
    assert greedy.log_prob == pytest.approx(math.log(0.5 * 0.6))
    best, second = beam_search(stub, SRC, DC(2, 0.0, nbest=2), use_cache=use_cache)[0]
    assert (best.tokens, second.tokens) == ([B, Y], [A])
    assert best.score == pytest.approx(math.log(0.36))
    assert second.score == pytest.approx(math.log(0.30))
    assert beam_search(stub, SRC, DC(2, 0.0), use_cache=use_cache)[0][0].tokens == [B, Y]


@pytest.mark.parametrize("use_cache", [True, False])
def test_length_penalty_bound_keeps_searching_for_a_longer_better_hypothesis(use_cache):
    # α = 1: lp(L) = (5 + L) / 6. "A" ends at step 2 with log 0.54 / lp(2) = -0.528. The running
    # beam "B D" has log 0.4 = -0.916: over lp(3) it looks hopeless (-0.687), but it can still
    # finish longer; "B D D D D" scores log 0.4 / lp(6) = -0.500 and wins.
    table = {(): {A: 0.6, B: 0.4}, (A,): {EOS_ID: 0.9, C: 0.1}}
    table.update({(B,) + (D,) * n: {D: 1.0} for n in range(4)})  # B, B D, .., B D D D -> D
    stub = Stub(table)
    hyp = beam_search(stub, SRC, DC(2, 1.0, max_len_a=0.0, max_len_b=10), use_cache=use_cache)[0][0]
    assert hyp.tokens == [B, D, D, D, D]
    assert hyp.log_prob == pytest.approx(math.log(0.4))
    assert hyp.score == pytest.approx(math.log(0.4) / (11 / 6))
    # With room for only 4 tokens nothing running can beat "A": log 0.4 / lp(5) = -0.550.
    short = beam_search(stub, SRC, DC(2, 1.0, max_len_a=0.0, max_len_b=4), use_cache=use_cache)[0][
        0
    ]
    assert short.tokens == [A]


# PAD and BOS are the most likely "tokens"; EOS is rare but possible.
GREEDY_TRAP = {PAD_ID: 0.4, BOS_ID: 0.3, A: 0.2, B: 0.099, EOS_ID: 0.001}


@pytest.mark.parametrize("use_cache", [True, False])
def test_pad_and_bos_are_never_generated_and_eos_is_forced_at_the_limit(use_cache):
    stub = Stub({}, default=GREEDY_TRAP)
    src = padded([[A], [A, B, C], [A, B, C, D, X]])
    limits = [3, 6, 9]  # floor(1.5 · len + 2)
    for hyp, limit in zip(
        greedy_search(stub, src, DC(max_len_a=1.5, max_len_b=2), use_cache), limits, strict=True
    ):
        assert hyp.tokens == [A] * limit
        assert hyp.log_prob == pytest.approx(limit * math.log(0.2) + math.log(0.001))
    # Beam (α = 0): ending at once (0.001) beats any longer hypothesis; the forced ends follow.
    beams = beam_search(stub, src, DC(3, 0.0, 1.5, 2, 3), use_cache)
    for nbest, limit in zip(beams, limits, strict=True):
        assert nbest[0].tokens == []
        assert nbest[1].tokens == [A] * limit
        assert nbest[1].log_prob == pytest.approx(limit * math.log(0.2) + math.log(0.001))
        assert all(len(h.tokens) <= limit and set(h.tokens) <= {A, B} for h in nbest)
    for hyp, limit in zip(
        sample(stub, src, DC(sampling=True, top_k=2, max_len_a=1.5, max_len_b=2, sampling_seed=0)),
        limits,
        strict=True,
    ):
        assert len(hyp.tokens) == limit  # top-2 excludes EOS until it is forced
        assert set(hyp.tokens) <= {A, B}


@pytest.mark.parametrize("use_cache", [True, False])
def test_finished_sentences_leave_the_running_batch(use_cache):
    src = padded([[A], [A, B, C, D, X]])  # limits 1 and 5 tokens (a = 1, b = 0)
    stub = Stub({}, default=GREEDY_TRAP)
    greedy_search(stub, src, DC(max_len_a=1.0, max_len_b=0), use_cache)
    assert stub.rows_seen == [2, 2, 1, 1, 1, 1]
    stub.rows_seen.clear()
    beam_search(stub, src, DC(2, 0.0, 1.0, 0), use_cache=use_cache)
    # The first step once per sentence (all beams are <s>), then K = 2 rows per sentence.
    assert stub.rows_seen == [2, 4, 2, 2, 2, 2]


# --- Sampling --------------------------------------------------------------------------------


def first_tokens(stub: Stub, n: int, **kwargs) -> list[int]:
    config = DC(sampling=True, sampling_seed=0, **kwargs)
    hyps = sample(stub, SRC.repeat(n, 1), config, sample_of=range(n))
    return [h.tokens[0] for h in hyps]


@pytest.mark.parametrize(
    ("temperature", "expected"),
    [(1.0, 0.7), (2.0, 0.7**0.5 / (0.7**0.5 + 0.3**0.5)), (0.5, 0.49 / 0.58)],
)
def test_sampling_frequencies_follow_the_tempered_distribution(temperature, expected):
    stub = Stub({(): {A: 0.7, B: 0.3}})
    tokens = first_tokens(stub, 2000, temperature=temperature)
    assert tokens.count(A) / 2000 == pytest.approx(expected, abs=0.035)
    # The reported log-prob is the model's own, not the tempered one.
    hyp = sample(stub, SRC, DC(sampling=True, temperature=temperature))[0]
    assert hyp.log_prob == pytest.approx(math.log({A: 0.7, B: 0.3}[hyp.tokens[0]]))


def test_top_k_restricts_the_support_to_the_k_most_likely_tokens():
    stub = Stub({(): {A: 0.3, B: 0.25, C: 0.2, D: 0.15, X: 0.1}})
    assert set(first_tokens(stub, 500, top_k=0)) == {A, B, C, D, X}
    top2 = first_tokens(stub, 2000, top_k=2)
    assert set(top2) == {A, B}
    assert top2.count(A) / 2000 == pytest.approx(0.3 / 0.55, abs=0.035)
