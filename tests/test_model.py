"""Whole-model invariants: padding invariance, causality, gradients, config checks, sharing."""

import pytest
import torch

from transformer.config import ModelConfig
from transformer.model import Transformer
from transformer.vocab import BOS_ID, PAD_ID

from helpers import ENCODER_DECODERS, tiny_model


def tiny(**overrides) -> Transformer:
    return tiny_model(40, 30, **overrides)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_padding_does_not_change_real_positions(norm_first, positional):
    model = tiny(norm_first=norm_first, positional=positional)
    src = torch.tensor([[5, 6, 7, 8]])
    tgt = torch.tensor([[BOS_ID, 9, 10]])
    with torch.no_grad():
        alone = model(src, tgt)
        # The same sentence in a batch with a longer one: extra pads on both sides.
        src_batch = torch.tensor([[5, 6, 7, 8, PAD_ID, PAD_ID], [11, 12, 13, 14, 15, 16]])
        tgt_batch = torch.tensor([[BOS_ID, 9, 10, PAD_ID, PAD_ID], [BOS_ID, 4, 5, 6, 7]])
        batched = model(src_batch, tgt_batch)
    assert (batched[0, :3] - alone[0]).abs().max() < 1e-5


@pytest.mark.parametrize("name", ENCODER_DECODERS)
def test_ids_of_the_wrong_shape_or_type_are_named_in_one_error(name):
    """A 1-D sentence, float ids, a target batch that does not match its sources or an id past
    the vocabulary stopped deep inside ("too many indices", "Expected ... Long, Int", a
    ZeroDivisionError, "index out of range in self")."""
    model = ENCODER_DECODERS[name]().eval()
    src, tgt = torch.tensor([[5, 6, 3], [7, 8, 3]]), torch.tensor([[BOS_ID, 10], [BOS_ID, 11]])
    one = torch.tensor([1])
    wrong = {
        "src_ids .* got shape \\(3,\\), int64: a single sentence is ids\\[None\\]": (src[0], tgt),
        "src_ids .* got shape \\(2, 3\\), float32$": (src.float(), tgt),
        "src_ids .* got shape \\(1, 2, 3\\), int64$": (src[None], tgt),
        "tgt_ids .* got shape \\(2,\\), int64": (src, tgt[:, 0]),
        "tgt_ids has 1 rows for 2 sentences of the encoder's output": (src, tgt[:1]),
        "src_ids holds the id -3, outside the vocabulary": (src - 6, tgt),
        "tgt_ids holds the id 1000, outside the vocabulary": (src, tgt.index_fill(1, one, 1000)),
    }
    for message, (s, t) in wrong.items():
        with pytest.raises(ValueError, match=message):
            model(s, t)
    assert model(src, tgt).shape == (2, 2, model.config.tgt_vocab_size)
    assert model(src.int(), tgt.int()).shape == (2, 2, model.config.tgt_vocab_size)
    if model.beams_share_memory:  # K = 2 rows per sentence: a beam search's
        memory, mask = model.encode(src)
        assert model.decode(tgt.repeat_interleave(2, 0), memory, mask).shape[0] == 4
        with pytest.raises(ValueError, match="3 rows for 2 sentences .* K per sentence"):
            model.decode(tgt.repeat_interleave(2, 0)[:3], memory, mask)


@pytest.mark.parametrize("name", ENCODER_DECODERS)
def test_changing_a_target_token_changes_no_earlier_logits(name):
    model = ENCODER_DECODERS[name]()
    src = torch.tensor([[5, 6, 7, 8, 9, 3]])
    tgt = torch.tensor([[BOS_ID, 10, 11, 12, 13, 14]])
    with torch.no_grad():
        base = model(src, tgt)
        for t in range(1, tgt.size(1)):
            changed = tgt.clone()
            changed[0, t] = 20
            out = model(src, changed)
            assert torch.equal(out[0, :t], base[0, :t]), f"position < {t} changed"
            assert not torch.allclose(out[0, t:], base[0, t:]), f"position {t} had no effect"


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm_first": True, "positional": "learned"},
        {"share_embeddings": True, "tie_output": False},
    ],
    ids=["post-norm", "pre-norm learned", "shared untied"],
)
def test_every_parameter_receives_a_gradient(overrides):
    if overrides.get("share_embeddings"):
        cfg = ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=40, **overrides)
    else:
        cfg = ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=30, **overrides)
    torch.manual_seed(0)
    model = Transformer(cfg).train()
    src = torch.randint(4, 30, (3, 7))
    tgt = torch.randint(4, 30, (3, 5))
    loss = torch.nn.functional.cross_entropy(model(src, tgt).flatten(0, 1), tgt.flatten())
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing, missing


