"""Attention masks: the only place in the code base where masks are built.

Convention (the one ``F.scaled_dot_product_attention`` expects): a boolean tensor where
``True`` means "this query may attend to this key" and ``False`` means "blocked". Every mask
broadcasts against attention scores of shape (B, H, Tq, Tk).

Shapes: B batch, S source length, T target length, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..vocab import PAD_ID


def padding_mask(ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """Keys that are real tokens, not padding.

    Args:
        ids: token ids, shape (B, S).
        pad_id: the padding id.
    Shape:
        returns (B, 1, 1, S): the same row of allowed keys for every head and every query.
    """
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def look_ahead_mask(length: int, past: int = 0, device: torch.device | None = None) -> Tensor:
    """The look-ahead (causal) mask: query t may attend to keys 0..t, never to later ones.

    Args:
        length: number of new query positions T.
        past: number of positions already in a key/value cache. The new queries sit at absolute
            positions past..past+T-1 and see every cached key, which keeps incremental decoding
            aligned with a full forward pass.
    Shape:
        returns (1, 1, T, past + T), lower triangular when past == 0.
    """
    query_pos = torch.arange(past, past + length, device=device)[:, None]  # (T, 1)
    key_pos = torch.arange(past + length, device=device)[None, :]  # (1, past + T)
    return (key_pos <= query_pos)[None, None]  # (1, 1, T, past + T)


def filled_slots_mask(position: Tensor, capacity: int) -> Tensor:
    """The look-ahead mask of one new query over a key/value cache of fixed size (compiled
    decoding, ``cache.FixedStep``): the query at ``position`` sees the keys 0..position, never
    the empty slots after it. ``position`` is a tensor, so that one compiled step serves every
    position.

    Shape:
        position (1,) -> (1, 1, 1, capacity).
    """
    slots = torch.arange(capacity, device=position.device)  # (capacity,)
    return (slots <= position)[None, None, None, :]  # (1, 1, 1, capacity)


def combined_mask(tgt_ids: Tensor, pad_id: int = PAD_ID) -> Tensor:
    """Decoder self-attention mask: look-ahead AND padding (the notes' element-wise product).

    A query at a padding position still sees the real keys before it, so no row is fully
    blocked; its output is ignored by the loss anyway.

    Shape:
        tgt_ids (B, T) -> (B, 1, T, T).
    """
    length = tgt_ids.size(1)
    return look_ahead_mask(length, device=tgt_ids.device) & padding_mask(tgt_ids, pad_id)
