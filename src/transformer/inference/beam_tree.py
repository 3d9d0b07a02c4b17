"""What beam search did, step by step: the tree of hypotheses it kept, pruned and finished.

``beam_search(..., recorder=tree)`` hands a ``BeamTree`` one ``BeamStep`` per step: the 2K
best candidates of every running sentence, which of them finish (they end with EOS among the
top K), which K go on as the new beams, and the length penalty of a hypothesis finishing now.
The tree reads these exactly as ``beam.py`` acts on them, so its finished hypotheses, best
score first, are beam search's n-best (tested). Without a recorder beam search does no extra
work. The step-through view (``inspect/step_view.py``) draws the tree.

Shapes: N sentences still running, K beams, t target steps so far.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from torch import Tensor

KEPT, FINISHED, PRUNED = "kept", "finished", "pruned"


@dataclass
class BeamStep:
    """One step of beam search, as ``beam.py`` decides it."""

    step: int  # decoder inputs so far: <s> and ``step`` tokens
    sentences: Tensor  # (N,) the sentence (index in the batch) of each block of K beams
    prefixes: Tensor  # (N·K, t + 1) each beam's decoder input, <s> first
    log_probs: Tensor  # (N, 2K) the 2K best candidates' total log-probabilities, best first
    beam: Tensor  # (N, 2K) the beam (0..K-1) each candidate extends
    token: Tensor  # (N, 2K) and the token it adds
    ends: Tensor  # (N, K) whether each of the top K candidates finishes here
    go_on: Tensor  # (N, K) which of the 2K become the new beams (indices into the 2K)
    penalty: float  # lp(step + 1), the GNMT length penalty of a hypothesis finishing now


@dataclass
class Candidate:
    """One node of the tree: a beam extended by one token."""

    step: int
    tokens: list[int]  # the prefix it makes, without <s> (with the EOS of a finished one)
    log_prob: float  # total log-probability of ``tokens``
    status: str  # KEPT (a beam of the next step), FINISHED or PRUNED
    parent: int | None  # index of the kept candidate it extends; None at step 0 (<s>)
    score: float | None = None  # FINISHED: log_prob / penalty, what beam search ranks by
    penalty: float | None = None  # FINISHED: the length penalty lp(len(tokens))


class BeamTree:
    """A recorder for ``beam_search``: every step's candidates, per sentence."""

    def __init__(self) -> None:
        self.nodes: dict[int, list[Candidate]] = defaultdict(list)  # per sentence
        self.last_step: dict[int, int] = {}  # the last step each sentence ran
        self._beams: dict[int, list[int]] = {}  # the node of each beam 0..K-1, per sentence

    def __call__(self, found: BeamStep) -> None:
        """Records one step (called by ``beam_search``)."""
        K = found.ends.size(1)
        sentences = found.sentences.tolist()
        prefixes, log_probs = found.prefixes[:, 1:].tolist(), found.log_probs.tolist()
        beams, tokens = found.beam.tolist(), found.token.tolist()
        ends, go_on = found.ends.tolist(), found.go_on.tolist()
        for n, sentence in enumerate(sentences):
            nodes, parents = self.nodes[sentence], self._beams.get(sentence)
            self.last_step[sentence] = found.step
            index_of: dict[int, int] = {}  # candidate j (0..2K-1) -> node index
            candidates = zip(beams[n], tokens[n], log_probs[n], strict=True)
            for j, (b, token, log_prob) in enumerate(candidates):
                if log_prob == float("-inf"):  # not a real candidate (step 0, forced EOS)
                    continue
                status = FINISHED if j < K and ends[n][j] else KEPT if j in go_on[n] else PRUNED
                node = Candidate(found.step, [*prefixes[n * K + b], token], log_prob, status,
                                 parents[b] if parents else None)  # fmt: skip
                if status == FINISHED:
                    node.score, node.penalty = log_prob / found.penalty, found.penalty
                index_of[j] = len(nodes)
                nodes.append(node)
            self._beams[sentence] = [index_of.get(j, -1) for j in go_on[n]]

    def finished(self, sentence: int = 0) -> list[Candidate]:
        """The finished hypotheses of a sentence, best score first."""
        done = [node for node in self.nodes[sentence] if node.status == FINISHED]
        return sorted(done, key=lambda node: node.score, reverse=True)
