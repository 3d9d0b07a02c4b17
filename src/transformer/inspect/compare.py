"""``transformer compare``: trained runs measured side by side, in the notes' terms.

For each run (a model directory with its ``metrics.jsonl``), on the test split they share:
- BLEU by source-length bucket, one line per model: the notes' "Sentence Length ↑↑ → score ↓↓"
  for the encoder-decoder without attention, and "long Sentence Accuracy ↑↑" with it (Bahdanau
  et al. 2015, figure 2). A bucket is scored with sacreBLEU's effective order (the n-gram orders
  its sentences have): standard corpus BLEU is 0 for a bucket of one- to three-word sentences
  however good their translations, since they hold no 4-grams; where every order has counts the
  two are equal. The whole test split is scored the standard way, as ``evaluate`` does;
- training speed, from the run's own log: tokens per second (source + target, padding
  included, the median of its log lines) and the seconds one epoch of its training set takes at
  that speed;
- the time of one teacher-forced forward pass against sentence length: an RNN takes its words
  one after another, the Transformer all at once ("TRANSFORMERS ≠ LSTM RNN", "Scalable");
- parameters.

``compare_runs`` measures (the numbers, a ``Comparison``); ``compare_report.py`` writes them.

Shapes: B sentences per forward pass, L sentence length (source and target).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from sacrebleu.metrics import BLEU

from ..config import DecodeConfig, RuntimeConfig
from ..data.batching import make_batches
from ..data.binarized import TokenDataset
from ..data.corpora import load_splits
from ..errors import UserError
from ..inference.engine import load_torch_engine
from ..inference.inputs import check_runtime
from ..model.base import EncoderDecoder
from ..model_dir.checkpoints import read_config, resolve_checkpoint
from ..model_dir.layout import METRICS
from ..model_dir.runs import RunDir, metrics_lines
from ..reading import typed
from ..vocab import BOS_ID, EOS_ID

LENGTHS = (8, 16, 32, 64, 128)  # sentence lengths of the forward-pass timing
FORWARD_BATCH = 16  # sentences per timed forward pass
REPEATS = 5  # timed passes per length; the median is kept
BUCKETS = 5  # source-length buckets (fewer when the test split has fewer distinct lengths)


@dataclass
class RunSummary:
    """What was measured of one run."""

    name: str  # the run folder's name
    path: str
    model: str  # e.g. "GRU + Bahdanau attention"
    parameters: int
    steps: int
    train_seconds: float | None  # None: the run has not ended yet
    tokens_per_s: float | None  # None: no training log line yet
    seconds_per_epoch: float | None  # None: its binarized training set is gone
    bleu: float  # on the whole test split
    exact: float  # share of test translations equal to the reference
    bucket_bleu: list[float] = field(default_factory=list)  # one per bucket
    bucket_exact: list[float] = field(default_factory=list)
    forward_ms: list[float] = field(default_factory=list)  # one per length


@dataclass
class Comparison:
    """Every run's figures, on one test split and one set of lengths."""

    runs: list[RunSummary]
    test: str  # what the test split is
    sentences: int
    buckets: list[tuple[int, int]]  # source words, both ends included
    bucket_sizes: list[int]
    lengths: list[int]
    forward_batch: int
    device: str
    signatures: dict[str, str]  # sacreBLEU's, of the whole split and of the buckets


def check_run(path: Path) -> None:
    """A one-line UserError unless ``path`` is a training run: a checkpoint and a metrics log."""
    if not path.is_dir():
        raise UserError(f"{path} is not a folder; compare takes training runs (model directories)")
    resolve_checkpoint(path)  # "holds no checkpoint" when it is not a run
    if not RunDir(path).metrics.is_file():
        raise UserError(f"{path} has no {METRICS}: compare needs the training log of a run")


