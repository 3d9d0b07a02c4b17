"""What a search may choose at each step, beyond the model's own distribution: a forced target
prefix, a minimum length, no repeated n-grams, a repetition penalty, and nucleus (top-p)
sampling. Greedy search, sampling and beam search all go through here (``RunningBatch`` applies
``SearchRules`` to every step's scores; ``sample`` applies ``nucleus``), so the three searches
obey the same rules, and CTranslate2's ``translate_batch`` options of the same names
(``inference/ctranslate2.py``) obey them too.

Each rule is off at its neutral value (prefix empty, ``min_len`` 0, ``no_repeat_ngram`` 0,
``repetition_penalty`` 1, ``top_p`` 1) and then touches nothing, so a search without them gives
bit for bit what it gave before they existed.

How they combine at one step, in this order:
1. ``repetition_penalty`` rescales the logits of the tokens already in the hypothesis (CTRL,
   Keskar et al. 2019, §4.1; negative logits are multiplied, as Hugging Face's
   ``RepetitionPenaltyLogitsProcessor`` and CTranslate2 do), before the log-softmax: the
   distribution is renormalised, and the hypothesis' score sums these penalised log-probs;
2. PAD and BOS are banned (``search.py``);
3. a row still inside its prefix may only take the prefix's next token, at its log-probability
   (the prefix counts in the score, as if the search had chosen it); the other rules leave it
   alone, so a prefix is kept as given even if it repeats an n-gram;
4. ``no_repeat_ngram`` n bans every token that would complete an n-gram of target pieces already
   in the hypothesis (fairseq's ``--no-repeat-ngram-size``); EOS is never banned by it;
5. ``min_len`` bans EOS while the hypothesis is shorter, unless nothing else is left.
Banned tokens get -inf; the rest keep their log-probabilities (no renormalisation, as for PAD and
BOS). Length limits (``force_eos``) come after all of these, and the limits are raised to make
room for ``min_len`` and a prefix (``max_output_lengths``).

Below them, the rules of a glossary's lexical constraints: ``TermState`` follows how far a
hypothesis has got with the target terms it must contain, and ``allocate`` shares the beam
among hypotheses by that progress (dynamic beam allocation); ``constrained_beam.py`` searches
with them.

Shapes: N rows (hypotheses being extended), t tokens so far (BOS included), P prefix length,
V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..vocab import EOS_ID, PAD_ID


@dataclass(frozen=True)
class SearchRules:
    """The rules of ``DecodeConfig`` that act on every step's scores (all off by default)."""

    min_len: int = 0
    no_repeat_ngram: int = 0
    repetition_penalty: float = 1.0

    @classmethod
    def of(cls, config: DecodeConfig, longest: int) -> SearchRules:
        """The rules of ``config`` for a search whose outputs may reach ``longest`` tokens: a
        ``min_len`` beyond the model's positions yields to the limit, where EOS is forced (a
        row with every token banned would have nothing left to choose)."""
        min_len = min(config.min_len, longest)
        return cls(min_len, config.no_repeat_ngram, config.repetition_penalty)

    @property
    def active(self) -> bool:
        """Whether any rule is on (each is off at its neutral value)."""
        return self.min_len > 0 or self.no_repeat_ngram > 0 or self.repetition_penalty != 1.0

    def penalize(self, logits: Tensor, tokens: Tensor) -> Tensor:
        """Rule 1 on logits (N, V), given the rows' tokens so far (N, t), BOS first."""
        if self.repetition_penalty == 1.0 or tokens.size(1) < 2:
            return logits
        return repetition_penalty(logits, tokens[:, 1:], self.repetition_penalty)

    def restrict(self, log_probs: Tensor, tokens: Tensor, prefix: Tensor | None) -> None:
        """Rules 3-5, in place, on log_probs (N, V); tokens (N, t) with BOS first; prefix
        (N, P) right-padded with PAD_ID, or None."""
        step = tokens.size(1) - 1  # tokens generated so far
        free = None  # rows past their prefix
        if prefix is not None and step < prefix.size(1):
            forced = prefix[:, step]  # (N,)
            inside = forced != PAD_ID
            force_tokens(log_probs, inside, forced)
            free = ~inside
        if self.no_repeat_ngram and step + 1 >= self.no_repeat_ngram:
            ban_repeated_ngrams(log_probs, tokens[:, 1:], self.no_repeat_ngram, free)
        if step < self.min_len:
            others = log_probs.clone()
            others[:, EOS_ID] = float("-inf")
            ban = others.isfinite().any(dim=1)  # (N,) EOS yields only to something else
            if free is not None:
                ban &= free
            log_probs[ban, EOS_ID] = float("-inf")


