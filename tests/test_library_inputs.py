"""What a Python caller hands the engines is checked where it comes in (inference/inputs.py):
a string given for a list of them was translated character by character (one "translation" per
letter, no error); None, a number or bytes in the list, a dict for the search, or a lone
surrogate stopped deep inside with an AttributeError or a RuntimeError from the tokenizer."""

import pytest

from transformer.config import RuntimeConfig
from transformer.errors import BadValue, UserError
from transformer.inference import load_engine, translate_texts


@pytest.fixture(scope="module", params=["torch", "ctranslate2"])
def engine(request, numbers_model):
    if request.param == "ctranslate2":
        pytest.importorskip("ctranslate2")
    return load_engine(numbers_model, engine=request.param, runtime=RuntimeConfig(device="cpu"))


CALLS = {
    "translate_texts": lambda e, texts: translate_texts(e, texts),
    "translate_texts, document": lambda e, texts: translate_texts(e, texts, document=True),
    "translate_texts, markup": lambda e, texts: translate_texts(e, texts, markup="html"),
    "engine.translate": lambda e, texts: e.translate(texts),
    "engine.translate, prefixes": lambda e, texts: e.translate(
        ["twelve"] * len(texts), None, texts
    ),  # fmt: skip
    "engine.score": lambda e, texts: e.score(texts, ["douze"] * len(texts)),
}
WRONG = [
    ("twelve", TypeError, r"must be a list of strings, got str"),
    (b"twelve", TypeError, r"must be a list of strings, got bytes"),
    (["twelve", None], TypeError, r"\[1\] must be a string, got NoneType"),
    ([12], TypeError, r"\[0\] must be a string, got int"),
    ([b"twelve"], TypeError, r"\[0\] must be a string, got bytes"),
    (["twelve", "a\ud800b"], BadValue, r"\[1\] holds a lone surrogate \(at character 1\)"),
]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize(("texts", "error", "message"), WRONG, ids=lambda v: repr(v)[:14])
def test_texts_that_are_not_a_list_of_strings_are_refused_naming_the_item(
    engine, call, texts, error, message
):
    with pytest.raises(error, match=message):
        CALLS[call](engine, texts)


def test_the_right_inputs_still_translate(engine):
    assert [t.text for t in translate_texts(engine, ["twelve", ""]).texts][1] == ""
    assert len(engine.translate(("twelve", "seven")).best) == 2  # a tuple is a list too
    assert len(engine.score(["twelve"], ["douze"]).scores) == 1


@pytest.mark.parametrize("decode", [{"beam_size": 2}, {}, "beam"], ids=repr)
def test_a_search_that_is_no_decode_config_is_refused(engine, decode):
    for call in (lambda: translate_texts(engine, ["twelve"], decode),
                 lambda: engine.translate(["twelve"], decode),
                 lambda: engine.score(["twelve"], ["douze"], decode)):  # fmt: skip
        with pytest.raises(TypeError, match="decode must be a DecodeConfig .*with_search"):
            call()


@pytest.mark.parametrize(
    ("glossary", "error", "message"),
    [
        ("terms.tsv", TypeError, r"glossary must be a Glossary \(Glossary.read\(path\)"),
        (["ab"], UserError, r"glossary.0: a term is a pair of strings"),  # was the term a -> b
        ([["twelve", "\udc00"]], BadValue, r"glossary.0\[1\] holds a lone surrogate"),
    ],
    ids=["a file name", "a two-letter string", "a lone surrogate"],
)
def test_a_glossary_that_is_no_list_of_pairs_is_refused(torch_engine, glossary, error, message):
    with pytest.raises(error, match=message):
        translate_texts(torch_engine, ["twelve"], glossary=glossary)


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([[5, 3], [10**6, 3]], ValueError, r"source sentence 1: id 1000000 is outside the vocab"),
        ([[-1, 3]], ValueError, r"source sentence 0: id -1 is outside the vocabulary \(0 to "),
        ([[5, 0, 3]], ValueError, r"source sentence 0 contains the padding id 0"),
        ([[5.7, 3]], TypeError, r"source sentence 0: ids are integers, got float 5.7"),
    ],
    ids=["past the vocabulary", "negative", "padding", "a float"],
)
def test_ids_outside_the_vocabulary_are_refused_naming_the_sentence(engine, ids, error, message):
    """An id past the vocabulary stopped in the embedding ("index out of range in self"); a
    float was cut to an integer without a word."""
    if engine.name == "torch":
        from transformer.inference import score_ids, translate_ids

        calls = [lambda: translate_ids(engine.model, ids, engine.decode),
                 lambda: score_ids(engine.model, ids, [[5]] * len(ids))]  # fmt: skip
    else:
        calls = [lambda: engine.search_ids(ids)]
    for call in calls:
        with pytest.raises(error, match=message):
            call()


