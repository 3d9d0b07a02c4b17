"""Hugging Face ``MarianMTModel`` with our weights, for ``translate_speed.py``.

Marian is the closest architecture to ours in ``transformers`` (post-norm, sinusoidal positions,
√d_model scale, biases, ReLU or swish, an output bias): with our weights copied in it computes
the same function, so its ``generate`` can be timed against our search on equal work.
"""

from __future__ import annotations

import math

import torch

from transformer.config import DecodeConfig
from transformer.data.batching import pad
from transformer.model import Transformer
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID


def marian_from(model: Transformer):
    """A ``MarianMTModel`` with our weights: the same function, Hugging Face's implementation."""
    from transformers import MarianConfig, MarianMTModel

    c = model.config
    assert not c.norm_first and c.positional == "sinusoidal", "Marian is post-norm, sinusoidal"
    config = MarianConfig(
        vocab_size=c.src_vocab_size, decoder_vocab_size=c.tgt_vocab_size, d_model=c.d_model,
        encoder_layers=c.n_encoder_layers, decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads, decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function=c.activation,
        max_position_embeddings=c.max_positions, scale_embedding=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
        decoder_start_token_id=BOS_ID, forced_eos_token_id=None, tie_word_embeddings=c.tie_output,
        share_encoder_decoder_embeddings=c.share_embeddings,
    )  # fmt: skip
    marian = MarianMTModel(config).eval()
    m = marian.model
    ours = dict(model.named_parameters())
    with torch.no_grad():
        m.encoder.embed_tokens.weight.copy_(model.src_embed.tokens.weight)
        m.decoder.embed_tokens.weight.copy_(model.tgt_embed.tokens.weight)
        marian.lm_head.weight.copy_(model.output.weight)
        if model.output.bias is not None:
            marian.final_logits_bias.copy_(model.output.bias[None])
        for stack in (m.encoder.embed_positions, m.decoder.embed_positions):
            stack.weight.copy_(model.src_embed.positions.table)  # ours interleave sin and cos
        pairs = {"self_attn": "self_attn", "encoder_attn": "cross_attn"}
        norms = {"encoder": {"self_attn_layer_norm": "norm1", "final_layer_norm": "norm2"},
                 "decoder": {"self_attn_layer_norm": "norm1", "encoder_attn_layer_norm": "norm2",
                             "final_layer_norm": "norm3"}}  # fmt: skip
        for name, param in m.named_parameters():
            if ".layers." not in name:  # the embeddings, copied above
                continue
            stack, _, i, module, *rest = name.split(".")
            prefix = f"{stack}.layers.{i}"
            if module in pairs:  # self_attn.q_proj.weight -> self_attn.w_q.weight, out_proj -> w_o
                ours_name = f"{prefix}.{pairs[module]}.w_{rest[0][0]}.{rest[1]}"
            elif module in ("fc1", "fc2"):
                ours_name = f"{prefix}.feed_forward.linear{module[-1]}.{rest[0]}"
            else:
                kind = {"weight": "gamma", "bias": "beta"}[rest[0]]
                ours_name = f"{prefix}.{norms[stack][module]}.{kind}"
            param.copy_(ours[ours_name])
    return marian


def marian_runner(
    model: Transformer, decode: DecodeConfig, fixed: bool, steps: int,
    device: torch.device = torch.device("cpu"),  # noqa: B008 (immutable)
):  # fmt: skip
    """A function that translates sentences (source ids) with ``MarianMTModel.generate`` on
    ``model``'s weights, on ``device``, and returns the best output ids; ``fixed``: every
    output ``steps`` tokens + EOS."""
    marian = marian_from(model).to(device)

    def run(sentences: list[list[int]]) -> list[list[int]]:
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        found: dict[int, list[int]] = {}
        size = decode.batch_size or 64
        for rows in [order[i : i + size] for i in range(0, len(order), size)]:
            width = max(len(sentences[i]) for i in rows)
            ids = pad([sentences[i] for i in rows], device)  # (B, S)
            limit = steps + 1 if fixed else math.floor(decode.max_len_a * width + decode.max_len_b)
            with torch.inference_mode():
                out = marian.generate(
                    input_ids=ids, attention_mask=ids != PAD_ID, num_beams=decode.beam_size,
                    do_sample=False, length_penalty=decode.length_penalty,
                    max_new_tokens=limit + (0 if fixed else 1),
                    min_new_tokens=limit if fixed else 0, suppress_tokens=[PAD_ID, BOS_ID],
                )  # fmt: skip
            for i, row in zip(rows, out.tolist(), strict=True):
                tokens = [t for t in row[1:] if t != PAD_ID]
                tokens = tokens[: tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
                found[i] = tokens[:steps] if fixed else tokens
        return [found[i] for i in range(len(sentences))]

    return run
