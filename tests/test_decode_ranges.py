"""Every search option has a documented range, the same on every surface, and the searches'
arithmetic stays finite across it: each search (greedy, beam, sampling, n-best) and scoring run
AT the bounds give finite scores; a value just outside is refused in one line naming the option,
the value and the range, from Python, the command line, a YAML file and over HTTP (422)."""

import math
from dataclasses import fields, replace

import pytest
import torch

from transformer.cli.reference import attribute_docs
from transformer.config import DecodeConfig
from transformer.config.checks import Range, range_of
from transformer.errors import BadValue
from transformer.inference import beam_search, greedy_search, sample, translate_ids
from transformer.inference.search import gnmt_length_penalty
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import assert_error, cli_main, client_for, one_line_error, padded, tiny_model

RANGED = [f.name for f in fields(DecodeConfig) if "range" in f.metadata]
FLOATS = {f.name for f in fields(DecodeConfig) if f.type == "float"}
SENTENCES = [[5, 6, 7, 8, 9, EOS_ID], [10, 11, EOS_ID], [12, 13, 14, 15, EOS_ID], [20, EOS_ID]]


def outside(name: str) -> list[float]:
    """The values just below and just above the range of DecodeConfig field ``name``."""
    allowed: Range = range_of(DecodeConfig, name)
    if name not in FLOATS:
        return [int(allowed.low) - 1, int(allowed.high) + 1]
    low = allowed.low if allowed.open_low else math.nextafter(allowed.low, -math.inf)
    return [float(low), math.nextafter(allowed.high, math.inf)]


def test_every_number_has_a_range_stated_in_its_help():
    numbers = [f.name for f in fields(DecodeConfig) if f.type in ("int", "float")]
    assert sorted(RANGED) == sorted(numbers)
    docs = attribute_docs(DecodeConfig)
    for name in RANGED:
        assert str(range_of(DecodeConfig, name)) in docs[name], name  # --help says the range


@pytest.mark.parametrize("name", RANGED)
def test_the_bounds_are_accepted_and_a_value_just_outside_is_named(name):
    allowed = range_of(DecodeConfig, name)
    wide = {"beam_size": 1024, "max_len_b": 65_536} if name in ("nbest", "min_len") else {}
    for bound in [allowed.high] if allowed.open_low else [allowed.low, allowed.high]:
        DecodeConfig(**{**wide, name: bound})
    for value in outside(name):
        with pytest.raises(BadValue) as raised:
            DecodeConfig(**{**wide, name: value})
        assert str(raised.value) == f"DecodeConfig.{name} must be in {allowed}, got {value!r}"


def test_an_nbest_beyond_the_beams_range_is_named_not_the_beam_it_would_widen():
    assert DecodeConfig().with_search(nbest=8).beam_size == 8  # n-best widens the beam
    with pytest.raises(BadValue, match=r"^DecodeConfig.nbest must be in \[1, 1024\], got 5000$"):
        DecodeConfig().with_search(nbest=5000)


# ---------------------------------------------------------------- the arithmetic at the bounds
def sharp_model():
    """A random tiny model (32 positions) with N(0, 1) weights: its logits span tens of nats,
    so penalties and temperatures at their bounds meet large numbers."""
    model = tiny_model(40, 30, dropout=0.0, tie_output=False, max_positions=32)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0)
    return model


AT_THE_BOUNDS = [
    {"temperature": 0.01}, {"temperature": 100.0}, {"top_k": 1}, {"top_k": 1_000_000},
    {"top_p": 5e-324}, {"top_p": 1e-300}, {"top_p": 1e-300, "repetition_penalty": 0.01},
    {"repetition_penalty": 0.01}, {"repetition_penalty": 100.0}, {"length_penalty": 0.0},
    {"length_penalty": 10.0}, {"max_len_a": 1000.0, "max_len_b": 65_536},
    {"max_len_a": 0.0, "max_len_b": 0}, {"min_len": 65_536, "max_len_a": 0.0, "max_len_b": 65_536},
    {"no_repeat_ngram": 1}, {"no_repeat_ngram": 65_536}, {"batch_size": 1},
    {"batch_size": 65_536, "max_source_tokens": 1 << 24}, {"max_source_tokens": 1},
]  # fmt: skip


