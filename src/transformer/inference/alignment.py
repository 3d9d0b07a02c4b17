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
  fairseq and CTranslate2 report it. The search keeps these rows as it goes (``RunningBatch``
  with ``aligned``; ``cut_to_sources``), as CTranslate2's ``return_attention`` does;
  ``attach_attention`` finds the same numbers in one teacher-forced pass, for a translation
  that no search made;
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

``alignment_method: masking`` (``attach_masking``) takes the same links from another matrix:
the prediction difference (Li et al. 2019, "On the word alignment from neural machine
translation"). Each source word in turn is masked out of the encoder's input (its pieces become
PAD, so the other words keep their positions and the padding mask hides it from every
attention), the hypothesis is scored again teacher-forced, and the drop in each target piece's
log-probability is that source word's weight for it (negative drops count as 0). A target piece
that no single masked word lowers (the others still say it) keeps its attention row, scaled
far below any drop. What the model needed, rather than where a layer looked; one more pass per
source word and hypothesis, for the torch engine only.

Shapes: R hypotheses, H heads, T target steps (tokens + EOS), S source length (pieces + EOS).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from ..model.base import EncoderDecoder
from ..vocab import BOS_ID, PAD_ID
from .score import teacher_forced
from .search import Hypothesis

UNK_SURFACE = " \u2047 "  # what SentencePiece's decode writes for <unk>
NO_MASKING = ("the ctranslate2 engine cannot score the model again per source word; use "
              "--engine torch, or alignment_method attention")  # fmt: skip


def cut_to_sources(src_ids: Tensor, nbest: list[list[Hypothesis]]) -> None:
    """Cuts the ``attention`` that the search kept of every hypothesis (``RunningBatch``,
    (len(tokens) + 1, S)) to its sentence's source, pieces and EOS: (len(tokens) + 1, src_len),
    on the CPU.

    Args:
        src_ids: the batch the hypotheses were searched from (B, S), right-padded.
        nbest: per sentence of src_ids, its hypotheses.
    """
    src_len = (src_ids != PAD_ID).sum(dim=1).tolist()  # (B,)
    for length, hyps in zip(src_len, nbest, strict=True):
        for h in hyps:
            assert h.attention is not None, "the search keeps attention with decode.alignment"
            h.attention = h.attention[:, :length].cpu()