def repetition_penalty(logits: Tensor, history: Tensor, penalty: float) -> Tensor:
    """CTRL's penalty: the logit x of every token in ``history`` becomes x / penalty if x > 0,
    else x · penalty (a token seen several times is penalised once).

    Args:
        logits: (N, V); history: (N, t) token ids of each row.
    Shape:
        returns a new (N, V) tensor.
    """
    logits = logits.float()  # x · 100 of a half-precision logit may overflow
    seen = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, history, True)  # (N, V)
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def force_tokens(log_probs: Tensor, rows: Tensor, tokens: Tensor) -> None:
    """Rows where ``rows`` (N,) is True may only produce ``tokens[row]``, at its log-prob."""
    index = rows.nonzero().squeeze(1)  # (R,)
    if index.numel():
        chosen = tokens[index]  # (R,)
        kept = log_probs[index, chosen]  # (R,)
        log_probs[index] = float("-inf")
        log_probs[index, chosen] = kept


def ban_repeated_ngrams(
    log_probs: Tensor, history: Tensor, n: int, rows: Tensor | None = None
) -> None:
    """Bans, in place, every token that would complete an n-gram already in a row's history.

    Args:
        log_probs: (N, V); history: (N, t) generated tokens (no BOS); rows: (N,) where to ban
            (None: every row).
    """
    t = history.size(1)
    if t < n:
        return
    last = history[:, t - n + 1 :]  # (N, n-1) the n-1 newest tokens: a new n-gram's start
    grams = history.unfold(1, n, 1)  # (N, t-n+1, n) every n-gram so far
    hit = (grams[:, :, : n - 1] == last[:, None, :]).all(dim=2)  # (N, t-n+1)
    if rows is not None:
        hit &= rows[:, None]
    row, start = hit.nonzero(as_tuple=True)
    log_probs[row, grams[row, start, n - 1]] = float("-inf")


# How many of the most likely tokens ``nucleus`` looks for the nucleus among first (then four
# times as many, until it is found): a translation's next token is seldom uncertain, and a top-k
# is cheap where a sort of the vocabulary is not (64 rows of 8,000 words, one thread: topk(64)
# 1.4 ms, sort 26 ms, more than the rest of a decoding step).
NUCLEUS_FIRST = 64


def nucleus(scores: Tensor, top_p: float) -> Tensor:
    """Keeps the fewest most likely tokens whose probability reaches ``top_p`` (Holtzman et al.
    2020, §3.1), always at least one; the others get -inf.

    A row's nucleus lies among its k most likely tokens when their probability reaches
    ``top_p`` (every other token then has p before it); k starts at ``NUCLEUS_FIRST`` and grows,
    for the rows whose nucleus is not found yet, until it holds or k is the vocabulary.

    Args:
        scores: log-probabilities or logits (N, V) (after temperature and top-k).
    Shape:
        returns a new (N, V) tensor; ``top_p`` 1 returns ``scores`` itself.
    """
    if top_p >= 1.0:
        return scores
    V = scores.size(-1)
    normaliser = scores.logsumexp(dim=-1, keepdim=True)  # (N, 1)
    kept = torch.zeros_like(scores, dtype=torch.bool)  # (N, V)
    rows = torch.arange(scores.size(0), device=scores.device)  # (n,) nucleus not found yet
    k = min(NUCLEUS_FIRST, V)
    while rows.numel():
        best, order = scores[rows].topk(k, dim=-1)  # (n, k) most likely first
        probs = (best - normaliser[rows]).exp()  # (n, k)
        before = probs.cumsum(dim=-1) - probs  # (n, k) the mass of the more likely tokens
        keep = before < top_p  # p is not reached without this token
        keep[:, 0] = True  # the most likely: a top_p below float32's least (1e-300) is 0
        found = (before[:, -1] + probs[:, -1] >= top_p) | (k == V)  # (n,) all of it is here
        kept[rows[found].unsqueeze(1), order[found]] = keep[found]
        rows, k = rows[~found], min(4 * k, V)
    return scores.masked_fill(~kept, float("-inf"))


