"""Word alignments from encoder-decoder attention: which source word each output word came from,
as Pharaoh ``i-j`` pairs (source word i, target word j, both 0-based), the format of fairseq's
``--print-alignment``, OpenNMT's ``-report_align`` and Marian's ``--alignment``.

Attention is not alignment. The weights say where a decoder layer read from while it chose the
next token; they are trained only to help predict it, and nothing makes them point at the word
being translated (Jain & Wallace 2019; Garg et al. 2019, §2). Some heads attend to the previous
or next word, or to the source's </s>, used as a resting place. What we take is a heuristic that
works reasonably on a trained model:

- the layer: the last decoder layer (``EncoderDecoder.alignment_layer``), averaged over its
  heads, as fairseq's ``--print-alignment`` and CTranslate2 do by default. Garg et al. (2019)
  take the penultimate layer of a 6-layer decoder instead; in our small models the last layer
  was the better one: a 2-layer model trained to copy its input (tests/test_alignment.py)
  aligned 191 of 200 sentences exactly on the diagonal with the last layer's head average, 72
  with the first's. Heads are averaged, not picked, as no head is known in advance to be the
  aligning one. CTranslate2 exports carry the same choice (``alignment_layer``,
  ``alignment_heads`` in ``export/spec.py``);
- the row: the step that produced each target token (the query is the previous token), as
  fairseq and CTranslate2 report it;
- the words: SentencePiece marks a word's first piece with "▁"; a source word's column is the
  sum of its pieces' columns, a target word's row the mean of its pieces' rows, and the source's
  </s> and the target's </s> are left out (as fairseq's ``extract_hard_alignment`` does);
- hard links, symmetrised: each target word j is linked to the source word i with the largest
  P(i | j) · P(j | i), where P(i | j) is j's row of the word weights normalised over the source
  words, and P(j | i) is i's column normalised over the target words. The row alone (the source
  word attended to most, fairseq's and CTranslate2's rule) links an article to the noun after
  it, which the decoder reads ahead while writing the article ("Ein Junge" -> "A boy": both
  "A" and "boy" to "Junge"); the column says that "Ein" is read by "A" more than by any other
  target word. A soft form of aligning each way and intersecting (Och & Ney 2003; SimAlign's
  "ArgMax", Jalili Sabet et al. 2020). Measured (benchmarks/markup.py, docs/translating.md):
  on the number-words model's test pairs, 83.1% of target words linked to a source word that
  they translate, against 79.4% for the row alone; tags of 50 tagged Multi30k sentences around
  the right words 45 of 59 times against 38, by hand.

Shapes: R hypotheses, H heads, T target steps (tokens + EOS), S source length (pieces + EOS).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..model.base import EncoderDecoder
from ..vocab import BOS_ID, PAD_ID
from .search import Hypothesis

UNK_SURFACE = " \u2047 "  # what SentencePiece's decode writes for <unk>


def attach_attention(model: EncoderDecoder, src_ids: Tensor, nbest: list[list[Hypothesis]]) -> None:
    """Sets ``attention`` (len(tokens) + 1, src_len) on every hypothesis, from one teacher-forced
    pass of all of them (``model.attention_maps``, the reference attention path).

    Args:
        src_ids: the batch the hypotheses were searched from (B, S), right-padded.
        nbest: per sentence of src_ids, its hypotheses.
    """
    rows = [(i, h) for i, hyps in enumerate(nbest) for h in hyps]
    if not rows:
        return
    width = 1 + max(len(h.tokens) for _, h in rows)
    tgt = torch.full((len(rows), width), PAD_ID, dtype=torch.long, device=src_ids.device)
    for r, (_, h) in enumerate(rows):
        tgt[r, : len(h.tokens) + 1] = torch.tensor([BOS_ID, *h.tokens])
    src = src_ids[torch.tensor([i for i, _ in rows], device=src_ids.device)]  # (R, S)
    maps = model.attention_maps(src, tgt)
    layer = maps.decoder[model.alignment_layer]  # the last decoder layer, or the RNN's one
    mean = layer.cross_attention.float().mean(dim=1)  # (R, T, S) over heads
    src_len = (src != PAD_ID).sum(dim=1).tolist()  # (R,)
    for r, (_, h) in enumerate(rows):
        h.attention = mean[r, : len(h.tokens) + 1, : src_len[r]].cpu()


def word_of_pieces(pieces: list[str]) -> list[int | None]:
    """The word each piece belongs to (0-based, words as ``text.split()`` finds them in the
    pieces' text), None for a piece that is only a space."""
    words: list[int | None] = []
    count, open_word = 0, False
    for piece in pieces:
        surface = UNK_SURFACE if piece == "<unk>" else piece.replace("\u2581", " ")
        word = None
        for char in surface:
            if char.isspace():
                open_word = False
            else:
                if not open_word:
                    count, open_word = count + 1, True
                word = count - 1 if word is None else word  # its first character's word
        words.append(word)
    # A lone space piece belongs to the word after it (SentencePiece writes "▁" then ",").
    following = None
    for k in range(len(words) - 1, -1, -1):
        if words[k] is None:
            words[k] = following
        else:
            following = words[k]
    return words


def word_alignment(attention: Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> list:
    """Hard word links (i, j) from one hypothesis' attention, one per target word, by j.

    Args:
        attention: (len(tgt_pieces) + 1, len(src_pieces) + 1): rows the steps that produced
            each target piece and </s>, columns the source pieces and </s>.
        src_pieces, tgt_pieces: the pieces, without </s>.
    """
    src_words, tgt_words = word_of_pieces(src_pieces), word_of_pieces(tgt_pieces)
    n_src = 1 + max((w for w in src_words if w is not None), default=-1)
    n_tgt = 1 + max((w for w in tgt_words if w is not None), default=-1)
    if not n_src or not n_tgt:
        return []
    weights = attention[: len(tgt_pieces), : len(src_pieces)].float()  # </s> row and column out
    to_src = torch.zeros(len(src_pieces), n_src)  # (S, source words): piece -> its word
    for k, w in enumerate(src_words):
        if w is not None:
            to_src[k, w] = 1.0
    from_tgt = torch.zeros(n_tgt, len(tgt_pieces))  # (target words, T): mean of its pieces
    for k, w in enumerate(tgt_words):
        if w is not None:
            from_tgt[w, k] = 1.0
    from_tgt = from_tgt / from_tgt.sum(dim=1, keepdim=True).clamp(min=1.0)
    by_word = from_tgt @ weights @ to_src  # (target words, source words)
    tiny = torch.finfo(by_word.dtype).tiny
    source_given_target = by_word / by_word.sum(dim=1, keepdim=True).clamp(min=tiny)  # P(i | j)
    target_given_source = by_word / by_word.sum(dim=0, keepdim=True).clamp(min=tiny)  # P(j | i)
    best = (source_given_target * target_given_source).argmax(dim=1).tolist()
    return [(i, j) for j, i in enumerate(best)]


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """Links as ``i-j i-j ...`` (source word i, target word j)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
