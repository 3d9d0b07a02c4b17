"""Search invariants: cached = uncached, beam 1 = greedy, alone = in a batch, scores = rescoring,
and hand-built stub models whose best answers are known by construction."""

import math

import pytest
import torch

import transformer.model.cache as cache_module
from transformer.config import DecodeConfig
from transformer.data.batching import length_batches
from transformer.inference import greedy_search, sample, translate_ids
from transformer.inference.beam import beam_search
from transformer.inference.search import max_output_lengths, rows_kept
from transformer.model import Transformer
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import ENCODER_DECODERS, padded, tiny_model

DC = DecodeConfig  # the searches take their settings as one DecodeConfig

V = 30  # target vocabulary of the tiny models


def tiny(**overrides) -> Transformer:
    return tiny_model(40, V, **{"dropout": 0.0, **overrides})


def varied() -> Transformer:
    """A random model whose outputs vary with the source and position and sometimes end early.

    With the default initialisation a random Transformer repeats one token forever and never
    ends, which would make the equalities below easy to pass by accident.
    """
    model = tiny(norm_first=True, positional="learned", tie_output=False)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
        model.output.weight[EOS_ID] *= 1.5  # some sentences end before their limit, some do not
    return model


# Source sentences of different lengths (no padding inside).
SENTENCES = [[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 19, 3], [20, 3]]


def rescore(model: Transformer, src: list[int], tokens: list[int]) -> float:
    """log P(tokens + EOS | src) from one teacher-forced forward pass."""
    gold = tokens + [EOS_ID]
    with torch.no_grad():
        logits = model(torch.tensor([src]), torch.tensor([[BOS_ID] + tokens]))
    log_probs = torch.log_softmax(logits[0].float(), dim=-1)  # (T, V)
    return log_probs[torch.arange(len(gold)), torch.tensor(gold)].sum().item()


def assert_same(a, b, tol=1e-4):
    """Same tokens, same scores and log-probs (hypotheses or lists of them)."""
    if isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y, tol)
        return
    assert a.tokens == b.tokens
    # float32 sums over up to ~50 steps: allow a relative difference too.
    assert a.score == pytest.approx(b.score, rel=1e-5, abs=tol)
    assert a.log_prob == pytest.approx(b.log_prob, rel=1e-5, abs=tol)


# --- The cache -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ENCODER_DECODERS)
@pytest.mark.parametrize("capacity", [2, 32], ids=["buffers-grow", "buffers-fit"])
def test_cached_logits_equal_full_prefix_logits_step_by_step(name, capacity, monkeypatch):
    monkeypatch.setattr(cache_module, "GROWTH", capacity)  # 2: grows at steps 2, 4, 6, 8
    model = ENCODER_DECODERS[name]()
    # Rows 0, 1 share a source and rows 2, 3 share one, like the beams of two sentences.
    src = padded([[5, 6, 7, 3], [5, 6, 7, 3], [8, 9, 3], [8, 9, 3]])
    torch.manual_seed(1)
    tgt = torch.randint(4, V, (4, 9))
    tgt[:, 0] = BOS_ID
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        cache = model.new_cache()
        for t in range(tgt.size(1)):
            step = model.decode(tgt[:, t : t + 1], memory, src_mask, cache)[:, 0]  # (B, V)
            full = model.decode(tgt[:, : t + 1], memory, src_mask)[:, -1]
            assert (step - full).abs().max() <= 1e-5, f"step {t}"
            if t == 3:  # beam reordering within each sentence: row 0 continues row 1, ...
                index = torch.tensor([1, 1, 3, 2])
                cache.reorder(index)
                tgt = torch.cat([tgt[index, : t + 1], tgt[:, t + 1 :]], dim=1)
            if t == 5:  # sentence 0 has finished and leaves the batch
                index = torch.tensor([2, 3])
                cache.keep(index, index)
                tgt, memory, src_mask = tgt[index], memory[index], src_mask[index]
        assert cache.length == tgt.size(1)