# ------------------------------------------------------------ lexical constraints (glossaries)
@dataclass(frozen=True)
class TermState:
    """How far one hypothesis has got with its sentence's terms: lexical constraints, each a
    sequence of target ids that must appear, contiguously, in the output (a glossary's target
    terms, ``glossary.py``; searched for by ``constrained_beam.py``).

    The state follows the output token by token, as a string matcher does (Knuth, Morris and
    Pratt 1977). A term is met each time its ids end the output; its progress is the longest
    proper prefix of it that ends the output. When a token breaks it, progress falls back to the
    longest prefix of the term that still ends the broken attempt (``borders``), so a term that
    restarts inside the broken attempt is still seen: with term ``a a b``, the output
    ``a a a b`` meets it (fairseq's trie in ``token_generation_constraints.py`` goes back to the
    root instead). A token costs about one comparison per term, never a look back over the
    output. Immutable: the beams of a step share the states they extend.
    """

    terms: tuple[tuple[int, ...], ...]  # distinct terms
    needed: tuple[int, ...]  # how many times each must appear
    met: tuple[int, ...] = ()  # how many times each has appeared so far
    progress: tuple[int, ...] = ()  # each one's longest proper prefix that ends the output
    borders: tuple[tuple[int, ...], ...] = ()  # each one's ``_borders``
    # Term tokens produced so far: those of the terms met, and of the one still needed that is
    # furthest in progress (Post & Vilar 2018, §3: the bank a candidate counts towards).
    bank: int = 0

    @classmethod
    def start(cls, terms: list[list[int]]) -> TermState:
        """The state of an empty output; a term listed n times must appear n times."""
        counts: dict[tuple[int, ...], int] = {}
        for term in terms:
            if not term:
                raise ValueError("a term needs at least one token")
            counts[tuple(term)] = counts.get(tuple(term), 0) + 1
        zeros = (0,) * len(counts)
        return cls(tuple(counts), tuple(counts.values()), zeros, zeros,
                   tuple(_borders(t) for t in counts))  # fmt: skip

    def advance(self, token: int) -> TermState:
        """The state after the output grows by ``token``."""
        met, progress = list(self.met), list(self.progress)
        banked, furthest = 0, 0  # term tokens of the terms met; the longest progress on another
        for i, (term, border, n) in enumerate(zip(self.terms, self.borders, self.needed,
                                                  strict=True)):  # fmt: skip
            k = progress[i]
            while k and term[k] != token:  # broken: the longest prefix still ending the output
                k = border[k]
            if term[k] == token:
                k += 1
            if k == len(term):  # met; an overlapping next one may have begun
                met[i] += 1
                k = border[k]
            progress[i] = k
            banked += len(term) * min(met[i], n)
            furthest = max(furthest, k) if met[i] < n else furthest
        return replace(self, met=tuple(met), progress=tuple(progress), bank=banked + furthest)

    def _open(self) -> list[int]:
        """The terms still needed (their indices)."""
        return [i for i, (n, m) in enumerate(zip(self.needed, self.met, strict=True)) if m < n]

    @property
    def done(self) -> bool:
        """Every term has appeared as often as needed: the hypothesis may end."""
        return all(m >= n for n, m in zip(self.needed, self.met, strict=True))

    @property
    def banks(self) -> int:
        """The bank of a hypothesis that has met every term: the number of term tokens."""
        return sum(len(t) * n for t, n in zip(self.terms, self.needed, strict=True))

    def next_tokens(self) -> set[int]:
        """The tokens that make progress: the first of every term still needed, and the next of
        every one in progress."""
        tokens = set()
        for i in self._open():
            tokens.add(self.terms[i][0])
            tokens.add(self.terms[i][self.progress[i]])
        return tokens


def _borders(term: tuple[int, ...]) -> tuple[int, ...]:
    """For each k from 0 to len(term), the longest proper prefix of ``term[:k]`` that is also
    a suffix of it (Knuth-Morris-Pratt's failure function; 0 for k of 0 and 1)."""
    found, k = [0, 0], 0
    for i in range(1, len(term)):
        while k and term[i] != term[k]:
            k = found[k]
        if term[i] == term[k]:
            k += 1
        found.append(k)
    return tuple(found)


def allocate(banks: list[int], scores: list[float], size: int) -> list[int]:
    """Dynamic beam allocation (Post & Vilar 2018, §3.1): which ``size`` candidates the beam keeps,
    in order, given each candidate's bank (``TermState.bank``) and score.

    The beam is shared round-robin among the banks, highest first: the best candidate of the
    highest bank, then the best of the next bank down, ..., then the second best of the highest
    bank, and so on. A bank with no candidates left gives its turn to the others, so a beam that
    has more slots than candidates in the high banks fills with the best of the low ones (the
    paper's reassignment of unused slots; fairseq's ``LexicallyConstrainedBeamSearch`` stripes
    the same way).
    """
    order = sorted(range(len(banks)), key=lambda i: (-banks[i], -scores[i]))  # bank, then score
    rank: list[int] = []  # each candidate's place within its bank
    for position, i in enumerate(order):
        same = position > 0 and banks[order[position - 1]] == banks[i]
        rank.append(rank[-1] + 1 if same else 0)
    stripes = sorted(range(len(order)), key=lambda p: (rank[p], -banks[order[p]]))
    return [order[p] for p in stripes[:size]]
