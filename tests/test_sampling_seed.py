"""Seeded sampling (``decode.sampling_seed``): a draw reads one uniform number off the cumulative
distribution, and with a seed each sentence's numbers are its own, so that its samples do not
depend on the batch, the threads or the other sentences; CTranslate2 refuses a seed."""

import pytest
import torch

from transformer.config import DecodeConfig
from transformer.errors import BadValue
from transformer.inference.greedy import draw_tokens, row_seeds
from transformer.inference.parallel import DecodeThreads
from transformer.inference.translation import translate_ids

from helpers import (
    assert_error,
    cli_main,
    client_for,
    expected,
    one_line_error,
    random_model,
)

DC = DecodeConfig
CORPUS = [[5, 6, 7, 3], [8, 9, 3], [10, 11, 12, 13, 14, 3], [15, 3], [16, 17, 18, 3], [19, 3]]
HOT = {"sampling": True, "temperature": 3.0, "nbest": 3, "max_len_b": 8}  # far from greedy


def tokens(found) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in found]


# ----------------------------------------------------------------------------------- a draw
def test_a_draw_gives_each_token_its_share_of_the_numbers():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3]).repeat(1000, 1)  # (1000, 4)
    u = (torch.arange(1000) + 0.5) / 1000  # evenly spaced in (0, 1)
    counts = torch.bincount(draw_tokens(probs, u), minlength=4).tolist()
    assert counts == [100, 0, 600, 300]


def test_a_token_of_probability_zero_is_never_drawn_at_either_end():
    first_empty = torch.tensor([[0.0, 0.5, 0.5]])
    assert draw_tokens(first_empty, torch.tensor([1e-12])).tolist() == [1]  # the smallest u
    last_empty = torch.tensor([[0.5, 0.5, 0.0]])
    assert draw_tokens(last_empty, torch.tensor([1.0])).tolist() == [1]  # the largest u
    unnormalised = torch.tensor([[0.0, 0.25, 0.0, 0.25, 0.0]])  # a total below 1: scaled
    assert draw_tokens(unnormalised, torch.tensor([1.0])).tolist() == [3]


# ------------------------------------------------------------------------- what a seed fixes
def test_a_sentences_samples_do_not_depend_on_its_batch_or_the_threads():
    model = random_model(3)
    config = DC(**HOT, sampling_seed=11)
    whole = translate_ids(model, CORPUS, config)
    for batch_size in (1, 2, 64):
        again = translate_ids(model, CORPUS, DC(**HOT, sampling_seed=11, batch_size=batch_size))
        assert tokens(again) == tokens(whole), batch_size
    two = translate_ids(model, CORPUS, config, threads=DecodeThreads(2, 2))
    assert tokens(two) == tokens(whole)
    for i in (0, 2, 5):  # alone, and among other sentences in another order
        assert tokens(translate_ids(model, [CORPUS[i]], config)) == [tokens(whole)[i]]
    mixed = translate_ids(model, [CORPUS[i], *CORPUS[::-1]], config)
    assert tokens(mixed)[0] == tokens(whole)[i]


def test_the_seed_and_the_sample_change_the_draws_and_a_repeated_sentence_keeps_its_own():
    model = random_model(3)
    one, other = (
        tokens(translate_ids(model, CORPUS, DC(**HOT, sampling_seed=s))) for s in (11, 12)
    )
    assert one != other
    assert any(len({tuple(t) for t in samples}) > 1 for samples in one)  # 3 samples differ
    twice = tokens(translate_ids(model, [CORPUS[2], CORPUS[2]], DC(**HOT, sampling_seed=11)))
    assert twice == [one[2], one[2]]  # the same sentence, the same samples


def test_unseeded_sampling_draws_anew():
    model = random_model(3)
    runs = [tokens(translate_ids(model, CORPUS * 3, DC(**HOT))) for _ in range(2)]
    assert runs[0] != runs[1]


