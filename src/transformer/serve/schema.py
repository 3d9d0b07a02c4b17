"""The JSON of the HTTP API: requests, responses and errors, as pydantic models; FastAPI turns
them into the OpenAPI schema served at ``/openapi.json``.

A request's search options are ``DecodeConfig``'s fields under their own names (``beam_size``,
``max_len_a``, ``max_len_b``, ...), with ``DecodeConfig``'s ranges (``range_of``): one spelling
and one definition for every surface. What a server allows beyond that (``max_sentences``,
``max_chars``, ``max_beam``, the model's positions) is ``Limits``: checked on every request and
written into the served schema, so that a client can read them there. Requests are strict: a
number given as a string, or an unknown field, is an error naming it.
(No ``from __future__ import annotations`` here: pydantic reads these annotations at run time.)
"""

from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..config import DecodeConfig
from ..config.checks import range_of
from ..inference.inputs import lone_surrogate
from .config import ServeConfig
from .records import PARAGRAPHS, PLAIN_TEXT, WORDS, ParagraphRecord, WordProb

STRICT = ConfigDict(strict=True, extra="forbid")
MAX_TERMS = 1000  # glossary terms per request


def _unicode(text: str) -> str:
    """``text``, if it is Unicode: JSON may escape a lone surrogate (``\\ud800``), which is no
    character, so no tokenizer can read it."""
    at = lone_surrogate(text)
    if at is not None:
        raise ValueError(f"holds a lone surrogate (at character {at}), which is not a Unicode "
                         "character")  # fmt: skip
    return text


Text = Annotated[str, AfterValidator(_unicode)]  # every text a request sends


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
    missing_terms: list[str] | None = Field(None, description="with a glossary: its target terms "
                                            "that the translation lacks: the length limit left "
                                            "no room, or the split of a sentence too long for "
                                            "the model went through them")  # fmt: skip
    log_prob: float | None = Field(None, description="with output_format jsonl: log P("
                                   "translation + </s> | source)")  # fmt: skip
    words: list[WordProb] | None = Field(None, description=WORDS)
    paragraphs: list[ParagraphRecord] | None = Field(None, description=PARAGRAPHS)
    plain_text: str | None = Field(None, description=PLAIN_TEXT)


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


def _search_option(name: str, **schema: Any) -> Any:
    """A request field for DecodeConfig field ``name``: optional (None: the server's default),
    within DecodeConfig's range, described by DecodeConfig's own docstring."""
    allowed = range_of(DecodeConfig, name).schema() if name in _RANGED else {}
    return Field(None, **allowed, **schema, description=_DESCRIPTIONS[name])


_RANGED = {f.name for f in fields(DecodeConfig) if "range" in f.metadata}
_DESCRIPTIONS = {
    "beam_size": "beam size; 1: greedy search",
    "length_penalty": "GNMT α: score = log P / ((5 + |y|) / 6)^α; 0: none",
    "max_len_a": "at most max_len_a · source length + max_len_b tokens out",
    "max_len_b": "at most max_len_a · source length + max_len_b tokens out",
    "nbest": "translations returned per sentence (a larger nbest widens the beam, unless "
    "beam_size is given too)",
    "sampling": "sample instead of searching",
    "temperature": "sampling temperature: < 1 sharper, > 1 flatter",
    "top_k": "sampling: only the k most likely tokens; 0: all",
    "top_p": "sampling: only the fewest most likely tokens whose probability reaches p; 1: all",
    "sampling_seed": "sampling: the same seed gives each sentence the same samples, whatever "
    "else is in the request or the batch; -1: new samples each time",
    "min_len": "no end before this many tokens",
    "no_repeat_ngram": "no n-gram of target pieces twice in a translation; 0: off",
    "repetition_penalty": "tokens already produced have their logit divided by this (CTRL); 1: off",
    "alignment": "also return word alignments",
    "alignment_method": "how word alignments are found: attention (one more pass of the "
    "model), masking (each source word masked in turn: one more pass per source word; torch "
    "engine only) or auto (masking to put tags back with the torch engine, else attention)",
}
_FLOAT = {"allow_inf_nan": False}


class BeamSearchOptions(BaseModel):
    """The search options of one sentence's beam search (/attention, /step-through)."""

    model_config = STRICT
    beam_size: int | None = _search_option("beam_size")
    length_penalty: float | None = _search_option("length_penalty", **_FLOAT)
    max_len_a: float | None = _search_option("max_len_a", **_FLOAT)
    max_len_b: int | None = _search_option("max_len_b")
    min_len: int | None = _search_option("min_len")