@pytest.mark.parametrize("engine_name", ["torch", "ctranslate2"])
def test_loading_refuses_a_runtime_that_is_no_config_and_an_unknown_checkpoint(
    numbers_model, engine_name
):
    """A dict for the runtime stopped with an AttributeError; checkpoint "first" quietly loaded
    the last checkpoint."""
    if engine_name == "ctranslate2":
        pytest.importorskip("ctranslate2")
    with pytest.raises(TypeError, match="runtime must be a RuntimeConfig .*got dict"):
        load_engine(numbers_model, engine_name, runtime={"device": "cpu"})
    with pytest.raises(ValueError, match="checkpoint 'first': choose one of best, last"):
        load_engine(numbers_model, engine_name, "first", RuntimeConfig(device="cpu"))


def test_training_and_comparing_take_what_a_python_caller_has(numbers_model, tmp_path):
    """``train`` given a dict stopped with an AttributeError; ``compare_runs`` given names as
    strings stopped with one ('str' has no 'resolve'), and one name for the list was read as
    a list of one-letter runs."""
    from transformer.inspect import compare_runs
    from transformer.training import train

    with pytest.raises(TypeError, match="config must be a RunConfig .*build_config.*got dict"):
        train({"train": {"max_steps": 1}}, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(TypeError, match="paths must be a list of model directories, got str"):
        compare_runs(str(numbers_model))
    with pytest.raises(TypeError, match="runtime must be a RuntimeConfig"):
        compare_runs([str(numbers_model)], runtime={"device": "cpu"})
    found = compare_runs([str(numbers_model)], runtime=RuntimeConfig(device="cpu"), repeats=1,
                         lengths=(8,))  # fmt: skip
    assert len(found.runs) == 1


def test_the_step_through_view_and_the_attention_maps_take_one_sentence(torch_engine, exported):
    """A list, None or a lone surrogate for the sentence stopped with an AttributeError, the
    tokenizer's TypeError or RuntimeError; the CTranslate2 engine, which has no model to look
    inside, with an AttributeError."""
    from transformer.inspect import inspect_sentence, trace_sentence

    engine = torch_engine
    wrong = [
        (["twelve"], TypeError, "sentence must be a string, got list"),
        (None, TypeError, "sentence must be a string, got NoneType"),
        ("a\ud800", BadValue, "sentence holds a lone surrogate"),
    ]
    for sentence, error, message in wrong:
        with pytest.raises(error, match=message):
            trace_sentence(engine, sentence)
        with pytest.raises(error, match=message):
            inspect_sentence(engine.model, engine.tokenizers, sentence, engine.decode)
    with pytest.raises(TypeError, match="runs the torch engine's model .*got CTranslate2Engine"):
        trace_sentence(load_engine(exported, "ctranslate2"), "twelve")
    assert trace_sentence(engine, "twelve").nbest


def test_scoring_functions_take_lists_of_strings():
    """One string for the hypotheses was scored letter by letter: ``exact_match("abc", ["a",
    "b", "c"])`` said 3 of 3 correct."""
    from transformer.inference import exact_match, score_translations

    for call in (score_translations, exact_match):
        with pytest.raises(TypeError, match="hypotheses must be a list of strings, got str"):
            call("abc", ["a", "b", "c"])
        with pytest.raises(TypeError, match=r"references\[1\] must be a string, got NoneType"):
            call(["a", "b"], ["a", None])
    with pytest.raises(TypeError, match=r"groups\[0\] must be a string, got int"):
        exact_match(["a"], ["a"], [1])
    assert score_translations(["a b c d"], [["a b c d", "e"]])[0].score == pytest.approx(100)
    assert exact_match(["a", "b"], ["a", "c"], ["x", "x"])[-1].correct == 1


# --- the gate: every public parameter that takes texts or token ids is checked ----------------
def public_sequence_parameters() -> set[tuple[str, str]]:
    """(function, parameter) of ``transformer.inference``'s public functions and the engines'
    methods whose annotation takes texts (``list[str]``) or token ids (``list[list[int]]``)."""
    import inspect

    import transformer.inference as inference
    from transformer.inference.ctranslate2 import CTranslate2Engine
    from transformer.inference.engine import TorchEngine

    functions = [(name, getattr(inference, name)) for name in inference.__all__
                 if inspect.isfunction(getattr(inference, name))]  # fmt: skip
    for cls in (TorchEngine, CTranslate2Engine):
        methods = [name for name in dir(cls) if not name.startswith("_")]
        functions += [(f"{cls.__name__}.{name}", getattr(cls, name)) for name in methods
                      if inspect.isfunction(getattr(cls, name))]  # fmt: skip
    kinds = ("list[str]", "list[list[int]]")
    return {(name, p.name) for name, function in functions
            for p in inspect.signature(function).parameters.values()
            if any(kind in str(p.annotation) for kind in kinds)}  # fmt: skip


def wrong_calls(torch_engine, ct2_engine) -> dict:
    """For each (function, parameter): a call with a string where the texts go, or a float
    where an id goes; each must raise TypeError before any work."""
    from transformer.inference import (
        exact_match,
        score_ids,
        score_translations,
        translate,
        translate_ids,
        translate_with,
    )

    t, c, m = torch_engine, ct2_engine, torch_engine.model
    d, tok, ok = t.decode, t.tokenizers, ["twelve"]

    def nothing(*_):
        return []

    return {
        ("exact_match", "hypotheses"): lambda: exact_match("a", ["a"]),
        ("exact_match", "references"): lambda: exact_match(["a"], "a"),
        ("exact_match", "groups"): lambda: exact_match(["a"], ["a"], "g"),
        ("score_translations", "hypotheses"): lambda: score_translations("a", ["a"]),
        ("score_translations", "references"): lambda: score_translations(["a"], "a"),
        ("translate", "sentences"): lambda: translate(m, tok, "abc", d),
        ("translate", "prefixes"): lambda: translate(m, tok, ok, d, "a"),
        ("translate_texts", "texts"): lambda: translate_texts(t, "abc"),
        ("translate_texts", "prefixes"): lambda: translate_texts(t, ok, prefixes="a"),
        ("translate_with", "sentences"): lambda: translate_with(nothing, tok, "abc", 64, d),
        ("translate_with", "prefixes"): lambda: translate_with(nothing, tok, ok, 64, d, "a"),
        ("translate_ids", "sentences"): lambda: translate_ids(m, [[5.5, 3]], d),
        ("translate_ids", "prefixes"): lambda: translate_ids(m, [[5, 3]], d, prefixes=[[5.5]]),
        ("score_ids", "sources"): lambda: score_ids(m, [[5.5, 3]], [[5]]),
        ("score_ids", "targets"): lambda: score_ids(m, [[5, 3]], [[5.5]]),
        ("TorchEngine.translate", "sentences"): lambda: t.translate("abc"),
        ("TorchEngine.translate", "prefixes"): lambda: t.translate(ok, prefixes="a"),
        ("TorchEngine.score", "sources"): lambda: t.score("a", ["a"]),
        ("TorchEngine.score", "targets"): lambda: t.score(ok, "a"),
        ("CTranslate2Engine.translate", "sentences"): lambda: c.translate("abc"),
        ("CTranslate2Engine.translate", "prefixes"): lambda: c.translate(ok, prefixes="a"),
        ("CTranslate2Engine.score", "sources"): lambda: c.score("a", ["a"]),
        ("CTranslate2Engine.score", "targets"): lambda: c.score(ok, "a"),
        ("CTranslate2Engine.search_ids", "sentences"): lambda: c.search_ids([[5.5, 3]]),
        ("CTranslate2Engine.search_ids", "prefixes"): lambda: c.search_ids(
            [[5, 3]], None, [[5.5]]
        ),  # fmt: skip
    }


def test_every_public_parameter_taking_texts_or_ids_refuses_a_wrong_one(torch_engine, exported):
    """The gate: a public function or engine method added with a parameter of texts or ids
    fails here until a wrong call of it is listed, and that call must be refused (with
    ``inference/inputs.py``'s checks) rather than translate a string letter by letter."""
    ct2_engine = load_engine(exported, "ctranslate2", runtime=RuntimeConfig(device="cpu"))
    calls = wrong_calls(torch_engine, ct2_engine)
    assert public_sequence_parameters() == set(calls), (
        "list how to call the new parameter wrongly in wrong_calls"
    )
    for where, call in calls.items():
        with pytest.raises(TypeError, match="must be|ids are integers"):
            call()
            print(where, "was not refused")