def length_buckets(lengths: list[int], count: int = BUCKETS) -> list[tuple[int, int]]:
    """Up to ``count`` buckets of whole source lengths, each holding about as many sentences.

    Args:
        lengths: the source length (in words) of every test sentence.
    Returns:
        (shortest, longest) per bucket, in order, covering every length that occurs.
    """
    values = np.sort(np.asarray(lengths))
    edges = sorted({int(values[min(len(values) - 1, (len(values) * k) // count)])
                    for k in range(1, count)})  # fmt: skip
    buckets, low = [], int(values[0])
    for edge in [*edges, int(values[-1])]:
        if edge >= low:  # a bucket ends at this length (inclusive)
            buckets.append((low, edge))
            low = edge + 1
    return buckets


def _bucket_of(length: int, buckets: list[tuple[int, int]]) -> int:
    return next(i for i, (low, high) in enumerate(buckets) if low <= length <= high)


def _scores(hypotheses: list[str], references: list[str], bleu: BLEU) -> tuple[float, float]:
    """(corpus BLEU, exact-match share)."""
    score = bleu.corpus_score(hypotheses, [references]).score
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return score, exact / len(references)


def training_speed(path: Path) -> tuple[int, float | None, float | None, float | None]:
    """(steps, seconds trained, median tokens per second, seconds per epoch) from a run's log.

    Seconds per epoch = the padded source + target tokens of one epoch of its binarized training
    set (batched as training batches it) / tokens per second: the same count the rate uses.
    A value no training logs (a speed of 0 or below, NaN, infinite) is an error naming its line.
    """
    rows = metrics_lines(path)
    rates = [_logged(row, "tokens_per_s", origin) for origin, row in rows if "tokens_per_s" in row]
    ends = [(origin, row) for origin, row in rows if row.get("event") == "end"]
    steps = max((typed(row, "step", int, origin) for origin, row in rows if "step" in row),
                default=0)  # fmt: skip
    seconds = _logged(ends[-1][1], "seconds", ends[-1][0], zero=True) if ends else None
    rate = statistics.median(rates) if rates else None
    run, config = RunDir(path), read_config(path)
    if rate is None or not run.data.is_dir():
        return steps, seconds, rate, None
    dataset = TokenDataset.open(run.data)
    src_len, tgt_len = dataset.lengths("src"), dataset.lengths("tgt") + 1  # + BOS / EOS
    batches = make_batches(dataset, config.train.max_tokens, config.train.seed, 0)
    padded = sum(len(b) * (int(src_len[b].max()) + int(tgt_len[b].max())) for b in batches)
    return steps, seconds, rate, padded / rate


def _logged(row: dict, key: str, origin: str, zero: bool = False) -> float:
    """``row[key]`` if a finite number above 0 (or 0 too, with ``zero``); else a UserError."""
    value = typed(row, key, float, origin)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = "0 or more" if zero else "above 0"
        raise UserError(f"{origin}: {key} must be a finite number {bound}, got {value}")
    return value


@torch.inference_mode()
def forward_times(
    model: EncoderDecoder, lengths: list[int], batch: int, repeats: int
) -> list[float]:
    """Milliseconds of one teacher-forced forward pass of ``batch`` random sentences, per length.

    Source and target both have L tokens (the target starts with BOS); the median of ``repeats``
    passes after one warm-up pass.

    Shape:
        times a forward of src (B, L) and tgt (B, L) for each L.
    """
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(0)
    times = []
    for length in lengths:
        src = torch.randint(
            EOS_ID + 1, model.config.src_vocab_size, (batch, length), generator=generator
        ).to(device)  # (B, L) fmt: skip
        tgt = torch.randint(
            EOS_ID + 1, model.config.tgt_vocab_size, (batch, length), generator=generator
        ).to(device)  # (B, L) fmt: skip
        src[:, -1], tgt[:, 0] = EOS_ID, BOS_ID
        model(src, tgt)  # warm-up
        passes = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            model(src, tgt)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            passes.append(1000 * (time.perf_counter() - start))
        times.append(statistics.median(passes))
    return times


def compare_runs(
    paths: list[Path] | list[str],
    checkpoint: str | None = None,
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    search: dict | None = None,
    lengths: tuple[int, ...] = LENGTHS,
    forward_batch: int = FORWARD_BATCH,
    repeats: int = REPEATS,
) -> Comparison:
    """Measures every run (see the module docstring); every check comes before any work.

    Args:
        paths: model directories of training runs on the same test split.
        checkpoint: ``best`` or ``last`` of each (None: best).
        search: DecodeConfig fields on top of each run's own decode config (e.g. beam_size).
        lengths: the sentence lengths of the forward timing (capped by every model's positions).
    """
    if isinstance(paths, (str, Path)):  # one run's name, not a list of characters
        raise TypeError(f"paths must be a list of model directories, got {type(paths).__name__}")
    check_runtime(runtime)
    paths = [Path(path) for path in paths]  # str or Path each
    if not paths:
        raise UserError("give the training runs to compare")
    if len({p.resolve() for p in paths}) < len(paths):
        raise UserError("a run is given twice; give each run once")
    for path in paths:
        check_run(path)
    configs = [read_config(resolve_checkpoint(path, checkpoint)) for path in paths]
    tests = []
    for path, config in zip(paths, configs, strict=True):
        splits = load_splits(config.data)
        if not splits.test:
            raise UserError(f"{path}: its corpus has no test split to compare on")
        tests.append((splits.test, config.data))
    first, description = tests[0][0], _describe_test(tests[0][1], len(tests[0][0]))
    for path, (pairs, _) in zip(paths[1:], tests[1:], strict=True):
        if pairs != first:
            raise UserError(
                f"{path} and {paths[0]} have different test sets ({len(pairs)} and {len(first)} "
                "sentences): compare runs trained on the same data"
            )
    DecodeConfig().with_search(**(search or {}))  # a bad search option fails before any work
    speeds = [training_speed(path) for path in paths]  # a damaged log too
    limit = min(c.model.max_positions for c in configs)
    lengths = [n for n in lengths if n <= limit] or [limit]
    sources, references = [s for s, _ in first], [t for _, t in first]
    src_lengths = [len(s.split()) for s in sources]
    buckets = length_buckets(src_lengths)
    in_bucket = [_bucket_of(n, buckets) for n in src_lengths]
    whole, by_bucket = BLEU(), BLEU(effective_order=True)
    runs = []
    for path, speed in zip(paths, speeds, strict=True):
        engine = load_torch_engine(path, checkpoint, runtime, **(search or {}))
        hypotheses = engine.translate(sources).best
        bleu, exact = _scores(hypotheses, references, whole)
        summary = RunSummary(path.name, str(path), engine.model.name,
                             engine.parameters, *speed, bleu, exact)  # fmt: skip
        for b in range(len(buckets)):
            rows = [i for i, k in enumerate(in_bucket) if k == b]
            scores = _scores([hypotheses[i] for i in rows], [references[i] for i in rows],
                             by_bucket)  # fmt: skip
            summary.bucket_bleu.append(scores[0])
            summary.bucket_exact.append(scores[1])
        with engine.precision():
            summary.forward_ms = forward_times(engine.model, lengths, forward_batch, repeats)
        runs.append(summary)
        device = engine.device
    sizes = [in_bucket.count(b) for b in range(len(buckets))]
    signatures = {"all": str(whole.get_signature()), "buckets": str(by_bucket.get_signature())}
    return Comparison(runs, description, len(sources), buckets, sizes, lengths, forward_batch,
                      device, signatures)  # fmt: skip


def _describe_test(data, count: int) -> str:
    """E.g. "numbers en→fr test split (1,000 sentences)"."""
    corpus = data.corpus or Path(str(data.src)).name
    return f"{corpus} {data.src_lang}→{data.tgt_lang} test split ({count:,} sentences)"