def test_probabilities_are_a_softmax_over_the_vocabulary():
    model = tiny()
    logits = model(torch.tensor([[5, 6]]), torch.tensor([[BOS_ID, 7, 8]]))
    assert logits.shape == (1, 3, 30)
    probs = model.probabilities(logits)
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 3))
    torch.testing.assert_close(model.log_probs(logits).exp(), probs)


def test_sharing_and_tying():
    model = tiny(share_embeddings=False, tie_output=True)
    assert model.output.weight is model.tgt_embed.tokens.weight
    assert model.src_embed.tokens is not model.tgt_embed.tokens
    shared = Transformer(
        ModelConfig.preset("tiny", src_vocab_size=30, tgt_vocab_size=30, share_embeddings=True)
    )
    assert shared.src_embed.tokens is shared.tgt_embed.tokens
    untied = tiny(tie_output=False)
    assert untied.output.weight is not untied.tgt_embed.tokens.weight


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny(dropout=0.0)
    ids = torch.tensor([[5, 6]])
    x = model.src_embed(ids)
    expected = model.src_embed.tokens.weight[ids] * 32**0.5 + model.src_embed.positions(2)
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_too_long_sequence_is_a_clear_error(positional):
    model = tiny(max_positions=8, positional=positional)
    with pytest.raises(ValueError, match=r"9 positions .* max_positions=8"):
        model(torch.full((1, 9), 5), torch.full((1, 3), 5))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"d_model": 30, "n_heads": 4}, "d_model"),
        ({"d_ff": 0}, "d_ff"),
        ({"n_heads": -2}, "n_heads"),
        ({"n_encoder_layers": 0}, "n_encoder_layers"),
        ({"dropout": 1.5}, "dropout"),
        ({"positional": "rotary"}, "positional"),
        (
            {"share_embeddings": True, "src_vocab_size": 10, "tgt_vocab_size": 12},
            "share_embeddings",
        ),
    ],
)
def test_invalid_config_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        ModelConfig.preset("tiny", **overrides)


def test_presets():
    small = ModelConfig.preset("small")
    assert (
        small.d_model,
        small.n_encoder_layers,
        small.n_decoder_layers,
        small.n_heads,
        small.d_ff,
    ) == (256, 3, 3, 4, 1024)
    base = ModelConfig.preset("base")
    assert (
        base.d_model,
        base.n_heads,
        base.d_head,
        base.d_ff,
        base.n_encoder_layers,
        base.dropout,
    ) == (512, 8, 64, 2048, 6, 0.1)
    big = ModelConfig.preset("big")
    assert (big.d_model, big.n_heads, big.d_ff) == (1024, 16, 4096)
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelConfig.preset("huge")


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_drops_p_of_every_element_position_and_keeps_the_expectation(p):
    from transformer.model.layers import Dropout

    torch.manual_seed(0)
    dropout = Dropout(p).train()
    x = torch.ones(1000, 4001)  # an odd count: the last random word is cut
    y = dropout(x)
    dropped = y == 0
    # Each of the four elements a random word feeds drops with probability p (a lane whose
    # bits were not all random would drop half or none).
    for lane in range(4):
        assert dropped.view(-1)[lane::4].float().mean().item() == pytest.approx(p, abs=0.003)
    kept = y[~dropped]
    assert torch.all(kept == kept[0]) and kept[0].item() == pytest.approx(1 / (1 - p), rel=1e-3)
    assert y.mean().item() == pytest.approx(1.0, abs=0.004)  # the expectation stays x
    torch.manual_seed(0)
    assert torch.equal(dropout(x), y)  # the seed decides, as torch's dropout


def test_dropout_gradient_is_its_mask_and_eval_is_the_identity():
    from transformer.model.layers import Dropout

    dropout = Dropout(0.2).train()
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x)
    y.sum().backward()
    assert torch.allclose(x.grad, (y / x).detach())  # dy/dx = the mask (0 or 1 / keep)
    assert len(x.grad.unique()) == 2
    dropout.eval()
    assert torch.equal(dropout(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