def check_hypotheses(found, limit: int) -> None:
    for hypotheses in found:
        assert hypotheses
        for h in hypotheses:
            assert math.isfinite(h.score) and math.isfinite(h.log_prob), h
            assert len(h.tokens) <= limit and not {PAD_ID, BOS_ID, EOS_ID} & set(h.tokens), h


@pytest.mark.parametrize("values", AT_THE_BOUNDS, ids=lambda v: ",".join(f"{k}={v[k]}" for k in v))
def test_every_search_is_finite_at_the_bounds(values):
    model, base = sharp_model(), DecodeConfig(**{"max_len_b": 8, **values})
    limit = model.config.max_positions - 1  # every limit is capped there
    searches = {
        "greedy": replace(base, beam_size=1),
        "beam_size": replace(base, beam_size=4, nbest=3),
        "sampling": replace(base, sampling=True, nbest=3),
    }
    for config in searches.values():
        found = translate_ids(model, SENTENCES, replace(config, sampling_seed=0))
        check_hypotheses(found, limit)


def test_the_widest_beam_and_nbest_are_finite():
    model, src = sharp_model(), padded(SENTENCES[:2])
    wide = DecodeConfig(beam_size=1024, nbest=1024, max_len_a=0.0, max_len_b=3)
    check_hypotheses(beam_search(model, src, wide), 3)
    drawn = sample(model, src, replace(wide, sampling=True, sampling_seed=0))
    check_hypotheses([drawn], 3)


def test_min_len_beyond_the_positions_yields_to_the_limit():
    model, src = sharp_model(), padded(SENTENCES)
    config = DecodeConfig(min_len=65_536, max_len_a=0.0, max_len_b=65_536)
    found = greedy_search(model, src, config)
    assert [len(h.tokens) for h in found] == [31] * 4  # the positions' limit, then EOS
    assert all(len(h[0].tokens) == 31 for h in beam_search(model, src, config))


def test_the_length_penalty_is_finite_at_its_bound_and_the_longest_output():
    alpha, longest = range_of(DecodeConfig, "length_penalty").high, 65_536
    for lp in (
        gnmt_length_penalty(longest, alpha),
        gnmt_length_penalty(torch.tensor(longest), alpha),
    ):
        assert math.isfinite(float(lp)) and float(lp) > 1e40  # beyond float32's 3.4e38
        assert -5.0 / float(lp) < 0  # a score stays a non-zero number


def test_temperature_at_its_bounds_is_greedy_and_near_uniform():
    model, src = sharp_model(), padded(SENTENCES)
    cold = DecodeConfig(sampling=True, temperature=0.01, max_len_b=6)
    drawn = sample(model, src, replace(cold, sampling_seed=3))
    assert [h.tokens for h in drawn] == [h.tokens for h in greedy_search(model, src, cold)]
    hot = replace(cold, temperature=100.0)
    same = padded([SENTENCES[0]] * 200)  # 200 samples of one sentence, each its own seed
    drawn = sample(model, same, replace(hot, sampling_seed=3), sample_of=range(200))
    assert len({h.tokens[0] for h in drawn if h.tokens}) > 10  # of 27 tokens it may draw


# ------------------------------------------------------------ every surface refuses the same way
CLI_CASES = [("temperature", "1e-300"), ("temperature", "1e300"), ("top_p", "0"),
             ("length_penalty", "1e300"), ("repetition_penalty", "0.001"), ("max_len_a", "1e300"),
             ("beam_size", "1025"), ("max_len_b", "65537"), ("top_k", "-1")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "value"), CLI_CASES)
def test_the_command_line_refuses_a_value_outside_in_one_line(numbers_model, name, value):
    result = cli_main("translate", str(numbers_model), f"--decode.{name}", value)
    allowed, parsed = range_of(DecodeConfig, name), (float if name in FLOATS else int)(value)
    one_line_error(result, 2, f"DecodeConfig.{name}", str(allowed), repr(parsed))
    assert result.stdout == ""


