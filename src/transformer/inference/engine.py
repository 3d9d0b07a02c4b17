"""The engines that translate: ours (``TorchEngine``: the torch model and our search) and
CTranslate2's (``CTranslate2Engine``, ctranslate2.py), behind one interface, ``Engine``.

An engine is a model ready to translate: its tokenizers, its default search (the model's saved
decode config with any options on top), ``translate(sentences, decode, prefixes) ->
TranslationResult`` and ``score(sources, targets, decode) -> ScoreResult`` (score.py).
``load_engine`` loads either from a model directory (or one of its checkpoint folders, or an
exported model for CTranslate2). Both go through ``translate_with``,
so empty lines, truncation and line alignment are the same whichever runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from ..config import DecodeConfig, RunConfig, RuntimeConfig
from ..data.tokenizer import Tokenizers
from ..device import autocast, prepare_runtime, resolve_precision
from ..errors import ScoresNotFinite, UserError
from ..model.base import EncoderDecoder
from ..model.linear import pack_linear_layers
from ..model_dir.checkpoints import load_checkpoint
from ..model_dir.layout import model_dir_of
from .compiled import compile_decoding
from .glossary import Glossary, glossary_of
from .inputs import check_runtime, search_of
from .next_tokens import BLOCK
from .parallel import decode_threads
from .score import ScoreResult, score_ids, score_with
from .search import Stopped
from .translation import TranslationResult, tokenizers_for, translate


@dataclass
class TorchEngine:
    """A model ready to translate: weights (on their device), tokenizers, the search to use."""

    model: EncoderDecoder
    tokenizers: Tokenizers
    decode: DecodeConfig
    config: RunConfig  # saved with the checkpoint
    path: Path  # the checkpoint folder
    runtime: RuntimeConfig = RuntimeConfig()
    # the precision a search runs under autocast; None: the runtime's. fp32 where the linear
    # layers were packed in bf16 (``load_torch_engine``): they carry the precision themselves
    autocast_precision: str | None = None
    name = "torch"

    @contextmanager
    def precision(self) -> Iterator[None]:
        """The runtime's precision (autocast) around a search; scores that overflow in it
        (``search.check_scores``) are named after this model's folder."""
        device = next(self.model.parameters()).device
        precision = self.autocast_precision
        if precision is None:
            width = self.model.width
            precision = resolve_precision(self.runtime.precision, device, width, False)[0]
        try:
            with autocast(device, precision):
                yield
        except ScoresNotFinite as error:
            raise ScoresNotFinite(f"{self.path}: {error}") from None

    @property
    def device(self) -> str:
        return str(next(self.model.parameters()).device)

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def translate(
        self,
        sentences: list[str],
        decode: DecodeConfig | None = None,
        prefixes: list[str] | None = None,
        stopped: Stopped | None = None,
        glossary: Glossary | list[tuple[str, str]] | None = None,
    ) -> TranslationResult:
        """Translates with the torch model, in the runtime's precision, with ``decode`` (default:
        this engine's own search); ``prefixes`` (one per sentence, "" for none) start the
        outputs; ``stopped(i)``: nobody waits for sentence i any more, its search ends at the
        next step; ``glossary`` (a ``Glossary`` or (source, target) pairs): terms the outputs
        must contain (glossary.py)."""
        d = search_of(decode, self.decode)  # its batches sized in ``translate``
        threads = decode_threads(self.runtime, next(self.model.parameters()).device)
        with self.precision():
            tokenizers = tokenizers_for(self.tokenizers, self.decode, d)
            return translate(self.model, tokenizers, sentences, d, prefixes, stopped,
                             glossary_of(glossary), threads)  # fmt: skip

    def score(
        self, sources: list[str], targets: list[str], decode: DecodeConfig | None = None
    ) -> ScoreResult:
        """The model's log-probability of each target given its source (score.py);
        ``decode`` gives the length penalty and the batch limits."""
        d = search_of(decode, self.decode).sized_for(self.model.config, search=False)

        def run(src: list[list[int]], tgt: list[list[int]]) -> list[float]:
            return score_ids(self.model, src, tgt, d.max_source_tokens, d.batch_size)

        with self.precision():
            limit = self.model.config.max_positions
            tokenizers = tokenizers_for(self.tokenizers, self.decode, d)
            return score_with(run, tokenizers, sources, targets, limit, d.length_penalty)