def attach_attention(model: EncoderDecoder, src_ids: Tensor, nbest: list[list[Hypothesis]]) -> None:
    """Sets ``attention`` (len(tokens) + 1, src_len) on every hypothesis, from one teacher-forced
    pass of all of them (``model.attention_maps``, the reference attention path): for targets
    that no search made, such as reference translations (a search keeps its own: cut_to_sources).

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


def attach_masking(
    model: EncoderDecoder,
    sources: list[list[int]],
    nbest: list[list[Hypothesis]],
    words: Callable[[list[int]], list[int | None]],
    max_tokens: int,
    batch_size: int,
) -> None:
    """Replaces each hypothesis' ``attention`` (set by ``attach_attention``) with the drop in
    its target pieces' log-probabilities when each source word is masked (module docstring).

    Args:
        sources: per sentence, the source ids the hypotheses were searched from (pieces + EOS).
        nbest: per sentence, its hypotheses, each with ``attention`` (len(tokens) + 1, S).
        words: source ids (without EOS) -> the word of each piece (``word_of_pieces``).
        max_tokens, batch_size: bound each teacher-forced batch (``score.teacher_forced``).
    Shape:
        each ``attention`` stays (T, S): T = len(tokens) + 1 (EOS), S = len(source); the column
        of a piece of word w holds drop(w) / the pieces of w, so that a word's columns sum to
        its drop; the EOS column and pieces of no word are 0.
    """
    of_pieces = [words(source[:-1]) for source in sources]  # per sentence: each piece's word
    masked_src, tgt = [], []  # a row per (hypothesis, source word or none)
    for source, hyps, of_piece in zip(sources, nbest, of_pieces, strict=True):
        for h in hyps:
            for w in range(-1, word_count(of_piece)):  # -1: the source as it is
                masked = [PAD_ID if w >= 0 and of_piece[k] == w else t
                          for k, t in enumerate(source[:-1])]  # fmt: skip
                masked_src.append([*masked, source[-1]])
                tgt.append(h.tokens)
    if not masked_src:
        return
    log_p: list[Tensor] = [torch.empty(0)] * len(masked_src)  # per row: (T,) gold log-probs
    for indices, picked, _ in teacher_forced(model, masked_src, tgt, max_tokens, batch_size):
        for r, row in zip(indices, picked.float().cpu(), strict=True):
            log_p[r] = row[: len(tgt[r]) + 1]
    r = 0
    for source, hyps, of_piece in zip(sources, nbest, of_pieces, strict=True):
        n_words = word_count(of_piece)
        pieces_of = torch.bincount(torch.tensor([w for w in of_piece if w is not None],
                                                dtype=torch.long), minlength=n_words)  # fmt: skip
        for h in hyps:
            full = log_p[r]  # (T,)
            drops = (
                torch.stack([full - log_p[r + 1 + w] for w in range(n_words)], dim=1)
                if n_words
                else torch.zeros(len(full), 0)
            )  # (T, words)
            drops = drops.clamp(min=0.0)
            r += 1 + n_words
            weights = torch.zeros(len(full), len(source))  # (T, S)
            for k, w in enumerate(of_piece):
                if w is not None:
                    weights[:, k] = drops[:, w] / pieces_of[w]
            silent = weights.sum(dim=1) == 0  # (T,) no masked word lowers this piece
            if h.attention is not None and silent.any():
                floor = 1e-6 * float(weights.max().clamp(min=1e-6))
                weights[silent] = h.attention[silent].float() * floor
            h.attention = weights


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


def word_count(words: list[int | None]) -> int:
    """How many words ``word_of_pieces`` found."""
    return 1 + max((w for w in words if w is not None), default=-1)


def word_alignment(attention: Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> list:
    """Hard word links (i, j) from one hypothesis' attention, one per target word, by j.

    Args:
        attention: (len(tgt_pieces) + 1, len(src_pieces) + 1): rows the steps that produced
            each target piece and </s>, columns the source pieces and </s>.
        src_pieces, tgt_pieces: the pieces, without </s>.
    """
    return word_links(attention, src_pieces, tgt_pieces)[0]


def word_links(
    attention: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[list, list]:
    """The hard word links (i, j) of ``word_alignment`` (one per target word, by j), and each
    source word's best target word (i, j), by i: the same product's largest down its column.
    The second list gives a tag a place where the first has none: a source word that no
    target word chose, and which of a word's target words is its own (``tag_placement.py``);
    ``--decode.alignment`` prints the first."""
    src_words, tgt_words = word_of_pieces(src_pieces), word_of_pieces(tgt_pieces)
    n_src, n_tgt = word_count(src_words), word_count(tgt_words)
    if not n_src or not n_tgt:
        return [], []
    # in numpy: these matrices are a few words wide, where each torch call cost more than its
    # arithmetic (36 µs a hypothesis against 106 µs; docs/speed.md)
    weights = attention[: len(tgt_pieces), : len(src_pieces)].double().numpy()  # </s> out
    to_src = np.zeros((len(src_pieces), n_src))  # (S, source words): piece -> its word
    for k, w in enumerate(src_words):
        if w is not None:
            to_src[k, w] = 1.0
    from_tgt = np.zeros((n_tgt, len(tgt_pieces)))  # (target words, T): mean of its pieces
    for k, w in enumerate(tgt_words):
        if w is not None:
            from_tgt[w, k] = 1.0
    from_tgt /= np.maximum(from_tgt.sum(axis=1, keepdims=True), 1.0)
    by_word = from_tgt @ weights @ to_src  # (target words, source words)
    tiny = np.finfo(by_word.dtype).tiny
    source_given_target = by_word / np.maximum(by_word.sum(axis=1, keepdims=True), tiny)  # P(i|j)
    target_given_source = by_word / np.maximum(by_word.sum(axis=0, keepdims=True), tiny)  # P(j|i)
    both = source_given_target * target_given_source  # (target words, source words)
    best = both.argmax(axis=1).tolist()  # each target word's source word
    best_target = both.argmax(axis=0).tolist()  # each source word's target word
    return [(i, j) for j, i in enumerate(best)], [(i, j) for i, j in enumerate(best_target)]


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """Links as ``i-j i-j ...`` (source word i, target word j)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
