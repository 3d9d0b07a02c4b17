"""The JSON of the HTTP API: requests, responses and errors, as pydantic models; FastAPI turns
them into the OpenAPI schema served at ``/openapi.json``.

The request models are made per server (``request_models``), so that the schema states the
server's own limits (``maxItems``, ``maxLength``, ``maximum``) and a client can read them there.
A search option's bounds are ``DecodeConfig``'s own ranges (``decoding``), narrowed where the
server allows less (``max_beam``, the model's positions): one definition for every surface.
Requests are strict: a number given as a string, or an unknown field, is an error naming it.
(No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.)
"""

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from ..config import DecodeConfig
from ..config.checks import range_of
from .config import ServeConfig

STRICT = ConfigDict(strict=True, extra="forbid")
MAX_TERMS = 1000  # glossary terms per request


class ErrorBody(BaseModel):
    """Every error: a short code for programs and one line for people, never a traceback."""

    error: str = Field(description="short code, e.g. queue_full, invalid_request")
    message: str = Field(description="what is wrong, naming the value at fault")


ALIGNMENT = (
    "word alignment, when asked for: Pharaoh 'i-j' pairs (source word i, target "
    "word j, 0-based; words split at spaces), from encoder-decoder attention"
)


class Hypothesis(BaseModel):
    text: str
    score: float | None = Field(
        description="log-probability (beam search: divided by the GNMT length penalty); "
        "null if it is not a finite number"
    )
    alignment: str | None = Field(None, description=ALIGNMENT)


class SentenceTranslation(BaseModel):
    text: str = Field(description="the best translation")
    score: float | None = Field(description="its score (see nbest)")
    nbest: list[Hypothesis] = Field(description="the best `nbest` translations, best first")
    truncated: bool = Field(description="the sentence was longer than the model accepts and "
                            "only its beginning was translated")  # fmt: skip
    alignment: str | None = Field(None, description=ALIGNMENT)


class TranslateResponse(BaseModel):
    translations: list[SentenceTranslation] = Field(description="one per sentence, in order")
    time_ms: float = Field(description="from the request's arrival to its answer")
    batch_sentences: int = Field(
        description="sentences decoded together with this request's (its own included)"
    )


class AttentionResponse(BaseModel):
    translation: str
    source_tokens: list[str] = Field(description="source pieces and </s>: the keys (columns)")
    target_tokens: list[str] = Field(
        description="<s> and the translation's pieces: the decoder's inputs (rows); row t is "
        "the step that chose the token after target_tokens[t]"
    )
    cross_attention: list[list[list[list[float]]]] = Field(
        description="encoder-decoder attention weights [layer][head][row][column]; each row "
        "sums to 1"
    )
    time_ms: float


class PairScore(BaseModel):
    log_prob: float | None = Field(
        description="log P(target pieces + </s> | source), teacher-forced; null if not finite"
    )
    per_token: float | None = Field(description="log_prob per target token (</s> counted)")
    score: float | None = Field(description="log_prob divided by the GNMT length penalty: the "
                                "score beam search ranks by")  # fmt: skip
    tokens: int = Field(description="target pieces + </s>")
    truncated: bool = Field(description="the source was cut to fit the model")


class ScoreResponse(BaseModel):
    scores: list[PairScore] = Field(description="one per pair, in order")
    time_ms: float


class StepThroughResponse(BaseModel):
    translation: str
    view: dict[str, Any] = Field(
        description="what the step-through page (GET /step-through) draws, from the model's own "
        "forward pass: tokens, embeddings and positions, every layer's Q, K, V, scores, "
        "attention weights, layer norms and feed-forward activations, the next-token "
        "probabilities and the beam search tree; matrices as base64 float32 "
        "(src/transformer/inspect/step_view.py)"
    )
    time_ms: float


class HealthResponse(BaseModel):
    status: str = Field(description="ok")
    in_flight: int = Field(description="requests being translated or waiting")


class InfoResponse(BaseModel):
    source_language: str
    target_language: str
    parameters: int
    checkpoint: str = Field(description="the checkpoint folder's name")
    engine: str = Field(description="torch (ours) or ctranslate2")
    device: str
    model: dict[str, Any] = Field(description="the model's config")
    decode: dict[str, Any] = Field(description="the default search")
    limits: dict[str, int | float] = Field(description="the request limits of this server")


