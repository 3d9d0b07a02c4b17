"""Parity with PyTorch's own Transformer after copying weights (float32, eval mode).

torch.nn uses the opposite boolean mask convention (True = blocked), so its masks are built here
by negating ours. ``torch.nn.Transformer`` always ends each stack with a LayerNorm; the paper's
post-norm model has none, so for post-norm those two norms are removed from the reference.
"""

import pytest
import torch
from torch import nn

from transformer.config import ModelConfig
from transformer.model import Transformer
from transformer.model.decoder import DecoderLayer
from transformer.model.encoder import EncoderLayer
from transformer.model.masks import combined_mask, padding_mask

TOL = 1e-5


def config(norm_first: bool) -> ModelConfig:
    return ModelConfig.preset(
        "tiny", dropout=0.1, norm_first=norm_first, src_vocab_size=50, tgt_vocab_size=50
    )


def copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    q, k, v = theirs.in_proj_weight.chunk(3)
    bq, bk, bv = theirs.in_proj_bias.chunk(3)
    for linear, w, b in ((ours.w_q, q, bq), (ours.w_k, k, bk), (ours.w_v, v, bv)):
        linear.weight.copy_(w)
        linear.bias.copy_(b)
    ours.w_o.weight.copy_(theirs.out_proj.weight)
    ours.w_o.bias.copy_(theirs.out_proj.bias)


def copy_norm(ours, theirs: nn.LayerNorm) -> None:
    ours.gamma.copy_(theirs.weight)
    ours.beta.copy_(theirs.bias)


def copy_feed_forward(ours, theirs) -> None:
    for mine, other in ((ours.linear1, theirs.linear1), (ours.linear2, theirs.linear2)):
        mine.weight.copy_(other.weight)
        mine.bias.copy_(other.bias)


@torch.no_grad()
def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    copy_norm(ours.norm1, theirs.norm1)
    copy_norm(ours.norm2, theirs.norm2)


@torch.no_grad()
def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    copy_norm(ours.norm1, theirs.norm1)
    copy_norm(ours.norm2, theirs.norm2)
    copy_norm(ours.norm3, theirs.norm3)


def make_ids(lengths, max_len, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 50, (len(lengths), max_len), generator=g)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return ids


SRC_IDS = make_ids([7, 4, 5], 7, seed=1)  # padded source, (B, S)
TGT_IDS = make_ids([6, 6, 3], 6, seed=2)  # padded target, (B, T)


def torch_layer_kwargs(cfg):
    return dict(
        d_model=cfg.d_model,
        nhead=cfg.n_heads,
        dim_feedforward=cfg.d_ff,
        dropout=cfg.dropout,
        batch_first=True,
        norm_first=cfg.norm_first,
    )


def real(x, ids):
    return x[ids != 0]  # (number of real tokens, D)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    cfg = config(norm_first)
    ours, theirs = (
        EncoderLayer(cfg).eval(),
        nn.TransformerEncoderLayer(**torch_layer_kwargs(cfg)).eval(),
    )
    copy_encoder_layer(ours, theirs)
    x = torch.randn(*SRC_IDS.shape, cfg.d_model)
    with torch.no_grad():
        mine, _ = ours(x, padding_mask(SRC_IDS))
        ref = theirs(x, src_key_padding_mask=SRC_IDS == 0)
    assert (real(mine, SRC_IDS) - real(ref, SRC_IDS)).abs().max() < TOL


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    cfg = config(norm_first)
    ours, theirs = (
        DecoderLayer(cfg).eval(),
        nn.TransformerDecoderLayer(**torch_layer_kwargs(cfg)).eval(),
    )
    copy_decoder_layer(ours, theirs)
    memory = torch.randn(*SRC_IDS.shape, cfg.d_model)
    y = torch.randn(*TGT_IDS.shape, cfg.d_model)
    T = TGT_IDS.size(1)
    with torch.no_grad():
        mine, _ = ours(y, memory, combined_mask(TGT_IDS), padding_mask(SRC_IDS))
        ref = theirs(
            y,
            memory,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool),
            tgt_key_padding_mask=TGT_IDS == 0,
            memory_key_padding_mask=SRC_IDS == 0,
        )
    assert (real(mine, TGT_IDS) - real(ref, TGT_IDS)).abs().max() < TOL


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_decoder_stack_matches_torch_transformer(norm_first):
    torch.manual_seed(0)
    cfg = config(norm_first)
    model = Transformer(cfg).eval()
    ref = nn.Transformer(
        d_model=cfg.d_model,
        nhead=cfg.n_heads,
        num_encoder_layers=cfg.n_encoder_layers,
        num_decoder_layers=cfg.n_decoder_layers,
        dim_feedforward=cfg.d_ff,
        dropout=cfg.dropout,
        batch_first=True,
        norm_first=norm_first,
    ).eval()
    for mine, theirs in zip(model.encoder.layers, ref.encoder.layers, strict=True):
        copy_encoder_layer(mine, theirs)
    for mine, theirs in zip(model.decoder.layers, ref.decoder.layers, strict=True):
        copy_decoder_layer(mine, theirs)
    if norm_first:
        with torch.no_grad():
            copy_norm(model.encoder.final_norm, ref.encoder.norm)
            copy_norm(model.decoder.final_norm, ref.decoder.norm)
    else:
        ref.encoder.norm = None
        ref.decoder.norm = None

    # Our embeddings feed both stacks, so the comparison covers the encoder-decoder stacks.
    src = model.src_embed(SRC_IDS)
    tgt = model.tgt_embed(TGT_IDS)
    T = TGT_IDS.size(1)
    with torch.no_grad():
        memory, _ = model.encoder(src, padding_mask(SRC_IDS))
        mine, _ = model.decoder(tgt, memory, combined_mask(TGT_IDS), padding_mask(SRC_IDS))
        ref_out = ref(
            src,
            tgt,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool),
            src_key_padding_mask=SRC_IDS == 0,
            tgt_key_padding_mask=TGT_IDS == 0,
            memory_key_padding_mask=SRC_IDS == 0,
        )
    diff = (real(mine, TGT_IDS) - real(ref_out, TGT_IDS)).abs().max().item()
    assert diff < TOL, diff
    # And our full model is that stack followed by the output projection.
    logits = model(SRC_IDS, TGT_IDS)
    torch.testing.assert_close(logits, model.output(mine), atol=1e-6, rtol=0)


def test_layer_norm_matches_torch():
    from transformer.model.layers import LayerNorm, layer_norm_reference

    torch.manual_seed(0)
    ours, theirs = LayerNorm(16, eps=1e-5), nn.LayerNorm(16, eps=1e-5)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
        copy_norm(ours, theirs)
    x = torch.randn(3, 5, 16) * 4 + 2
    assert (ours(x) - theirs(x)).abs().max() < TOL
    # The notes' four steps give the same numbers as the fused kernel.
    steps = layer_norm_reference(x, ours.gamma, ours.beta, ours.eps)
    assert (steps - theirs(x)).abs().max() < TOL
