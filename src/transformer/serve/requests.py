"""What a request asks the model for, checked before it is queued: its search (the server's
default with the request's options on top), its prefixes and its glossary. Each problem is a
422 naming the field."""

from pydantic import BaseModel

from ..config import DecodeConfig
from ..errors import BadValue, UserError
from ..inference.alignment import NO_MASKING
from ..inference.engine import Engine
from ..inference.glossary import NO_CONSTRAINED_SEARCH, Glossary
from ..inference.translate import prefix_problem
from .errors import ApiError
from .schema import search_options


def search(default: DecodeConfig, **options: object) -> DecodeConfig:
    """The server's default search with a request's options on top, as ``translate --decode.*``
    puts them (``DecodeConfig.with_search``); 422 if they conflict."""
    try:
        return default.with_search(**options)
    except BadValue as error:  # e.g. nbest above beam_size, min_len above max_len_b
        raise ApiError(422, "invalid_request", str(error)) from None


def check_engine_can(engine: Engine, decode: DecodeConfig) -> None:
    """422 for a search the engine cannot do: masking alignments on CTranslate2."""
    if engine.name == "ctranslate2" and decode.alignment_method == "masking":
        raise ApiError(422, "invalid_request", f"alignment_method: {NO_MASKING}")


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