def decoding(name: str, high: float | None = None) -> dict[str, float]:
    """The schema bounds of DecodeConfig field ``name`` (its range, as ``Field`` keywords), with
    its maximum lowered to ``high`` where the server allows less."""
    bounds = range_of(DecodeConfig, name).schema()
    if high is not None:
        bounds["le"] = min(bounds["le"], high)
    return bounds


def request_models(config: ServeConfig, max_positions: int) -> tuple[type, type, type, type]:
    """(TranslateRequest, AttentionRequest, ScoreRequest, StepThroughRequest) with this server's
    limits in their schema."""
    sentence = Annotated[str, Field(max_length=config.max_chars)]
    many = {"min_length": 1, "max_length": config.max_sentences}  # sentences per request

    def beam_field() -> Any:
        return Field(None, **decoding("beam_size", config.max_beam),
                     description="beam size; 1: greedy search")  # fmt: skip

    def max_len_field() -> Any:
        bounds = decoding("max_len_b", max_positions - 1) | {"ge": 1}
        return Field(None, **bounds, description="at most this many tokens out")

    class TranslateRequest(BaseModel):
        model_config = STRICT
        sentences: list[sentence] = Field(**many, description="one or more sentences")
        beam: int | None = beam_field()
        nbest: int | None = Field(None, **decoding("nbest", config.max_beam),
                                  description="translations returned per sentence")  # fmt: skip
        max_len: int | None = max_len_field()
        sampling: bool | None = Field(None, description="sample instead of searching")
        prefix: list[sentence] | None = Field(
            None, max_length=config.max_sentences, description="one target prefix per sentence, "
            "in order ('' for none): each translation starts with it, and its log-probability "
            "counts in the score"
        )  # fmt: skip
        top_p: float | None = Field(
            None,
            **decoding("top_p"),
            allow_inf_nan=False,
            description=(
                "sampling: only the fewest most likely tokens whose probability reaches p; 1: all"
            ),
        )
        min_len: int | None = Field(None, **decoding("min_len", max_positions - 1),
                                    description="no end before this many tokens")  # fmt: skip
        no_repeat_ngram: int | None = Field(
            None,
            **decoding("no_repeat_ngram", max_positions),
            description=("no n-gram of target pieces twice in a translation; 0: off"),
        )
        repetition_penalty: float | None = Field(
            None,
            **decoding("repetition_penalty"),
            allow_inf_nan=False,
            description="tokens already produced have their logit divided by this (CTRL); 1: off",
        )
        alignment: bool | None = Field(None, description="also return word alignments")
        glossary: list[Annotated[list[sentence], Field(min_length=2, max_length=2)]] | None = (
            Field(None, max_length=MAX_TERMS, description="terms to enforce, [source, target] "
                  "pairs: a sentence holding a source term (on word boundaries) gets its target "
                  "term (constrained beam search; torch engine only)")
        )  # fmt: skip

    class AttentionRequest(BaseModel):
        model_config = STRICT
        sentence: str = Field(min_length=1, max_length=config.max_chars)
        beam: int | None = beam_field()
        max_len: int | None = max_len_field()
        prefix: str | None = Field(
            None, max_length=config.max_chars, description="the translation's start ('' none)"
        )

    class ScoreRequest(BaseModel):
        model_config = STRICT
        sources: list[sentence] = Field(**many, description="source sentences")
        targets: list[sentence] = Field(**many, description="their translations, in order")
        length_penalty: float | None = Field(None, **decoding("length_penalty"),
                                             allow_inf_nan=False,
                                             description="GNMT α for `score`")  # fmt: skip

    class StepThroughRequest(BaseModel):
        """One sentence to step through the model: /attention's fields and limits, no prefix."""

        model_config = STRICT
        sentence: str = Field(min_length=1, max_length=config.max_chars)
        beam: int | None = beam_field()
        max_len: int | None = max_len_field()

    return TranslateRequest, AttentionRequest, ScoreRequest, StepThroughRequest