@pytest.mark.parametrize(
    ("limit", "rooms"),
    [(0, [8, 16, 24, 32, 40, 56, 72, 96, 120, 152]), (50, [8, 16, 24, 32, 40, 50])],
    ids=["no-limit", "limit-50"],
)
def test_a_buffer_grows_by_a_quarter_in_whole_steps_up_to_the_limit(limit, rooms):
    """The room held follows the output: 8 positions, then a quarter more or 8, whichever is
    more, rounded up to steps of 8 (worked out by hand), never past the search's limit."""
    layer = cache_module.LayerCache(limit)
    seen = []
    for t in range(rooms[-1]):
        keys = torch.full((2, 1, 1, 3), float(t))  # (B, H, T, Dh)
        layer.append(keys, -keys)
        room = layer._kv.size(3)  # type: ignore[union-attr]
        if not seen or seen[-1] != room:
            seen.append(room)
    assert seen == rooms
    assert torch.equal(layer.self_keys[0, 0, :, 0], torch.arange(float(rooms[-1])))


def test_rows_that_stay_are_gathered_into_smaller_buffers_when_half_have_left():
    """Beam reordering keeps the buffer; when at most half the rows stay, they move into a
    buffer of their number and the big one is let go (the memory of finished sentences)."""
    cache = cache_module.DecoderCache.empty(2)
    keys = torch.arange(8.0)[:, None, None, None].expand(8, 1, 3, 2).contiguous()  # (B, H, T, Dh)
    for layer in cache.layers:
        layer.append(keys, keys + 100)
    cache.reorder(torch.tensor([1, 0, 3, 2, 5, 4, 7, 6]))  # all stay: same room, new order
    assert [layer._kv.size(1) for layer in cache.layers] == [8, 8]
    assert cache._spare is not None and cache._spare.size(1) == 8
    cache.keep(torch.tensor([0, 5, 6]), None)  # 3 of 8 stay
    for layer in cache.layers:
        assert layer._kv.size(1) == 3  # type: ignore[union-attr]
        assert layer.self_keys[:, 0, 0, 0].tolist() == [1.0, 4.0, 7.0]
        assert layer.self_values[:, 0, 0, 0].tolist() == [101.0, 104.0, 107.0]
    assert cache._spare is None


SEARCHES = {
    "greedy": lambda m, src, **kw: greedy_search(m, src, DC(max_len_b=12), **kw),
    "beam": lambda m, src, **kw: beam_search(m, src, DC(beam_size=4, nbest=3, max_len_b=12), **kw),
    "sample": lambda m, src, **kw: sample(
        m, src, DC(sampling=True, max_len_b=12, sampling_seed=7), **kw
    ),
}


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("make_model", [tiny, varied], ids=["tiny", "varied"])
def test_cached_and_uncached_search_agree(search, make_model):
    model, src = make_model(), padded(SENTENCES)
    cached = SEARCHES[search](model, src, use_cache=True)
    uncached = SEARCHES[search](model, src, use_cache=False)
    assert_same(cached, uncached)


@pytest.mark.parametrize("search", SEARCHES)
def test_the_cache_never_reads_a_position_it_has_not_written(search, monkeypatch):
    """A growing cache's buffers are not zeroed (cache.LayerCache._buffer): filled with NaN
    instead, any read of a slot before its write would reach the scores. Longer outputs than
    8 positions (the first room) make the buffers grow; beam search's finished sentences make
    them shrink into new ones."""
    model, src = varied(), padded(SENTENCES)
    expected = SEARCHES[search](model, src, use_cache=True)
    made = []

    def poisoned(self, like, shape):
        made.append(shape)
        return like.new_zeros(shape) if self.fixed else like.new_full(shape, float("nan"))

    monkeypatch.setattr(cache_module.LayerCache, "_buffer", poisoned)
    assert_same(SEARCHES[search](model, src, use_cache=True), expected)
    assert len({shape[3] for shape in made}) > 1  # the buffers grew


# --- Searches on a random model --------------------------------------------------------------


@pytest.mark.parametrize("use_cache", [True, False])
def test_beams_that_share_their_sentence_encoder_output_find_what_k_copies_find(use_cache):
    model, src = varied(), padded(SENTENCES)
    search = DC(beam_size=4, nbest=3, max_len_b=12)
    shared = beam_search(model, src, search, use_cache=use_cache)
    model.beams_share_memory = False  # the encoder output copied into every beam's row
    copied = beam_search(model, src, search, use_cache=use_cache)
    assert_same(shared, copied, tol=1e-5)