def test_row_seeds_follow_the_source_the_prefix_and_the_sample_only():
    src = torch.tensor([[5, 6, 3, 0], [5, 6, 3, 0], [5, 6, 7, 3]])  # PAD_ID 0 on the right
    a, b, c = row_seeds(1, src)
    assert a == b != c
    assert row_seeds(1, src[:1, :3]) == [a]  # padding is not part of the sentence
    assert row_seeds(1, src[:1], sample_of=[1]) != [a]
    assert row_seeds(1, src[:1], torch.tensor([[9, 0]])) != [a]
    assert row_seeds(2, src[:1]) != [a]


def test_the_seed_has_a_range():
    for seed in (-2, 2**32):
        with pytest.raises(BadValue, match="sampling_seed"):
            DecodeConfig(sampling_seed=seed)


# --------------------------------------------------------------------------- every surface
def samples(nbest: str) -> list[tuple[str, str, float]]:
    """``index ||| text ||| score`` lines as (index, text, score)."""
    rows = [line.split(" ||| ") for line in nbest.splitlines()]
    return [(index, text, float(score)) for index, text, score in rows]


def test_the_command_line_gives_the_same_samples_whatever_the_batches(numbers_model):
    lines = "".join(f"{n}\n" for n in ("one", "twelve", "three hundred", "ninety-one", "six"))
    sampling = ["--decode.sampling", "true", "--decode.temperature", "2", "--decode.nbest", "2"]
    runs = [
        cli_main(
            "translate",
            str(numbers_model),
            *sampling,
            "--decode.sampling_seed",
            "5",
            *extra,
            stdin=lines,
        )  # fmt: skip
        for extra in ([], ["--decode.batch_size", "1", "--runtime.inter_threads", "2"], [])
    ]
    assert all(run.code == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout == runs[2].stdout  # the same batches: the same bits
    # other batches: the same samples; their scores to float32 rounding, which depends on the
    # rows multiplied together (a score of -61.1470642 in one batch was -61.1470604 alone), so
    # that the four decimals printed can differ in the last
    for alone, batched in zip(samples(runs[1].stdout), samples(runs[0].stdout), strict=True):
        assert alone[:2] == batched[:2]
        assert abs(alone[2] - batched[2]) < 1e-3
    seeded_6 = [*sampling, "--decode.sampling_seed", "6"]
    other = cli_main("translate", str(numbers_model), *seeded_6, stdin=lines)
    assert other.stdout != runs[0].stdout


def test_a_request_gets_the_same_samples_alone_or_among_others(torch_engine):
    body = {"sampling": True, "temperature": 2.0, "nbest": 2, "sampling_seed": 5}
    with client_for(torch_engine) as client:
        alone = client.post("/translate", json={"sentences": ["twelve"], **body}).json()
        others = ["seven hundred and seventy-one", "one", "twelve", "ninety-one"]
        among = client.post("/translate", json={"sentences": others, **body}).json()
        bad = client.post("/translate", json={"sentences": ["one"], **body, "sampling_seed": -2})
    assert alone["translations"][0] == among["translations"][2]
    library = expected(torch_engine, ["twelve"], **body)  # the library's, without a server
    assert [h["text"] for h in alone["translations"][0]["nbest"]] == [h.text for h in library[0]]
    assert bad.status_code == 422


def test_ctranslate2_refuses_a_seed(numbers_model, exported):
    from transformer.inference.engine import load_engine

    result = cli_main("translate", str(exported), "--engine", "ctranslate2", "--decode.sampling",
                      "true", "--decode.sampling_seed", "5", stdin="one\n")  # fmt: skip
    one_line_error(result, 2, "sampling_seed 5", "torch engine")
    engine = load_engine(numbers_model, "ctranslate2")
    with client_for(engine) as client:
        seeded = client.post("/translate", json={"sentences": ["one"], "sampling": True,
                                                 "sampling_seed": 5})  # fmt: skip
        unseeded = client.post("/translate", json={"sentences": ["one"], "sampling": True})
    assert_error(seeded, 422, "invalid_request", "sampling_seed", "torch engine")
    assert unseeded.status_code == 200
