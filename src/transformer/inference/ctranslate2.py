"""The ctranslate2 engine: translate, evaluate and serve through CTranslate2 instead of our search.

It plugs into the same text path as the torch engine (``translate_with``: empty lines, the
truncation to ``max_positions`` with its warning, line alignment); the search, and the batching
by length (``batch_size`` sentences a batch), run in CTranslate2's ``translate_batch``. The
source is given exactly as our encoder sees it: the SentencePiece pieces followed by ``</s>``,
no ``<s>``; the decoder starts from ``<s>``.

How our DecodeConfig maps onto ``translate_batch``:

    beam_size 1 (greedy)    beam_size=1, length_penalty=0: the score is log P(y, </s>)
    beam_size K             beam_size=K, patience=2, num_hypotheses=2K, re-ranked by GNMT
    nbest                   the best ``nbest`` of those K
    sampling                sampling_topk=min(top_k, V) (0: all), sampling_topp=top_p,
                            sampling_temperature, num_hypotheses=nbest
    max_len_a, max_len_b    max_decoding_length = floor(a · src_len + b), raised to min_len and
                            the prefix, capped at max_positions - 1, per sentence (``search_ids``)
    batch_size              max_batch_size, batch_type="examples"
    PAD and BOS never made  suppress_sequences=[["<pad>"], ["<s>"]]
    min_len                 min_decoding_length (0: an empty output is allowed, as in ours)
    no_repeat_ngram         no_repeat_ngram_size
    repetition_penalty      repetition_penalty
    a prefix                target_prefix; CTranslate2 leaves the prefix out of the score, so
                            its log-probability (``score_batch``) is added back, as ours counts it
    alignment               return_attention: the export's alignment_layer and alignment_heads
                            are ours (``export/spec.py``); alignment_method masking: refused
                            (it scores the model again per source word: the torch engine's;
                            auto is attention here)
    score (score.py)        score_batch: the same log-probability of each target and </s>

Length penalty. CTranslate2 divides a finished hypothesis' log-probability by |Y|^α; we divide by
GNMT's ((5 + |Y|) / 6)^α (Wu et al. 2016), |Y| counting </s>. No α makes one the other, so the
engine asks for every finished hypothesis with its score (``return_scores``,
``return_end_token``), recovers each log-probability (score · |Y|^α) and ranks them by
log P / ((5 + |Y|) / 6)^α as our beam search does. The beams themselves are the same in both: K
prefixes, extended by their 2K best tokens by log-probability, those ending in </s> among the
top K finished. What can differ:
- stopping: CTranslate2 stops a sentence once K · patience hypotheses have finished; ours goes
  on while a running beam could still beat the worst of the ``nbest`` kept. With patience 1 (its
  default) CTranslate2 stopped before the best hypothesis finished in 3 of 200 number-words
  test sentences (-0.6 BLEU); with patience 2 (``PATIENCE``) in none, at the cost of longer
  searches (README, "Fast translation on a CPU");
- at the length limit CTranslate2 stops without scoring </s>; ours forces </s> and scores it;
- banning PAD and BOS, CTranslate2 renormalises the softmax over the other tokens; ours leaves
  their probability out (the same tokens, log-probabilities higher by -log(1 - p_pad - p_bos)).
For a trained model the last two are negligible; tests/test_export.py measures the first.

Stopping. CTranslate2 cannot stop a ``translate_batch`` call half-way: a sentence whose caller
left (``stopped``) before the call is not decoded, one that leaves during it is decoded to its
end. (The torch engine stops such a sentence at its next step.)

Shapes: B batch, S source length.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from ..config import DecodeConfig, RunConfig, RuntimeConfig
from ..data.batching import pad
from ..data.tokenizer import Tokenizers
from ..device import check_threads, cores, torch_on_one_thread
from ..errors import BadValue, UserError
from ..export.folder import MARKER, is_export, read_export, save_model
from ..export.spec import import_ctranslate2
from ..model.build import parameter_count, require_transformer
from ..model_dir.checkpoints import load_checkpoint
from ..model_dir.layout import ignored_choice, model_dir_of
from ..vocab import BOS_ID, EOS_ID, PAD_ID
from .alignment import NO_MASKING
from .glossary import NO_CONSTRAINED_SEARCH
from .greedy import NO_SEED
from .inputs import check_ids, check_runtime, search_of
from .parallel import DecodeThreads
from .score import ScoreResult, score_with
from .search import Hypothesis, Stopped, gnmt_length_penalty, output_length_limits
from .translation import TranslationResult, tokenizers_for, translate_with

PATIENCE = 2.0  # beam search goes on until 2K hypotheses have finished (see above)


def translate_batch_options(
    decode: DecodeConfig, pieces: dict[int, str], vocab_size: int, patience: float = PATIENCE
) -> dict[str, Any]:
    """The ``translate_batch`` options that run ``decode``'s search (all but the length limit).

    Args:
        pieces: the target pieces of the special ids, {id: piece}.
        vocab_size: the target vocabulary's size; a larger ``top_k`` means all of it, as in ours.
        patience: beam search stops a sentence once ``beam_size · patience`` have finished.
    """
    options: dict[str, Any] = {
        "max_input_length": 0,  # sources arrive already cut to max_positions (translate_with)
        "min_decoding_length": decode.min_len,  # 0: an empty translation is allowed, as in ours
        "suppress_sequences": [[pieces[PAD_ID]], [pieces[BOS_ID]]],
        "return_scores": True,
        "return_end_token": True,  # tells a finished hypothesis from one cut at the limit
        "no_repeat_ngram_size": decode.no_repeat_ngram,
        "repetition_penalty": decode.repetition_penalty,
        "return_attention": decode.alignment,
    }
    if decode.sampling:
        return options | {"beam_size": 1, "num_hypotheses": decode.nbest, "length_penalty": 0.0,
                          "sampling_topk": min(decode.top_k, vocab_size),  # > V: refused
                          "sampling_topp": decode.top_p,
                          "sampling_temperature": decode.temperature}  # fmt: skip
    if decode.beam_size == 1:
        return options | {"beam_size": 1, "num_hypotheses": 1, "length_penalty": 0.0}
    finished = round(decode.beam_size * patience)  # all of them come back, for GNMT re-ranking
    return options | {"beam_size": decode.beam_size, "num_hypotheses": finished,
                      "length_penalty": decode.length_penalty, "patience": patience}  # fmt: skip


@dataclass
class CTranslate2Engine:
    """A CTranslate2 model ready to translate, with our tokenizers and search settings."""

    ct2: Any  # the ctranslate2.Translator that runs the model
    tokenizers: Tokenizers
    decode: DecodeConfig  # the default search
    config: RunConfig  # the run's config (model, data, decode)
    path: Path  # the export folder, or the checkpoint folder converted on the fly
    patience: float = PATIENCE
    alignment_heads: int | None = None  # heads its attention averages (None: all of them)
    threads: DecodeThreads = DecodeThreads()  # its inter_threads, to cut batches as ours are
    name = "ctranslate2"

    def __post_init__(self) -> None:
        self._src_pieces = self.tokenizers.src.vocabulary()  # id -> piece
        self._tgt_pieces = self.tokenizers.tgt.vocabulary()
        self._tgt_ids = {p: i for i, p in enumerate(self._tgt_pieces)}
        self._special = {i: self.tokenizers.tgt.id_to_piece(i) for i in (PAD_ID, BOS_ID)}

    def _options_for(self, decode: DecodeConfig) -> dict[str, Any]:
        vocab = self.config.model.tgt_vocab_size  # the output layer's rows: CTranslate2's V
        return translate_batch_options(decode, self._special, vocab, self.patience)

    @property
    def device(self) -> str:
        if self.ct2.device == "cpu":
            return "cpu"
        return f"{self.ct2.device}:{self.ct2.device_index[0]}"

    @cached_property
    def parameters(self) -> int:
        """The parameter count of the model it was exported from."""
        return parameter_count(self.config.model)

    def translate(
        self,
        sentences: list[str],
        decode: DecodeConfig | None = None,
        prefixes: list[str] | None = None,
        stopped: Stopped | None = None,
        glossary: object = None,
    ) -> TranslationResult:
        """Translates ``sentences`` exactly as the torch engine's ``translate`` does, text-wise,
        with ``decode`` (default: this engine's own search) and ``prefixes``; the sentences
        already ``stopped`` are left out (see the module docstring). A ``glossary`` is refused:
        CTranslate2 has no constrained search."""
        if glossary:
            raise UserError(NO_CONSTRAINED_SEARCH)
        d = search_of(decode, self.decode).sized_for(self.config.model)
        limit = self.config.model.max_positions
        tokenizers = tokenizers_for(self.tokenizers, self.decode, d)
        return translate_with(lambda ids, forced, left, _: self.search_ids(ids, d, forced, left),
                              tokenizers, sentences, limit, d, prefixes, stopped)  # fmt: skip

    def score(
        self, sources: list[str], targets: list[str], decode: DecodeConfig | None = None
    ) -> ScoreResult:
        """Each target's log-probability given its source, by CTranslate2's ``score_batch``."""
        d = search_of(decode, self.decode).sized_for(self.config.model, search=False)

        def run(src: list[list[int]], tgt: list[list[int]]) -> list[float]:
            source = [[self._src_pieces[i] for i in ids] for ids in src]
            target = [[self._tgt_pieces[i] for i in ids] for ids in tgt]
            found = self.ct2.score_batch(source, target, max_batch_size=d.batch_size,
                                         max_input_length=0)  # fmt: skip
            return [sum(r.log_probs) for r in found]  # the pieces' and </s>'s

        limit = self.config.model.max_positions
        return score_with(
            run,
            tokenizers_for(self.tokenizers, self.decode, d),
            sources,
            targets,
            limit,
            d.length_penalty,
        )

    def search_ids(
        self,
        sentences: list[list[int]],
        decode: DecodeConfig | None = None,
        prefixes: list[list[int]] | None = None,
        stopped: Stopped | None = None,
    ) -> list[list[Hypothesis]]:
        """Source ids (pieces + EOS), and target prefix ids ([] for none) -> up to ``nbest``
        hypotheses each, best first.

        One ``translate_batch`` call for all of them (CTranslate2 sorts them by length, cuts
        batches of ``batch_size`` sentences and decodes ``inter_threads`` batches at once), at
        the largest output-length limit among them; then the few sentences whose search reached
        their own, lower limit are decoded again with exactly that limit. A search that ended
        before a sentence's limit is the one that limit gives, so each sentence gets its own
        limit, as in the torch engine. (One call per limit instead cut the batches into pieces:
        2.8x slower on Multi30k, where the limit is source length + 50.)
        """
        if stopped is not None:  # those already stopped are left out; the call cannot stop
            keep = [i for i in range(len(sentences)) if not stopped(i)]
            forced = [prefixes[i] for i in keep] if prefixes else None
            kept = self.search_ids([sentences[i] for i in keep], decode, forced)
            found = dict(zip(keep, kept, strict=True))
            return [found.get(i, []) for i in range(len(sentences))]
        d = search_of(decode, self.decode).sized_for(self.config.model)
        heads = self.config.model.n_heads
        if d.alignment and d.alignment_method == "masking":
            raise UserError(f"alignment_method {d.alignment_method}: {NO_MASKING}")
        if d.sampling and d.sampling_seed >= 0:
            raise UserError(f"sampling_seed {d.sampling_seed}: {NO_SEED}")
        if d.alignment and self.alignment_heads not in (None, heads):
            raise UserError(f"alignment: this ctranslate2 export averages {self.alignment_heads} "
                            f"of {heads} heads; export the model again for alignments")  # fmt: skip
        options = self._options_for(d)
        check_ids(sentences, self.config.model.src_vocab_size, "source sentence")
        check_ids(prefixes or [], self.config.model.tgt_vocab_size, "prefix")
        if not sentences:
            return []
        src_ids = pad(sentences)  # (B, S), only to count real tokens as the torch search does
        max_positions = self.config.model.max_positions
        forced = prefixes or [[] for _ in sentences]
        room = torch.tensor([max(d.min_len, len(p)) for p in forced])  # (B,)
        limits = output_length_limits(src_ids, d.max_len_a, d.max_len_b, max_positions, room)
        limits = limits.tolist()
        if min(limits) < 1:
            raise UserError(
                f"the ctranslate2 engine needs room for one output token; max_len_a "
                f"{d.max_len_a} and max_len_b {d.max_len_b} allow {min(limits)}"
            )
        source = [[self._src_pieces[i] for i in ids] for ids in sentences]
        target = [[self._tgt_pieces[i] for i in p] or None for p in forced]
        size = self.threads.batch_size(len(sentences), d.batch_size)  # a batch per thread
        batch = {"max_batch_size": size, "batch_type": "examples"} | options
        budget = max(limits)
        results = self._translate(source, target, prefixes, budget, batch)
        again: dict[int, list[int]] = defaultdict(list)  # limit -> rows to decode again
        for row, (result, limit) in enumerate(zip(results, limits, strict=True)):
            if limit < budget and max(map(len, result.hypotheses), default=0) >= limit:
                again[limit].append(row)  # steps counted with </s> (return_end_token)
        for limit, rows in again.items():
            exact = self._translate([source[row] for row in rows], [target[row] for row in rows],
                                    prefixes, limit, batch)  # fmt: skip
            for row, result in zip(rows, exact, strict=True):
                results[row] = result
        prefix_log_probs = self._prefix_log_probs(source, target)
        return [self._hypotheses(r, d, lp) for r, lp in zip(results, prefix_log_probs, strict=True)]

    def _translate(
        self, source: list, target: list, prefixes: list | None, limit: int, batch: dict
    ) -> list:
        """One ``translate_batch`` call (with ``target_prefix`` only if there are prefixes)."""
        with_prefix = {"target_prefix": target} if prefixes else {}
        return self.ct2.translate_batch(source, max_decoding_length=limit, **with_prefix, **batch)

    def _prefix_log_probs(self, source: list[list[str]], target: list) -> list[float]:
        """log P(prefix | source) of each row (0 without one), by ``score_batch``: CTranslate2
        leaves the prefix out of a hypothesis' score; ours counts it."""
        rows = [row for row, pieces in enumerate(target) if pieces]
        found = [0.0] * len(source)
        if rows:
            scored = self.ct2.score_batch([source[r] for r in rows], [target[r] for r in rows],
                                          max_input_length=0)  # fmt: skip
            for row, result in zip(rows, scored, strict=True):
                found[row] = sum(result.log_probs[: len(target[row])])  # without its </s>
        return found

    def _hypotheses(self, result: Any, decode: DecodeConfig, prefix_log_prob: float) -> list:
        """CTranslate2's hypotheses as ours: ids without </s>, the prefix counted in the score,
        GNMT-ranked for beam search, with attention when asked for."""
        beam = not decode.sampling and decode.beam_size > 1
        alpha = decode.length_penalty if beam else 0.0
        hypotheses = []
        for k, (pieces, score) in enumerate(zip(result.hypotheses, result.scores, strict=True)):
            ids = [self._tgt_ids[p] for p in pieces]
            tokens = ids[:-1] if ids and ids[-1] == EOS_ID else ids
            # undo CTranslate2's |Y|^α (|Y|: prefix, tokens and </s>), add the prefix
            log_prob = score * max(len(ids), 1) ** alpha + prefix_log_prob
            lp = gnmt_length_penalty(len(tokens) + 1, alpha)  # |Y| counts </s>, as in ours
            hypothesis = Hypothesis(tokens, score=log_prob / lp, log_prob=log_prob)
            if decode.alignment:
                hypothesis.attention = torch.tensor(result.attention[k])  # (steps, S)
            hypotheses.append(hypothesis)
        hypotheses.sort(key=lambda h: h.score, reverse=True)
        return hypotheses[: decode.nbest]


def load_ctranslate2(
    model_dir: str | Path,
    checkpoint: str | None = None,
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    **search: object,
) -> CTranslate2Engine:
    """An exported model (``transformer export``), or a model directory / checkpoint folder
    converted to float32 on the fly, as a CTranslate2 engine with ``search`` (DecodeConfig
    fields) on top of the run's decode config.

    The runtime maps onto ``ctranslate2.Translator``: device auto / cpu / cuda[:N]; on a CPU
    ``inter_threads`` batches decoded at once (0: one per thread) sharing ``threads`` (0: one
    per core), on a GPU ``threads`` -> intra_threads; precision fp32 or auto -> the model's
    own type, bf16 / fp16 -> bfloat16 / float16 (int8_bfloat16 / int8_float16 for int8).
    """
    check_runtime(runtime)
    if search.get("alignment_method") == "masking":
        raise UserError(f"alignment_method {search['alignment_method']}: {NO_MASKING}")
    if runtime.compile:
        raise UserError("runtime.compile compiles the torch engine's decoding; CTranslate2 runs "
                        "its own kernels: leave it out with --engine ctranslate2")  # fmt: skip
    ct2 = import_ctranslate2()
    check_threads(runtime.threads)
    check_threads(runtime.inter_threads, "inter_threads")
    path = Path(model_dir)
    if is_export(path):
        if checkpoint is not None:  # an export is one checkpoint's weights already
            raise BadValue(ignored_choice(f"checkpoint {checkpoint!r}", path, "an export"))
        info = read_export(path)
        config, heads = info.config, info.alignment_heads
        tokenizers = Tokenizers.load(path, config.model.vocab_sizes, str(path / MARKER))
        try:
            model = _ct2_model(ct2, path, runtime, info.quantization)
        except (RuntimeError, ValueError, OSError) as error:  # a damaged or incomplete export
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
            raise UserError(f"{path}: CTranslate2 cannot load this export ({reason}); export "
                            "the model again") from None  # fmt: skip
    else:
        with torch_on_one_thread():
            loaded = load_checkpoint(path, checkpoint, "cpu")
            require_transformer(loaded.config.model, "run on the ctranslate2 engine")
            config, path, heads = loaded.config, loaded.path, None  # None: every head averaged
            tokenizers = Tokenizers.load(model_dir_of(path), config.model.vocab_sizes)
            with tempfile.TemporaryDirectory(prefix="transformer-ct2-") as folder:
                save_model(loaded.model, tokenizers, config, Path(folder), "float32", str(path))
                model = _ct2_model(ct2, Path(folder), runtime, "float32")  # into memory
    decode = config.decode.with_search(**search)
    if decode.alignment_method == "masking":  # the run's own decode config
        raise UserError(f"alignment_method {decode.alignment_method}: {NO_MASKING}")
    if decode.sampling and decode.sampling_seed >= 0:
        raise UserError(f"sampling_seed {decode.sampling_seed}: {NO_SEED}")
    tokenizers = tokenizers.for_target_language(decode.target_language)
    # CTranslate2 decodes num_translators batches at once (its inter_threads on a CPU)
    threads = DecodeThreads(inter=model.num_translators) if model.device == "cpu" else None
    return CTranslate2Engine(model, tokenizers, decode, config, path, alignment_heads=heads,
                             threads=threads or DecodeThreads())  # fmt: skip


def _ct2_model(ct2: Any, folder: Path, runtime: RuntimeConfig, quantization: str) -> Any:
    """A ``ctranslate2.Translator`` on the runtime's device, threads and precision."""
    cuda_devices = ct2.get_cuda_device_count()
    device, _, index = runtime.device.partition(":")
    if device == "auto":
        device = "cuda" if cuda_devices else "cpu"
    if device == "cuda" and int(index or 0) >= cuda_devices:
        raise UserError(f"--device {runtime.device}: CTranslate2 sees {cuda_devices} CUDA "
                        "device(s)")  # fmt: skip
    compute_type = "default"  # fp32 and auto: the type the model was exported in
    if runtime.precision in ("bf16", "fp16"):
        half = {"bf16": "bfloat16", "fp16": "float16"}[runtime.precision]
        compute_type = f"int8_{half}" if quantization.startswith("int8") else half
        can = ct2.get_supported_compute_types(device, int(index or 0))
        if compute_type not in can:  # checked here: the Translator raised a bare ValueError
            raise UserError(
                f"--runtime.precision {runtime.precision}: CTranslate2 cannot compute in "
                f"{compute_type} on this {device} (only {', '.join(sorted(can))}); use fp32"
            )
    # On a CPU, batches in parallel, by default on one thread each: on the 2-core machine, int8
    # beam 4 over Multi30k's test2016 took 2.7 s with inter_threads=2 against 4.6 s with
    # intra_threads=2. The same rule as the torch engine's (parallel.decode_threads).
    if device == "cpu":
        total = runtime.threads or cores()
        inter = runtime.inter_threads or total
        threads = {"inter_threads": inter, "intra_threads": max(1, total // inter)}
    else:
        threads = {"intra_threads": runtime.threads}
    torch_threads = torch.get_num_threads()
    model = ct2.Translator(str(folder), device=device, device_index=int(index or 0),
                           compute_type=compute_type, **threads)  # fmt: skip
    # CTranslate2 sets the calling thread's OpenMP thread count to intra_threads, which is
    # torch's too: without this, torch ran on one thread for the rest of the process.
    torch.set_num_threads(torch_threads)
    return model