def test_a_decoder_layer_folds_k_rows_of_queries_over_one_row_of_memory():
    layer = varied().decoder.layers[0]
    N, K, T, S, D = 3, 4, 5, 7, layer.self_attn.w_q.in_features
    x, memory = torch.randn(N * K, T, D), torch.randn(N, S, D)
    src_mask = torch.ones(N, 1, 1, S, dtype=torch.bool)
    src_mask[1, ..., 4:] = False  # sentence 1 is shorter: its beams must not read its padding
    with torch.no_grad():
        folded, w_folded = layer(x, memory, None, src_mask, need_weights=True)
        copies = memory.repeat_interleave(K, dim=0), src_mask.repeat_interleave(K, dim=0)
        each, w_each = layer(x, copies[0], None, copies[1], need_weights=True)
    torch.testing.assert_close(folded, each, rtol=1e-4, atol=1e-4)  # fused kernels, other blocks
    assert w_folded.cross_attention.shape == w_each.cross_attention.shape == (N * K, 4, T, S)
    assert (w_folded.cross_attention - w_each.cross_attention).abs().max() < 1e-6
    assert w_folded.cross_attention[K : 2 * K, ..., 4:].abs().max() == 0


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_a_decoding_step_gives_the_numbers_of_the_layers_own_path(norm_first, activation):
    """``DecoderLayer.step`` (inference on a CPU, one new position per row) against the layer's
    general path, which ``need_weights`` takes: equal outputs to float32 rounding (its
    attention multiplies and sums where ``bmm`` would not use BLAS: test_attention.py) and
    equal caches, bit for bit, over steps that grow the buffers, with K = 2 beams per
    sentence folded over one memory row, a padded source and an empty one (nothing to attend
    to: zeros, as the reference)."""
    torch.manual_seed(0)
    layer = tiny(norm_first=norm_first, activation=activation).decoder.layers[0].eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0.0, 0.5)
    N, K, S, D = 3, 2, 5, layer.self_attn.w_q.in_features
    memory = torch.randn(N, S, D)
    src_mask = torch.ones(N, 1, 1, S, dtype=torch.bool)
    src_mask[1, ..., 3:] = False  # a shorter sentence
    src_mask[2] = False  # an empty one
    fast, general = cache_module.LayerCache(), cache_module.LayerCache()
    capacity = cache_module.GROWTH
    with torch.no_grad():
        for t in range(capacity + 3):  # past the first buffer's room
            x = torch.randn(N * K, 1, D)
            stepped, none = layer(x, memory, None, src_mask, fast)
            assert none is None and layer._can_step(x, None, fast, False)
            reference, weights = layer(x, memory, None, src_mask, general, need_weights=True)
            assert weights is not None  # the general path
            torch.testing.assert_close(stepped, reference, rtol=1e-5, atol=1e-5, msg=f"step {t}")
            assert torch.equal(fast.self_keys, general.self_keys)
            assert torch.equal(fast.self_values, general.self_values)
            assert torch.equal(fast.cross_keys, general.cross_keys)
            assert weights.cross_attention[K * 2 :].abs().max() == 0  # the empty source's rows
    assert fast.length == general.length == capacity + 3
    assert not stepped.isnan().any()