class TranslateRequest(BeamSearchOptions):
    sentences: list[Text] = Field(min_length=1, description="one or more sentences")
    prefix: list[Text] | None = Field(
        None, description="one target prefix per sentence, in order ('' for none): each "
        "translation starts with it, and its log-probability counts in the score"
    )  # fmt: skip
    nbest: int | None = _search_option("nbest")
    sampling: bool | None = _search_option("sampling")
    temperature: float | None = _search_option("temperature", **_FLOAT)
    top_k: int | None = _search_option("top_k")
    top_p: float | None = _search_option("top_p", **_FLOAT)
    sampling_seed: int | None = _search_option("sampling_seed")
    no_repeat_ngram: int | None = _search_option("no_repeat_ngram")
    repetition_penalty: float | None = _search_option("repetition_penalty", **_FLOAT)
    alignment: bool | None = _search_option("alignment")
    alignment_method: Literal["auto", "attention", "masking"] | None = _search_option(
        "alignment_method"
    )
    document: bool | None = Field(None, description="each of `sentences` is a document: "
                                  "paragraphs (separated by blank lines) split into sentences "
                                  "and put back as given")  # fmt: skip
    output_format: Literal["text", "jsonl"] | None = Field(
        None, description="jsonl: also each sentence's log-probability and its words' "
        "probabilities (and a document's paragraphs), as `translate --output_format jsonl`"
    )  # fmt: skip
    markup: Literal["text", "html", "xml"] | None = Field(
        None, description="html or xml: each of `sentences` is marked up; its tags are put back "
        "around the words they belong to, as `translate --markup`"
    )  # fmt: skip
    flag_below: float | None = Field(None, gt=0, le=1, allow_inf_nan=False,
                                     description="mark the words less likely than this as "
                                     "[[word]] in the text")  # fmt: skip
    glossary: list[Annotated[list[Text], Field(min_length=2, max_length=2)]] | None = Field(
        None, max_length=MAX_TERMS, description="terms to enforce, [source, target] pairs: a "
        "sentence holding a source term (on word boundaries) gets its target term (constrained "
        "beam search; torch engine only)"
    )  # fmt: skip


class AttentionRequest(BeamSearchOptions):
    sentence: Text = Field(min_length=1)
    prefix: Text | None = Field(None, description="the translation's start ('' none)")


class StepThroughRequest(BeamSearchOptions):
    """One sentence to step through the model: /attention's fields and limits, no prefix."""

    sentence: Text = Field(min_length=1)


class ScoreRequest(BaseModel):
    model_config = STRICT
    sources: list[Text] = Field(min_length=1, description="source sentences")
    targets: list[Text] = Field(min_length=1, description="their translations, in order")
    length_penalty: float | None = _search_option("length_penalty", **_FLOAT)


SEARCH_OPTIONS = tuple(name for name in TranslateRequest.model_fields if name in _DESCRIPTIONS)
REQUESTS = (TranslateRequest, AttentionRequest, StepThroughRequest, ScoreRequest)


def search_options(body: BaseModel) -> dict[str, Any]:
    """The DecodeConfig fields a request sets (None: left to the server's default)."""
    return {name: getattr(body, name) for name in SEARCH_OPTIONS
            if getattr(body, name, None) is not None}  # fmt: skip


@dataclass(frozen=True)
class Limits:
    """What one server allows beyond DecodeConfig's ranges: texts per request and characters per
    text (``serve.max_sentences``, ``serve.max_chars``; a glossary's terms have ``MAX_TERMS``
    and the characters per text), and the numbers in ``most``."""

    sentences: int
    chars: int
    most: dict[str, tuple[int, str]]  # field -> (its largest value, the setting behind it)

    @classmethod
    def of(cls, config: ServeConfig, max_positions: int) -> "Limits":
        outputs = (max_positions - 1, "the model's max_positions - 1")  # room for </s>
        beam = (config.max_beam, "serve.max_beam")
        return cls(config.max_sentences, config.max_chars, {
            "beam_size": beam, "nbest": beam, "max_len_b": outputs, "min_len": outputs,
            "no_repeat_ngram": (max_positions, "the model's max_positions"),
        })  # fmt: skip

    def check(self, body: BaseModel) -> str | None:
        """What in ``body`` is over this server's limits, in one line naming the field and the
        setting (never echoing the text sent); None when nothing is."""
        for name, value in body:
            if name == "glossary":  # pairs of terms, as many as the schema's MAX_TERMS
                texts = {f"{name}.{i}.{j}": term for i, pair in enumerate(value or [])
                         for j, term in enumerate(pair)}  # fmt: skip
            elif isinstance(value, list):
                if len(value) > self.sentences:
                    return (f"{name}: {len(value)} items; this server takes at most "
                            f"{self.sentences} (serve.max_sentences)")  # fmt: skip
                texts = {f"{name}.{i}": text for i, text in enumerate(value)}
            else:
                texts = {name: value}
            for where, text in texts.items():
                if isinstance(text, str) and len(text) > self.chars:
                    return (f"{where}: {len(text)} characters; this server takes at most "
                            f"{self.chars} characters (serve.max_chars)")  # fmt: skip
            if name in self.most and value is not None and value > self.most[name][0]:
                most, setting = self.most[name]
                return f"{name}: {value}; this server takes at most {most} ({setting})"
        return None

    def narrow(self, schema: dict[str, Any]) -> None:
        """Writes these limits into an OpenAPI schema's request models, in place."""
        parts = schema["components"]["schemas"]
        for request in REQUESTS:
            for name, field in parts.get(request.__name__, {}).get("properties", {}).items():
                shape = field.get("anyOf", [field])[0]  # an optional field's non-null type
                if shape.get("type") == "array" and name == "glossary":
                    shape = shape["items"]["items"]  # each term; their number is MAX_TERMS
                elif shape.get("type") == "array":
                    shape["maxItems"] = self.sentences
                    shape = shape["items"]
                if shape.get("type") == "string":
                    shape["maxLength"] = self.chars
                if name in self.most:
                    shape["maximum"] = min(shape.get("maximum", self.most[name][0]),
                                           self.most[name][0])  # fmt: skip