class Engine(Protocol):
    """What translate, evaluate and serve need of a model: a ``TorchEngine`` or a
    ``CTranslate2Engine`` (ctranslate2.py)."""

    name: str  # "torch" or "ctranslate2"
    tokenizers: Tokenizers
    decode: DecodeConfig  # the default search
    config: RunConfig  # the run's config (data, model, decode)
    path: Path  # the checkpoint folder or the exported model

    @property
    def device(self) -> str: ...  # "cpu", "cuda:0", ...

    @property
    def parameters(self) -> int: ...  # the model's parameter count

    def translate(
        self,
        sentences: list[str],
        decode: DecodeConfig | None = None,
        prefixes: list[str] | None = None,
        stopped: Stopped | None = None,
        glossary: Glossary | None = None,  # refused by an engine without constrained search
    ) -> TranslationResult: ...

    def score(
        self, sources: list[str], targets: list[str], decode: DecodeConfig | None = None
    ) -> ScoreResult: ...


ENGINES = ("torch", "ctranslate2")


def load_torch_engine(
    model_dir: str | Path,
    checkpoint: str | None = None,
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    **search: object,
) -> TorchEngine:
    """A model directory (its ``checkpoint``: best or last, None for best) or a checkpoint
    folder (``checkpoint`` None) on the runtime's device (not the one it was trained on), with
    ``search`` options (DecodeConfig fields) on top of its decode config (a model directory's
    own, model_dir/settings.py); an ``nbest`` larger than the beam widens it."""
    check_runtime(runtime)
    device = prepare_runtime(runtime)
    loaded = load_checkpoint(Path(model_dir), checkpoint, device)
    decode = loaded.config.decode.with_search(**search)
    config_file = str(loaded.path / "config.json")  # what gave the sizes
    tokenizers = Tokenizers.load(model_dir_of(loaded.path), loaded.config.model.vocab_sizes,
                                 config_file)  # fmt: skip
    tokenizers = tokenizers.for_target_language(decode.target_language)
    precision, _ = resolve_precision(runtime.precision, device, loaded.model.width, False)
    packed = 0
    if runtime.compile:
        compile_decoding(loaded.model)  # or one line on stderr, and eager decoding
    elif runtime.pack_weights and device.type == "cpu" and precision != "fp16":
        # (fp16 runs under autocast, whose products need the plain weights: nothing packed)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float
        packed = pack_for_translation(loaded.model, dtype)
    # bf16 on a CPU: in the packed layers, not autocast; auto takes it only that way
    bf16_cpu = precision == "bf16" and device.type == "cpu"
    autocast_precision = "fp32" if bf16_cpu and (packed or runtime.precision == "auto") else None
    return TorchEngine(
        loaded.model, tokenizers, decode, loaded.config, loaded.path, runtime, autocast_precision
    )


def pack_for_translation(model: EncoderDecoder, dtype: torch.dtype = torch.float) -> int:
    """Packs ``model``'s linear layers in ``dtype`` as a model loaded to translate on a CPU is
    packed (model/linear.py): the output layer's rows padded to whole blocks of logits
    (next_tokens.py), and the plain weights released, since it only translates. Benchmarks call
    it too, so that they time what ``translate`` runs. Returns how many layers were packed."""
    return pack_linear_layers(
        model, model.output, BLOCK, dtype, model.once_per_batch(), release=True
    )


def load_engine(
    model_dir: str | Path,
    engine: str = "torch",
    checkpoint: str | None = None,
    runtime: RuntimeConfig = RuntimeConfig(),  # noqa: B008 (frozen, so sharing it is safe)
    **search: object,
) -> Engine:
    """The engine that translates: ``torch`` (``load_torch_engine``) or ``ctranslate2``, which
    loads an exported model or converts a model directory on the fly (``ctranslate2.py``)."""
    from ..export.folder import is_export
    from ..model_dir.layout import export_refusal

    if engine == "ctranslate2":
        from .ctranslate2 import load_ctranslate2

        return load_ctranslate2(model_dir, checkpoint, runtime, **search)
    if engine != "torch":
        raise UserError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
    if is_export(Path(model_dir)):
        raise export_refusal(Path(model_dir))
    return load_torch_engine(model_dir, checkpoint, runtime, **search)