def test_the_decoders_steps_make_the_blocked_source_keys_once_per_mask():
    """``Decoder.forward``'s step path makes the encoder-decoder attention's ``Blocked`` once
    for a mask and every layer, anew for a new mask (sentences left), and gives the general
    path's numbers with an empty source among the rows (nothing to attend to)."""
    torch.manual_seed(0)
    model = tiny(n_decoder_layers=2).eval()
    decoder, N, S = model.decoder, 4, 6
    D = model.config.d_model
    memory = torch.randn(N, S, D)
    src_mask = torch.ones(N, 1, 1, S, dtype=torch.bool)
    src_mask[1, ..., 2:] = False
    fast, general = model.new_cache(8), model.new_cache(8)
    made = []
    of = cache_module.Blocked.of
    with torch.no_grad():
        for mask in (src_mask, src_mask.clone(), src_mask.clone()):
            if mask is not src_mask:
                mask[3] = False  # an empty source after the first mask
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(cache_module.Blocked, "of", lambda m: made.append(m) or of(m))
                for _ in range(2):
                    x = torch.randn(N, 1, D)
                    stepped, _ = decoder(x, memory, None, mask, fast)
                    reference, _ = decoder(x, memory, None, mask, general, need_weights=True)
                    torch.testing.assert_close(stepped, reference, rtol=1e-5, atol=1e-5)
    assert len(made) == 3  # one per mask, not one per layer and step
    assert fast.blocked(made[-1]).some_query_has_none


def test_rows_kept_are_few_sizes_that_hold_the_running_rows():
    """A batch keeps the running rows, in one of a few sizes (1, 2, 4, 8, multiples of 16),
    never more than it had; the fewer run, the fewer it keeps."""
    sizes = set()
    for rows in (1, 5, 16, 64, 100, 256):
        kept = [rows_kept(running, rows) for running in range(1, rows + 1)]
        assert all(r <= k <= rows for r, k in zip(range(1, rows + 1), kept, strict=True))
        assert kept == sorted(kept)
        sizes |= {k for k in kept if k != rows}
    assert sizes <= {1, 2, 4, 8} | set(range(16, 257, 16))
    assert rows_kept(40, 64) == 48 and rows_kept(3, 64) == 4 and rows_kept(9, 64) == 16


@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_a_search_keeps_its_batch_to_few_row_counts_and_each_sentence_its_output(search):
    """Sentences that finish stay in the batch, their outputs unused, until the rest fit a
    smaller size (``rows_kept``; beam search: K rows per sentence): 40 sentences that end at
    many different steps make few distinct row counts, and each sentence's output is what it
    gets alone. Sampling lets finished rows go at once."""
    model = varied()
    g = torch.Generator().manual_seed(3)
    sentences = [torch.randint(4, 40, (int(n),), generator=g).tolist() + [EOS_ID]
                 for n in torch.randint(1, 12, (40,), generator=g)]  # fmt: skip
    rows = []
    output = model.output
    model.output = torch.nn.Sequential()  # a module, so the hidden rows go through it whole
    model.output.register_forward_hook(lambda m, args, out: rows.append(args[0].size(0)))
    model.output.append(output)
    # one length limit for all (12 tokens): an idle row leaves at its own limit (next test)
    config = DC(max_len_a=0.0, max_len_b=12, beam_size=4 if search == "beam" else 1,
                sampling=search == "sample", sampling_seed=7)  # fmt: skip
    run = {"greedy": greedy_search, "beam": beam_search, "sample": sample}[search]
    batch = run(model, padded(sentences), config)
    K, sizes = config.beam_size, {40, 32, 16, 8, 4, 2, 1}
    if search == "sample":  # finished rows leave at once: a row's tokens may all be banned
        assert not set(rows) <= sizes, rows
        return
    best = [h[0] if isinstance(h, list) else h for h in batch]  # beam search: n-best lists
    assert len({len(h.tokens) for h in best}) >= 6, "the sentences must end at many steps"
    assert set(rows[1:]) <= {K * size for size in sizes}, rows  # beam: <s> once per sentence
    assert len(set(rows[1:])) > 1  # they shrank
    for i in range(0, 40, 7):
        alone = run(model, torch.tensor([sentences[i]]), config)[0]
        assert_same(alone, batch[i], tol=1e-3)  # MKL's sums depend on the rows a little


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_idle_rows_never_make_a_sentence_cost_more_than_its_own_length_limit(search):
    """A finished sentence's rows stay in the batch no longer than its own length limit L
    allows (L + 1 decoder steps), so that a search never makes the model process more than
    the server's budget counts for it (inference/cost.py): over sentences of mixed limits,
    the decoder's positions stay within Σ K · (L + 1), while finished rows do stay."""
    model = varied()
    g = torch.Generator().manual_seed(5)
    sentences = [torch.randint(4, 40, (int(n),), generator=g).tolist() + [EOS_ID]
                 for n in torch.randint(1, 16, (40,), generator=g)]  # fmt: skip
    K = 4 if search == "beam" else 1
    src, config = padded(sentences), DC(max_len_a=1.0, max_len_b=1, beam_size=K)
    limits = max_output_lengths(model, src, config.max_len_a, config.max_len_b)  # (B,)
    rows = []
    hook = model.decoder.register_forward_pre_hook(lambda m, args: rows.append(args[0].size(0)))
    try:
        outputs = {"greedy": greedy_search, "beam": beam_search}[search](model, src, config)
    finally:
        hook.remove()
    best = [h[0] if isinstance(h, list) else h for h in outputs]
    ended = sum(len(h.tokens) < int(n) for h, n in zip(best, limits, strict=True))
    assert 0 < ended < 40, "some sentences must end before their limit"
    assert sum(rows) <= K * int((limits + 1).sum()), (sum(rows), K * int((limits + 1).sum()))
    sizes = {K * size for size in (1, 2, 4, 8, *range(16, 41, 16))} | {40, K * 40}
    assert not set(rows) <= sizes, "no row left at its own limit"
    if search == "greedy":
        running = [sum(len(h.tokens) + 1 > t for h in best) for t in range(len(rows))]
        assert any(r > n for r, n in zip(rows, running, strict=True)), "no row stayed idle"


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_size_one_equals_greedy(use_cache):
    model, src = varied(), padded(SENTENCES)
    greedy = greedy_search(model, src, DC(max_len_b=12), use_cache=use_cache)
    beam = beam_search(model, src, DC(1, 0.0, max_len_b=12), use_cache=use_cache)
    assert_same([[hyp] for hyp in greedy], beam)
    limits = [len(s) + 12 for s in SENTENCES]
    assert any(len(h.tokens) < n for h, n in zip(greedy, limits, strict=True)), "all hit the limit"


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_sentence_alone_equals_sentence_inside_a_padded_batch(search):
    model = varied()
    batch = SEARCHES[search](model, padded(SENTENCES))
    for i, sentence in enumerate(SENTENCES):
        alone = SEARCHES[search](model, torch.tensor([sentence]))
        assert_same(alone[0], batch[i])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