@pytest.mark.slow
def test_a_yaml_file_is_refused_the_same_way(numbers_model, tmp_path):
    (tmp_path / "decode.yaml").write_text("sampling: true\ntemperature: 1.0e-300\n")
    result = cli_main("translate", str(numbers_model), "--decode", str(tmp_path / "decode.yaml"))
    one_line_error(result, 2, "DecodeConfig.temperature", "[0.01, 100]", "1e-300")


@pytest.mark.slow
def test_the_command_line_at_the_bounds_translates(numbers_model, tmp_path):
    (tmp_path / "in.txt").write_text("twelve\nforty two\n")
    for options in (["--sampling", "--temperature", "0.01"], ["--sampling", "--temperature", "100"],
                    ["--sampling", "--top_p", "1e-300", "--repetition_penalty", "0.01"],
                    ["--length_penalty", "10", "--nbest", "4"]):  # fmt: skip
        result = cli_main("translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                          *options)  # fmt: skip
        assert result.code == 0 and result.stderr == [], (options, result.stderr)
        scores = [line.split(" ||| ")[2] for line in result.stdout.splitlines() if "|||" in line]
        assert all(math.isfinite(float(s)) for s in scores), scores
    (tmp_path / "ref.txt").write_text("douze\nquarante-deux\n")
    result = cli_main("score", str(numbers_model), "--src", str(tmp_path / "in.txt"), "--ref",
                      str(tmp_path / "ref.txt"), "--length_penalty", "10")  # fmt: skip
    assert result.code == 0, result.stderr
    assert all(math.isfinite(float(x)) for line in result.stdout.split() for x in line.split())


def test_http_refuses_a_value_outside_with_a_422(torch_engine):
    cases = [("top_p", 0.0), ("top_p", 1.0000001), ("repetition_penalty", 0.0099),
             ("repetition_penalty", 100.5), ("min_len", -1), ("no_repeat_ngram", -1),
             ("nbest", 0), ("beam_size", 0)]  # fmt: skip
    with client_for(torch_engine) as client:
        for field, value in cases:
            response = client.post("/translate", json={"sentences": ["twelve"], field: value})
            assert_error(response, 422, "invalid_request", field)
        response = client.post("/score", json={"sources": ["a"], "targets": ["b"],
                                               "length_penalty": 10.5})  # fmt: skip
        assert_error(response, 422, "invalid_request", "length_penalty")


def test_the_schema_states_decode_configs_ranges(torch_engine):
    with client_for(torch_engine, max_beam=1024) as client:
        parts = client.get("/openapi.json").json()["components"]["schemas"]
    request = parts["TranslateRequest"]["properties"]
    for name, key in (("top_p", "top_p"), ("repetition_penalty", "repetition_penalty"),
                      ("beam_size", "beam_size"), ("nbest", "nbest")):  # fmt: skip
        allowed, bounds = range_of(DecodeConfig, name), request[key]["anyOf"][0]
        low = bounds.get("exclusiveMinimum", bounds.get("minimum"))
        assert (low, bounds["maximum"]) == (allowed.low, allowed.high), name
    alpha = parts["ScoreRequest"]["properties"]["length_penalty"]["anyOf"][0]
    assert alpha["maximum"] == range_of(DecodeConfig, "length_penalty").high


def test_the_top_p_that_gave_500s_is_answered(torch_engine):
    with client_for(torch_engine) as client:
        for extra in ({}, {"repetition_penalty": 0.01}):
            body = {"sentences": ["twelve", "forty two"], "sampling": True, "top_p": 1e-300}
            response = client.post("/translate", json=body | extra)
            assert response.status_code == 200, response.text
            greedy = client.post("/translate", json={"sentences": body["sentences"], "beam_size": 1,
                                                     **extra}).json()  # fmt: skip
            # top_p below any token's probability keeps the most likely one: greedy search
            assert [t["text"] for t in response.json()["translations"]] == [
                t["text"] for t in greedy["translations"]
            ]
