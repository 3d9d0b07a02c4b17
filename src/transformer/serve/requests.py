"""What a request asks the model for, checked before it is queued: its search (the server's
default with the request's options on top), its prefixes and its glossary. Each problem is a
422 naming the field."""

from pydantic import BaseModel

from ..config import DecodeConfig
from ..errors import BadValue, UserError
from ..inference.alignment import NO_MASKING
from ..inference.cost import Cost
from ..inference.engine import Engine
from ..inference.glossary import NO_CONSTRAINED_SEARCH, Glossary
from ..inference.greedy import NO_SEED
from ..inference.score import TargetTooLong
from ..inference.translation import prefix_problem
from .errors import ApiError
from .schema import search_options


def check_budget(cost: Cost, most: int, advice: str) -> None:
    """422 for a request that may make the model process more than ``most`` tokens
    (``serve.max_cost``; ``inference/cost.py`` counts them), before it is queued."""
    if cost.tokens > most:
        raise ApiError(422, "over_budget", f"this request may make the model process {cost}; "
                       f"this server allows {most:,} (serve.max_cost): {advice}")  # fmt: skip


def check_targets_fit(cost: Cost, engine: Engine, targets: list[str], most: int) -> None:
    """422 naming ``targets.i`` for a target longer than the model scores (``most``
    positions, less one for <s>), found before the request is queued; ``cost``: the request's
    ``scoring_cost``, whose longest target (+ EOS) says whether to look."""
    if cost.longest <= most:
        return
    for i, target in enumerate(targets):
        try:
            TargetTooLong.check(i, len(engine.tokenizers.tgt.encode(target)), most, f"targets.{i}")
        except TargetTooLong as error:
            raise ApiError(422, "invalid_request", str(error)) from None


def check_queue(sentences: int, most: int) -> None:
    """422 for texts that alone make more sentences than the queue holds (``serve.max_queue``):
    a 429 would say to retry, and no retry could fit."""
    if sentences > most:
        raise ApiError(422, "invalid_request", f"these texts make {sentences:,} sentences to "
                       f"translate; this server queues at most {most:,} (serve.max_queue): "
                       "send fewer or shorter texts")  # fmt: skip


def search(default: DecodeConfig, **options: object) -> DecodeConfig:
    """The server's default search with a request's options on top, as ``translate --decode.*``
    puts them (``DecodeConfig.with_search``); 422 if they conflict."""
    try:
        return default.with_search(**options)
    except BadValue as error:  # e.g. nbest above beam_size, min_len above max_len_b
        raise ApiError(422, "invalid_request", str(error)) from None


def check_engine_can(engine: Engine, decode: DecodeConfig) -> None:
    """422 for a search the engine cannot do: masking alignments or seeded sampling on
    CTranslate2."""
    if engine.name == "ctranslate2" and decode.alignment_method == "masking":
        raise ApiError(422, "invalid_request", f"alignment_method: {NO_MASKING}")
    if engine.name == "ctranslate2" and decode.sampling and decode.sampling_seed >= 0:
        raise ApiError(422, "invalid_request", f"sampling_seed: {NO_SEED}")


def one_beam(default: DecodeConfig, body: BaseModel) -> DecodeConfig:
    """The search of /attention and /step-through: one beam search, its best hypothesis."""
    return search(default, **{"nbest": 1, "sampling": False, **search_options(body)})


def check_prefixes(
    engine: Engine, max_positions: int, prefixes: list[str] | None, count: int
) -> None:
    """One prefix per sentence, each leaving room for </s>: checked before the request is
    queued, so that a bad one cannot fail the requests decoded with it."""
    if prefixes is None:
        return
    if len(prefixes) != count:
        raise ApiError(422, "invalid_request", f"prefix: {len(prefixes)} for {count} sentences; "
                       "give one per sentence ('' for none)")  # fmt: skip
    for i, prefix in enumerate(prefixes):
        problem = prefix_problem(engine.tokenizers, prefix, max_positions)
        if problem:
            raise ApiError(422, "invalid_request", f"prefix.{i} {problem}")


def glossary_of(
    pairs: list[list[str]] | None, engine: Engine, decode: DecodeConfig
) -> Glossary | None:
    """A request's glossary, checked against the engine and the model before it is queued."""
    if not pairs:
        return None
    if engine.name == "ctranslate2":
        raise ApiError(422, "invalid_request", f"glossary: {NO_CONSTRAINED_SEARCH}")
    if decode.sampling:
        raise ApiError(422, "invalid_request", "glossary: a glossary needs a search, not sampling")
    try:
        glossary = Glossary.of(pairs)
        glossary.check(engine.tokenizers, engine.config.model.max_positions)
    except UserError as error:
        raise ApiError(422, "invalid_request", str(error)) from None
    return glossary


# /attention's weights are JSON numbers of about 7 characters: a million make a response of
# about 7 MB, the step-through view's budget (inspect/step_view.py). Without a bound a sentence
# of 500 tokens forced to 511 out returned 20.8 MB on the demo model, and a base-sized model
# (6 layers of 8 heads) at 1,024 positions would return hundreds of megabytes.
MAX_ATTENTION_WEIGHTS = 1_000_000


def attention_too_large(weights: int, least: bool = False) -> str | None:
    """Why an /attention answer of ``weights`` numbers (with ``least``, at least) is refused,
    or None."""
    if weights <= MAX_ATTENTION_WEIGHTS:
        return None
    at = "at least " if least else ""
    return (f"the attention of this sentence holds {at}{weights:,} weights, over the "
            f"{MAX_ATTENTION_WEIGHTS:,} an answer may; try a shorter sentence, or a lower "
            "min_len or max_len_b")  # fmt: skip


def least_attention(engine: Engine, sentence: str, decode: DecodeConfig) -> int:
    """The fewest weights /attention can return for ``sentence``: every decoder layer's heads,
    over its source tokens and at least ``min_len`` target tokens and </s>."""
    config = engine.config.model
    maps = config.n_decoder_layers * config.n_heads if config.architecture != "rnn" else 1
    source = min(len(engine.tokenizers.src.encode(sentence)) + 1, config.max_positions)
    return maps * source * (min(decode.min_len, config.max_positions - 1) + 1)