def test_nbest_scores_equal_teacher_forced_rescoring(alpha):
    model = varied()
    results = beam_search(model, padded(SENTENCES), DC(5, alpha, 1.0, 6, nbest=5))
    for sentence, nbest in zip(SENTENCES, results, strict=True):
        assert len(nbest) == 5
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 5, "n-best entries must differ"
        for hyp in nbest:
            log_prob = rescore(model, sentence, hyp.tokens)
            assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)
            penalty = ((5 + len(hyp.tokens) + 1) / 6) ** alpha  # GNMT lp, EOS counted
            assert hyp.score == pytest.approx(log_prob / penalty, abs=1e-4)
    for sentence, hyp in zip(SENTENCES, greedy_search(model, padded(SENTENCES)), strict=True):
        # float32 sums of ~40 log-probs through two attention kernels: 3e-6 apart, relatively
        assert hyp.score == pytest.approx(rescore(model, sentence, hyp.tokens), rel=1e-5, abs=1e-4)


@pytest.mark.parametrize(("a", "b"), [(0.0, 0), (0.0, 3), (0.5, 1), (1.5, 2)])
def test_max_length_is_respected_and_hypotheses_end_cleanly(a, b):
    model = varied()
    src = padded(SENTENCES)
    limits = [math.floor(a * len(s) + b) for s in SENTENCES]
    outputs = {
        "greedy": [[h] for h in greedy_search(model, src, DC(max_len_a=a, max_len_b=b))],
        "beam": beam_search(model, src, DC(3, 0.6, a, b, nbest=3)),
        "sample": [
            [h]
            for h in sample(
                model, src, DC(max_len_a=a, max_len_b=b, sampling=True, sampling_seed=0)
            )
        ],
    }
    for name, results in outputs.items():
        for limit, hyps in zip(limits, results, strict=True):
            for hyp in hyps:
                assert len(hyp.tokens) <= limit, name
                assert not {PAD_ID, BOS_ID, EOS_ID} & set(hyp.tokens), name


