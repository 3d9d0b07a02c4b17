"""The attention a search keeps for word alignments (``RunningBatch`` with ``aligned``) against a
teacher-forced pass over its hypotheses (``alignment.attach_attention``, the reference attention
path): the same weights, for every search, with and without the cache, with a prefix and with
glossary terms, for the Transformer and the RNN; and the same hypotheses as without alignments."""

import pytest
import torch

from transformer.config import DecodeConfig
from transformer.errors import UserError
from transformer.inference.alignment import attach_attention, cut_to_sources
from transformer.inference.search import AttentionTrail
from transformer.inference.translation import search_batch
from transformer.vocab import EOS_ID, PAD_ID

from helpers import ENCODER_DECODERS, padded, random_model

SOURCES = [[5, 9, 12, 7, EOS_ID], [3, 3, EOS_ID], [20, 4, 11, 8, 6, 30, 2, EOS_ID]]

SEARCHES = {
    "greedy": DecodeConfig(beam_size=1, max_len_b=12),
    "beam": DecodeConfig(beam_size=4, nbest=3, max_len_b=12),
    "beam, no penalty, at the limit": DecodeConfig(beam_size=3, nbest=2, length_penalty=0.0,
                                                   max_len_a=0.0, max_len_b=3),
    "sampling": DecodeConfig(sampling=True, nbest=2, sampling_seed=3, max_len_b=12),
    "rules": DecodeConfig(beam_size=2, min_len=4, no_repeat_ngram=2, max_len_b=12),
}  # fmt: skip


def searched_and_forced(model, config, use_cache=True, prefix=None, terms=None):
    """The hypotheses of one search with alignments, and each one's attention from a
    teacher-forced pass over it."""
    src = padded(SOURCES)
    aligned = DecodeConfig(**{**config.__dict__, "alignment": True})
    with torch.no_grad():
        found = search_batch(model, src, aligned, use_cache, prefix, terms=terms)
    kept = [[h.attention for h in hyps] for hyps in found]
    for hyps in found:
        for h in hyps:
            h.attention = None
    attach_attention(model, src, found)
    forced = [[h.attention for h in hyps] for hyps in found]
    return found, kept, forced


def assert_same(found, kept, forced):
    rows = 0
    for i, (hyps, mine, theirs) in enumerate(zip(found, kept, forced, strict=True)):
        for h, a, b in zip(hyps, mine, theirs, strict=True):
            assert a.shape == b.shape == (len(h.tokens) + 1, len(SOURCES[i])), (a.shape, b.shape)
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)  # float32 rounding
            torch.testing.assert_close(a.sum(dim=1), torch.ones(a.size(0)))  # over the source
            rows += a.size(0)
    assert rows > 3 * len(found)  # hypotheses of several tokens were compared


@pytest.mark.parametrize("kind", SEARCHES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_a_search_keeps_the_attention_a_teacher_forced_pass_finds(kind, use_cache):
    model = random_model(seed=1)
    assert_same(*searched_and_forced(model, SEARCHES[kind], use_cache))


@pytest.mark.parametrize("name", [n for n in ENCODER_DECODERS if not n.endswith("none")])
@pytest.mark.parametrize("kind", ["greedy", "beam"])
def test_every_model_with_attention_keeps_it_in_the_search(name, kind):
    model = ENCODER_DECODERS[name]()
    assert_same(*searched_and_forced(model, SEARCHES[kind]))


def test_a_prefix_and_glossary_terms_keep_the_attention_of_their_forced_steps():
    model = random_model(seed=2)
    prefix = padded([[7, 8], [9, PAD_ID], [PAD_ID, PAD_ID]])  # the third: no prefix
    found, kept, forced = searched_and_forced(model, SEARCHES["beam"], prefix=prefix)
    assert found[0][0].tokens[:2] == [7, 8] and found[1][0].tokens[:1] == [9]
    assert_same(found, kept, forced)
    terms = [[[11, 12]], [], [[4], [13, 14]]]
    found, kept, forced = searched_and_forced(model, SEARCHES["beam"], terms=terms)
    assert any(h.tokens[i : i + 2] == [11, 12] for h in found[0] for i in range(len(h.tokens)))
    assert_same(found, kept, forced)


@pytest.mark.parametrize("kind", SEARCHES)
def test_alignments_leave_the_hypotheses_as_they_were(kind):
    model, src = random_model(seed=4), padded(SOURCES)
    config = SEARCHES[kind]
    with torch.no_grad():
        plain = search_batch(model, src, config)
        aligned = search_batch(model, src, DecodeConfig(**{**config.__dict__, "alignment": True}))
    assert [[h.tokens for h in hyps] for hyps in aligned] == [[h.tokens for h in hyps]
                                                              for hyps in plain]  # fmt: skip
    # the same scores, bit for bit: with alignments a step on a CPU still runs the layers'
    # one-position ``step``, the alignment layer's returning the weights it computed anyway
    scores = [[(a.score, b.score) for a, b in zip(*pair, strict=True)]
              for pair in zip(aligned, plain, strict=True)]  # fmt: skip
    assert all(a == b for pairs in scores for a, b in pairs), scores
    assert all(h.attention is None for hyps in plain for h in hyps)


def test_an_rnn_without_attention_says_it_has_none():
    model, src = ENCODER_DECODERS["gru-none"](), padded(SOURCES)
    with pytest.raises(UserError, match="no attention"):
        search_batch(model, src, DecodeConfig(alignment=True))


def test_cut_to_sources_keeps_each_sentences_own_columns():
    src = padded(SOURCES)
    found = [[type("H", (), {"attention": torch.rand(3, src.size(1))})()] for _ in SOURCES]
    full = [hyps[0].attention.clone() for hyps in found]
    cut_to_sources(src, found)
    for i, hyps in enumerate(found):
        assert torch.equal(hyps[0].attention, full[i][:, : len(SOURCES[i])])


def test_the_trail_reads_back_what_copying_the_whole_history_keeps():
    """AttentionTrail against the plain way: every row's history copied at each reordering."""
    generator = torch.Generator().manual_seed(0)
    trail, history, rows = AttentionTrail(), torch.zeros(6, 0, 5), 6  # (rows, steps, S)
    for step in range(12):
        attention = torch.rand(rows, 5, generator=generator)
        trail.add(attention)
        history = torch.cat([history, attention[:, None]], dim=1)
        for _ in range(step % 3):  # none to two reorderings between steps, some rows leaving
            rows = max(1, rows - step % 2)
            chosen = torch.randint(0, history.size(0), (rows,), generator=generator)
            trail.select(chosen)
            history = history[chosen]
        asked = torch.randperm(rows, generator=generator)[: max(1, rows // 2)].tolist()
        for got, expected in zip(trail.of(asked), history[asked], strict=True):
            assert torch.equal(got, expected)
