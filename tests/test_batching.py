"""Token batching: max_tokens is respected, every pair is used once, the order is reproducible."""

import random

import numpy as np
import pytest
import torch

from transformer.data.batching import Example, collate, make_batches
from transformer.errors import UserError
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID


def examples(n=500, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s, t = rng.randint(1, 30), rng.randint(1, 30)
        out.append(
            Example(
                [rng.randint(4, 99) for _ in range(s)] + [EOS_ID],
                [rng.randint(4, 99) for _ in range(t)],
            )
        )
    return out


@pytest.mark.parametrize("max_tokens", [64, 256, 1000])
def test_batches_respect_max_tokens_and_use_every_pair_once(max_tokens):
    data = examples()
    batches = make_batches(data, max_tokens, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(data)))
    for b in batches:
        batch = collate([data[i] for i in b])
        assert batch.n_padded <= max_tokens
        assert batch.src.numel() + batch.tgt_in.numel() == batch.n_padded


def test_batches_group_similar_lengths():
    data = examples(2000)
    batches = make_batches(data, 512, seed=1, epoch=0)
    spreads = [max(len(data[i].src) for i in b) - min(len(data[i].src) for i in b) for b in batches]
    assert sum(spreads) / len(spreads) < 3  # random batching would give ~20


def test_shuffle_is_reproducible_per_epoch():
    def plan(**kwargs):  # batches are index arrays (views of one sorted order)
        return [batch.tolist() for batch in make_batches(examples(), 256, **kwargs)]

    a = plan(seed=3, epoch=0)
    assert a == plan(seed=3, epoch=0)
    assert a != plan(seed=3, epoch=1)
    assert a != plan(seed=4, epoch=0)


def test_collate_shifts_the_target_right_and_pads():
    batch = collate([Example([5, 6, EOS_ID], [7, 8, 9]), Example([5, EOS_ID], [7])])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [5, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 7, 8, 9], [BOS_ID, 7, PAD_ID, PAD_ID]]
    assert batch.tgt_out.tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.n_tokens == 6
    assert torch.equal(
        batch.tgt_in[:, 1:][batch.tgt_in[:, 1:] != PAD_ID],
        batch.tgt_out[:, :-1][batch.tgt_in[:, 1:] != PAD_ID],
    )


def test_a_pair_larger_than_max_tokens_is_a_clear_error():
    with pytest.raises(UserError, match=r"20\+11 tokens .* train.max_tokens=16"):
        make_batches([Example([5] * 19 + [EOS_ID], [6] * 10)], 16, seed=0, epoch=0)


def test_stream_positions_mark_complete_epochs():
    from transformer.config import TrainConfig
    from transformer.training.loop import _finished
    from transformer.training.stream import Position, batch_stream

    data = examples(200)
    per_epoch = len(make_batches(data, 256, seed=1, epoch=0))
    stream = batch_stream(data, 256, seed=1, start=Position())
    positions = [next(stream)[0] for _ in range(per_epoch + 1)]
    assert positions[per_epoch - 2] == Position(0, per_epoch - 1)
    assert positions[per_epoch - 1] == Position(1, 0)  # epoch 0 is complete
    assert positions[per_epoch] == Position(1, 1)
    one_epoch = TrainConfig(max_epochs=1)
    assert not _finished(per_epoch - 1, positions[per_epoch - 2], one_epoch, 0.0)
    assert _finished(per_epoch, positions[per_epoch - 1], one_epoch, 0.0)
    # Resuming from a position gives the same batches as going on.
    resumed = batch_stream(data, 256, seed=1, start=positions[per_epoch - 3])
    expected = batch_stream(data, 256, seed=1, start=Position())
    for _ in range(per_epoch - 2):
        next(expected)
    for _ in range(4):
        (_, a), (_, b) = next(resumed), next(expected)
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)


def test_a_binarized_batch_equals_collate_of_its_examples():
    from transformer.data.binarized import TokenDataset

    rng = np.random.default_rng(0)
    examples = [
        Example(rng.integers(4, 50, int(a)).tolist(), rng.integers(4, 50, int(b)).tolist())
        for a, b in rng.integers(0, 12, size=(200, 2))
    ]  # fmt: skip
    dataset = TokenDataset.from_examples(examples)
    for indices in ([0], [5, 3, 199], rng.permutation(200)[:37], np.arange(200)):
        got = dataset.batch(np.asarray(indices))
        want = collate([examples[i] for i in indices])
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(got, name), getattr(want, name)), (name, indices)
