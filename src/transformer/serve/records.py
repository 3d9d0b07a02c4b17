"""The JSON of ``output_format: jsonl`` over HTTP: a sentence's log-probability, its words'
probabilities, a document's paragraphs; the objects ``translate --output_format jsonl`` writes
(inference/texts.py ``record``). serve/texts.py fills them.

(No ``from __future__ import annotations``: pydantic reads these annotations at run time.)
"""

import math

from pydantic import BaseModel, Field


def finite(x: float) -> float | None:
    """A score as JSON holds it: JSON has no infinity or NaN, so those are null."""
    return x if math.isfinite(x) else None


class WordProb(BaseModel):
    word: str
    prob: float = Field(description="P(its pieces | the source and the words before it)")


PLAIN_TEXT = "with markup: the translation without its tags (what `words` and `alignment` count)"


class SentenceRecord(BaseModel):
    source: str = Field(description="the sentence as the model read it")
    text: str
    score: float | None
    log_prob: float | None = Field(None, description="log P(translation + </s> | source)")
    words: list[WordProb] | None = None
    alignment: str | None = None
    split: str | None = Field(None, description="how a sentence too long for the model was split")
    plain_source: str | None = Field(None, description="with markup: the source without its "
                                     "tags, as the model read it")  # fmt: skip
    plain_text: str | None = Field(None, description=PLAIN_TEXT)
    missing_terms: list[str] | None = Field(None, description="with a glossary: its target terms "
                                            "that the translation lacks: the length limit left "
                                            "no room, or the split of a sentence too long for "
                                            "the model went through them")  # fmt: skip


class ParagraphRecord(BaseModel):
    line: int = Field(description="the line of the text it starts on, from 1")
    source: str
    text: str = Field(description="its translation, spaces and line breaks between sentences kept")
    sentences: list[SentenceRecord]


WORDS = "with output_format jsonl: each word of the translation with its probability"
PARAGRAPHS = "with document and output_format jsonl: the text's paragraphs and their sentences"