def test_max_length_is_capped_by_the_model_positions():
    model = tiny(max_positions=10)
    hyps = greedy_search(model, padded(SENTENCES), DC(max_len_a=0.0, max_len_b=50))
    assert max(len(h.tokens) for h in hyps) <= 9  # <s> + 9 tokens fill the 10 positions


def test_search_restores_the_training_mode_and_uses_eval_semantics():
    model = tiny(dropout=0.3)
    expected = greedy_search(model, padded(SENTENCES))
    model.train()
    got = greedy_search(model, padded(SENTENCES))
    assert_same(got, expected)  # no dropout inside the search
    assert all(module.training for module in model.modules())
    model.eval()
    model.decoder.layers[0].train()  # one part training, the rest not: each flag as it was
    modes = [module.training for module in model.modules()]
    assert_same(greedy_search(model, padded(SENTENCES)), expected)
    assert [module.training for module in model.modules()] == modes


# --- Sampling on a random model ------------------------------------------------------------
def test_sampling_with_top_k_1_equals_greedy():
    model, src = varied(), padded(SENTENCES)
    drawn = sample(model, src, DC(sampling=True, top_k=1, sampling_seed=0))
    assert_same(drawn, greedy_search(model, src))


def test_same_seed_same_samples():
    model, src = varied(), padded(SENTENCES * 2)
    runs = [sample(model, src, DC(sampling=True, sampling_seed=s)) for s in (1, 1, 2)]
    assert_same(runs[0], runs[1])
    assert [h.tokens for h in runs[0]] != [h.tokens for h in runs[2]]


# --- translate_ids ---------------------------------------------------------------------------

CORPUS = [[5, 6, 3], [], [7, 8, 9, 10, 11, 12, 3], [13, 3], [14, 15, 16, 3], [17, 3], [18, 19, 3]]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_ids_returns_input_order_whatever_the_batching(beam_size):
    model = varied()
    nbest = min(2, beam_size)
    configs = [
        DecodeConfig(beam_size, nbest=nbest, max_len_b=10, batch_size=size) for size in (1, 3, 64)
    ]
    configs.append(DecodeConfig(beam_size, nbest=nbest, max_len_b=10, max_source_tokens=9))
    runs = [translate_ids(model, CORPUS, config) for config in configs]
    for run in runs[1:]:
        assert_same(run, runs[0])
    for sentence, hyps in zip(CORPUS, runs[0], strict=True):
        src = torch.tensor([sentence or [PAD_ID]])  # an empty sentence is a row of padding
        if beam_size == 1:
            assert_same(hyps, [greedy_search(model, src, DC(max_len_a=1.0, max_len_b=10))[0]])
        else:
            assert_same(hyps, beam_search(model, src, DC(beam_size, 0.6, 1.0, 10, nbest))[0])
    assert len(runs[0][1]) == nbest  # the empty sentence gets hypotheses too


def test_translate_ids_sampling_gives_nbest_samples_sorted_and_reproducible():
    model = varied()
    config = DecodeConfig(sampling=True, nbest=3, top_k=5, batch_size=2, sampling_seed=3)
    first, again = (translate_ids(model, CORPUS, config) for _ in range(2))
    assert_same(first, again)
    for hyps in first:
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_empty_inputs_and_padding_inside_a_sentence():
    model, empty = varied(), torch.zeros(0, 3, dtype=torch.long)
    assert greedy_search(model, empty) == beam_search(model, empty) == []
    assert translate_ids(model, [], DecodeConfig()) == []
    with pytest.raises(ValueError, match="padding"):
        translate_ids(model, [[5, PAD_ID, 6]], DecodeConfig())


def test_length_batches_respect_the_limits():
    lengths = [5, 1, 3, 0, 7, 2, 2, 9]
    widths = [max(n, 1) for n in lengths]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches = [b.tolist() for b in length_batches(widths, None, order, max_tokens=12, max_items=3)]
    assert [lengths[i] for batch in batches for i in batch] == sorted(lengths)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 12
