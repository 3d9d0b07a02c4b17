"""The search options (inference/constraints.py), checked against references and invariants: a
target prefix (every output starts with it; a prefix cut from the unforced output gives that
output back; greedy with a prefix is teacher forcing, then greedy), top-p, min_len,
no_repeat_ngram (a property over random models) and the repetition penalty (hand-computed on
stubs, and equal to CTranslate2's, which defines them), and every option at its neutral value
changing nothing against a plain reference search written here."""

import json
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.config import DecodeConfig, RuntimeConfig
from transformer.data.batching import encode_source, pad
from transformer.data.corpora import load_splits
from transformer.errors import BadValue
from transformer.inference import beam_search, greedy_search, sample, translate_ids
from transformer.inference.constraints import nucleus, repetition_penalty
from transformer.inference.engine import load_torch_engine
from transformer.inference.greedy import row_seeds
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import A, B, C, Stub, cli, copy_sentences, padded, random_model

DC = DecodeConfig
V = 30  # target vocabulary of the random models
SENTENCES = [[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 19, 3], [20, 3]]
NEUTRAL = {"top_p": 1.0, "min_len": 0, "no_repeat_ngram": 0, "repetition_penalty": 1.0}


def searches(config: DecodeConfig, seed: int = 7) -> dict:
    """greedy, beam and sampling with ``config``'s rules, as (model, src, prefix) -> nbest."""
    beam, sampling = replace(config, beam_size=4, nbest=3), replace(config, sampling=True)
    return {
        "greedy": lambda m, s, p=None: [[h] for h in greedy_search(m, s, config, prefix=p)],
        "beam": lambda m, s, p=None: beam_search(m, s, beam, prefix=p),
        "sample": lambda m, s, p=None: [[h] for h in sample(
            m, s, replace(sampling, sampling_seed=seed), prefix=p)],
    }  # fmt: skip


def reference(model, src: list[int], limit: int, prefix=(), pick=None) -> tuple[list[int], float]:
    """Search without any rule code: the decoder re-run on <s> + tokens at every step, PAD and
    BOS banned, EOS at the limit; the prefix teacher-forced first. ``pick`` (log-probs (1, V)
    -> token) defaults to greedy. Returns (tokens, log P(tokens + EOS))."""
    tokens, total = list(prefix), 0.0
    with torch.no_grad():
        memory, mask = model.encode(torch.tensor([src]))
        forced = model.decode(torch.tensor([[BOS_ID, *prefix]]), memory, mask)  # (1, T, V)
        log_probs = torch.log_softmax(forced[0].float(), dim=-1)
        total += sum(log_probs[t, token].item() for t, token in enumerate(prefix))
        while True:
            logits = model.decode(torch.tensor([[BOS_ID, *tokens]]), memory, mask)[:, -1]
            log_probs = torch.log_softmax(logits.float(), dim=-1)  # (1, V)
            log_probs[:, [PAD_ID, BOS_ID]] = float("-inf")
            if len(tokens) >= limit:
                token = EOS_ID
            else:
                token = int(pick(log_probs)) if pick else int(log_probs.argmax())
            total += log_probs[0, token].item()
            if token == EOS_ID:
                return tokens, total
            tokens.append(token)


def starts(ids: list[int], prefix: list[int]) -> bool:
    return ids[: len(prefix)] == prefix


# --- the prefix ------------------------------------------------------------------------------
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_every_output_starts_with_its_prefix(search):
    model, g = random_model(), torch.Generator().manual_seed(0)
    prefixes = [torch.randint(4, V, (n,), generator=g).tolist() for n in (0, 1, 3, 20)]
    found = searches(DC(max_len_b=5))[search](model, padded(SENTENCES), padded(prefixes))
    for prefix, nbest in zip(prefixes, found, strict=True):
        assert all(starts(h.tokens, prefix) for h in nbest), (prefix, nbest)
    assert len(found[3][0].tokens) >= 20  # the limit (5 + 3) made room for the prefix


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_with_a_prefix_is_teacher_forcing_then_greedy(seed):
    model, g = random_model(seed), torch.Generator().manual_seed(seed)
    prefixes = [torch.randint(4, V, (n,), generator=g).tolist() for n in (1, 2, 4, 3)]
    found = greedy_search(model, padded(SENTENCES), DC(max_len_b=8), prefix=padded(prefixes))
    for src, prefix, hyp in zip(SENTENCES, prefixes, found, strict=True):
        tokens, log_prob = reference(model, src, len(src) + 8, prefix)
        assert hyp.tokens == tokens
        assert hyp.log_prob == pytest.approx(log_prob, rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_prefix_cut_from_the_greedy_output_gives_it_back(seed):
    model = random_model(seed)
    unforced = translate_ids(model, SENTENCES, DC(beam_size=1, max_len_b=8))
    for k in (1, 2, 5):
        prefixes = [h[0].tokens[:k] for h in unforced]
        forced = translate_ids(model, SENTENCES, DC(beam_size=1, max_len_b=8), prefixes=prefixes)
        for a, b in zip(unforced, forced, strict=True):
            assert a[0].tokens == b[0].tokens and a[0].score == pytest.approx(b[0].score, abs=1e-5)


@pytest.mark.slow
def test_a_prefix_cut_from_the_beam_output_gives_it_back(copy_model):
    # Beam search is not exact: on a barely trained model a forced prefix often finds a better
    # hypothesis than the unforced search did. On a model that has learnt its task (copying)
    # the unforced search finds the best, and every prefix of it gives it back.
    engine = load_torch_engine(copy_model, runtime=RuntimeConfig(device="cpu"))
    ids = [encode_source(engine.tokenizers.src.encode(s)) for s in copy_sentences(60, seed=3)]
    config = DC(beam_size=4, nbest=2)
    unforced = translate_ids(engine.model, ids, config)
    checked = 0
    for k in range(1, 8):
        prefixes = [h[0].tokens[:k] for h in unforced]
        forced = translate_ids(engine.model, ids, config, prefixes=prefixes)
        for a, b in zip(unforced, forced, strict=True):
            if len(a[0].tokens) >= k:
                assert b[0].tokens == a[0].tokens
                assert b[0].score == pytest.approx(a[0].score, abs=1e-5)
                checked += 1
    assert checked > 200


# --- neutral values ----------------------------------------------------------------------------
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_every_option_at_its_neutral_value_is_the_option_absent(search):
    model, src = random_model(), padded(SENTENCES)
    plain = searches(DC(max_len_b=6))[search](model, src)
    neutral = searches(DC(max_len_b=6, **NEUTRAL))[search](model, src, pad([[]] * 4))
    assert neutral == plain  # tokens, scores and log-probs, bit for bit
    assert [h.score for hyps in neutral for h in hyps] == [h.score for hyps in plain for h in hyps]


def plain_sampler(seed: int, limit: int):
    """Sampling without top-p or any rule: the softmax of the log-probabilities, each step's
    token the first whose cumulative probability reaches that step's number (in (0, 1], from a
    generator seeded ``seed``: the row's own, as ``sample`` draws them) times the total,
    found by ``searchsorted``."""
    numbers = iter(1.0 - torch.rand(limit + 1, generator=torch.Generator().manual_seed(seed)))

    def pick(log_probs):  # (1, V)
        cumulative = log_probs.softmax(dim=-1)[0].cumsum(dim=0)  # (V,)
        return torch.searchsorted(cumulative, next(numbers) * cumulative[-1])

    return pick


def test_greedy_and_top_p_1_sampling_equal_the_plain_reference():
    model = random_model(1)
    for src in SENTENCES:
        greedy = greedy_search(model, torch.tensor([src]), DC(max_len_b=6, **NEUTRAL))[0]
        tokens, log_prob = reference(model, src, len(src) + 6)
        assert greedy.tokens == tokens and greedy.log_prob == pytest.approx(log_prob, abs=1e-4)
        config = DC(sampling=True, max_len_b=6, **NEUTRAL)
        drawn = sample(model, torch.tensor([src]), replace(config, sampling_seed=5))[0]
        pick = plain_sampler(row_seeds(5, torch.tensor([src]))[0], len(src) + 6)
        tokens, log_prob = reference(model, src, len(src) + 6, pick=pick)
        assert drawn.tokens == tokens and drawn.log_prob == pytest.approx(log_prob, abs=1e-4)


# --- top-p -------------------------------------------------------------------------------------
def test_a_tiny_top_p_equals_greedy():
    model, src = random_model(2), padded(SENTENCES)
    drawn = sample(model, src, DC(sampling=True, top_p=1e-6, sampling_seed=0))
    greedy = greedy_search(model, src)
    assert [h.tokens for h in drawn] == [h.tokens for h in greedy]
    # to float32 rounding: greedy search keeps finished rows in its batch (search.rows_kept),
    # and the unpacked products' sums depend a little on the number of rows
    assert [h.score for h in drawn] == pytest.approx([h.score for h in greedy], rel=1e-5)


@pytest.mark.parametrize(("top_p", "support"), [(0.45, {A}), (0.55, {A, B}), (0.79, {A, B}),
                                                (0.81, {A, B, C})])  # fmt: skip
def test_top_p_keeps_the_fewest_tokens_whose_probability_reaches_p(top_p, support):
    stub = Stub({(): {A: 0.5, B: 0.3, C: 0.2}})  # then EOS
    config = DC(sampling=True, top_p=top_p, sampling_seed=0)
    drawn = sample(stub, torch.full((400, 1), 5), config, sample_of=range(400))
    assert {h.tokens[0] for h in drawn} == support
    kept = torch.tensor([0.5, 0.3, 0.2])[: len(support)]
    share_a = sum(h.tokens[0] == A for h in drawn) / len(drawn)
    assert share_a == pytest.approx(float(kept[0] / kept.sum()), abs=0.08)  # renormalised


def test_nucleus_on_hand_computed_scores():
    scores = torch.tensor([[0.1, 0.6, 0.3]]).log()
    kept = nucleus(scores, 0.7).isfinite().tolist()
    assert kept == [[False, True, True]]  # 0.6 < 0.7 <= 0.6 + 0.3


def nucleus_by_sorting(scores, top_p):
    """The nucleus as Holtzman et al. describe it: the whole vocabulary sorted, its cumulative
    probability, the tokens after p is reached dropped (the first always kept)."""
    ordered, order = scores.sort(dim=-1, descending=True)
    probs = ordered.softmax(dim=-1)
    drop = probs.cumsum(dim=-1) - probs >= top_p
    drop[:, 0] = False
    return scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))


@pytest.mark.parametrize("vocab", [3, 100, 8000])
def test_the_nucleus_is_the_one_a_sort_of_the_vocabulary_finds(vocab):
    g = torch.Generator().manual_seed(vocab)
    # peaked rows (the nucleus among the first 64), flat rows (beyond them: k grows), and rows
    # with banned tokens (-inf), as top-k and the search rules leave them
    scores = torch.cat([torch.randn(8, vocab, generator=g) * sharpness for sharpness in
                        (8.0, 2.0, 0.3, 0.01)]).log_softmax(dim=-1)  # fmt: skip
    scores[::5, : vocab // 2] = float("-inf")
    # (a p within float32's rounding of 1, 0.999999, moves the tail's edge by a few of
    # thousands of equal tokens: the two sum the probabilities in other orders)
    for top_p in (1e-300, 0.1, 0.5, 0.9, 0.99, 0.999):
        got, want = nucleus(scores, top_p), nucleus_by_sorting(scores, top_p)
        # the same tokens, but for which of equal scores at the edge (flat rows have ties)
        assert torch.equal(got.sort(dim=-1).values, want.sort(dim=-1).values), top_p
        assert torch.equal(got[got.isfinite()], scores[got.isfinite()])
        assert (got.isfinite() == want.isfinite()).all(dim=-1).sum() >= len(scores) - 1
    if vocab == 8000:  # flat rows hold nuclei of thousands of tokens, found after the first 64
        assert int(nucleus(scores, 0.9)[-8:].isfinite().sum(dim=-1).min()) > 1000


# --- min_len -----------------------------------------------------------------------------------
@pytest.mark.parametrize("search", ["greedy", "beam", "sample"])
def test_min_len_is_honoured(search):
    model = random_model({"greedy": 3, "beam": 0, "sample": 0}[search])  # some end early
    plain = searches(DC(max_len_b=12))[search](model, padded(SENTENCES))
    assert min(len(h.tokens) for hyps in plain for h in hyps) < 9  # some end earlier
    found = searches(DC(max_len_b=12, min_len=9))[search](model, padded(SENTENCES))
    assert min(len(h.tokens) for hyps in found for h in hyps) >= 9


def test_min_len_on_a_stub_and_eos_yields_when_nothing_else_is_left():
    stub = Stub({}, default={EOS_ID: 0.9, A: 0.1})
    hyp = greedy_search(stub, torch.tensor([[5]]), DC(min_len=3))[0]
    assert hyp.tokens == [A, A, A]
    assert hyp.log_prob == pytest.approx(3 * math.log(0.1) + math.log(0.9), abs=1e-5)
    assert beam_search(stub, torch.tensor([[5]]), DC(min_len=3))[0][0].tokens == [A, A, A]
    only_eos = Stub({}, default={EOS_ID: 1.0})
    assert greedy_search(only_eos, torch.tensor([[5]]), DC(min_len=3))[0].tokens == []


# --- no_repeat_ngram ---------------------------------------------------------------------------
def ngrams(tokens: list[int], n: int) -> list[tuple]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def test_random_models_repeat_without_the_option():
    found = searches(DC(max_len_b=10))["beam"](random_model(), padded(SENTENCES))
    assert any(len(set(ngrams(h.tokens, 2))) < len(ngrams(h.tokens, 2)) for h in found[0])


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 3),
       search=st.sampled_from(["greedy", "beam", "sample"]))  # fmt: skip
def test_no_repeat_ngram_leaves_no_n_gram_twice(seed, n, search):
    model, g = random_model(seed % 7), torch.Generator().manual_seed(seed)
    sources = [torch.randint(4, 40, (k,), generator=g).tolist() + [EOS_ID] for k in (2, 5, 9)]
    found = searches(DC(max_len_b=15, no_repeat_ngram=n), seed)[search](model, padded(sources))
    for hyps in found:
        for h in hyps:
            assert len(set(ngrams(h.tokens, n))) == len(ngrams(h.tokens, n)), (n, h.tokens)


# --- repetition_penalty ------------------------------------------------------------------------
def test_repetition_penalty_is_ctrls_on_hand_computed_logits():
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    got = repetition_penalty(logits, torch.tensor([[0, 1, 1]]), 2.0)
    assert got.tolist() == [[1.0, -4.0, 1.0, 0.5]]  # positive divided, negative multiplied


def test_repetition_penalty_changes_the_choice_and_renormalises():
    stub = Stub({(): {A: 0.6, B: 0.4}, (A,): {A: 0.6, B: 0.3, EOS_ID: 0.1}, (A, B): {EOS_ID: 1}})
    assert greedy_search(stub, torch.tensor([[5]]))[0].tokens == [A, A]  # (A, A): EOS
    hyp = greedy_search(stub, torch.tensor([[5]]), DC(repetition_penalty=3.0))[0]
    assert hyp.tokens == [A, B]  # A's logit log 0.6 became 3 log 0.6: 0.216 < 0.3
    assert hyp.log_prob == pytest.approx(math.log(0.6) + math.log(0.3 / 0.616), abs=1e-5)


# --- both engines ------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{"no_repeat_ngram": 2}, {"repetition_penalty": 1.5},
                                     {"min_len": 10},
                                     {"sampling": True, "top_p": 1e-6}])  # fmt: skip
def test_the_options_agree_with_ctranslate2(options, numbers_model):
    pytest.importorskip("ctranslate2")
    from transformer.inference.ctranslate2 import load_ctranslate2

    sources = [s for s, _ in load_splits(load_torch_engine(numbers_model).config.data).test]
    ours = load_torch_engine(numbers_model, beam_size=1, **options).translate(sources)
    theirs = load_ctranslate2(numbers_model, beam_size=1, **options).translate(sources)
    assert [t[0].tokens for t in theirs.nbest] == [t[0].tokens for t in ours.nbest]


def test_a_prefix_cut_from_ctranslate2s_greedy_output_gives_it_back(numbers_model):
    pytest.importorskip("ctranslate2")
    from transformer.inference.ctranslate2 import load_ctranslate2

    engine = load_ctranslate2(numbers_model, beam_size=1)
    sources = [s for s, _ in load_splits(engine.config.data).test]
    ids = [encode_source(engine.tokenizers.src.encode(s)) for s in sources]
    unforced = engine.search_ids(ids)
    for k in (1, 3):
        forced = engine.search_ids(ids, prefixes=[h[0].tokens[:k] for h in unforced])
        for a, b in zip(unforced, forced, strict=True):
            assert b[0].tokens == a[0].tokens
            # The prefix's log-prob comes from score_batch, without CTranslate2's renormalising
            # over the tokens it never makes (PAD, BOS): a little lower, by 0.01 per token here.
            assert -0.02 * k <= b[0].score - a[0].score <= 1e-4


# --- bad values and the command line ----------------------------------------------------------
@pytest.mark.parametrize("values", [{"top_p": 0.0}, {"top_p": 1.5}, {"min_len": -1},
                                    {"no_repeat_ngram": -1}, {"repetition_penalty": 0.0},
                                    {"max_len_a": 0.0, "max_len_b": 4, "min_len": 5}])  # fmt: skip
def test_bad_values_are_named(values):
    with pytest.raises(BadValue, match=list(values)[-1]):
        DC(**values)


def test_translate_prefix_file_on_the_command_line(numbers_model, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("twelve\nforty two\n\nthree\n\n")
    (tmp_path / "pre.txt").write_text("quatre\n\n\nvingt et\ncent\n")
    code, out, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                          "--prefix", str(tmp_path / "pre.txt")], capsys)  # fmt: skip
    assert code == 0, err
    lines = out.split("\n")
    assert lines[0].startswith("quatre") and lines[3].startswith("vingt et") and lines[2] == ""
    # an empty line with a prefix is decoded from it: every output starts with its prefix (the
    # prefix was dropped, and the line came out empty)
    assert lines[4].startswith("cent"), lines
    # and its words have their probabilities, as any translation's (they were none)
    code, out, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                          "--prefix", str(tmp_path / "pre.txt"), "--output_format", "jsonl"],
                         capsys)  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and rows[4]["words"][0]["word"] == "cent" and rows[4]["log_prob"] < 0
    assert rows[2]["words"] == [] and rows[2]["log_prob"] == 0.0  # "" without a prefix
    (tmp_path / "short.txt").write_text("quatre\n")
    code, out, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                          "--prefix", str(tmp_path / "short.txt"), "-o", str(tmp_path / "o")],
                         capsys)  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert "short.txt has 1 lines" in err and "in.txt has 5" in err
    assert not (tmp_path / "o").exists()
    # a prefix the vocabulary cannot spell is named by its file and line, with jsonl, flagged
    # words and markup too (they said "prefix 2")
    (tmp_path / "bad.txt").write_text("quatre\n<b>\n\n\n\n")
    for extra in ([], ["--output_format", "jsonl"], ["--flag_below", "0.5"],
                  ["--markup", "html"]):  # fmt: skip
        code, out, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                              "--prefix", str(tmp_path / "bad.txt"), *extra], capsys)  # fmt: skip
        assert code == 2 and out == "" and err.count("\n") == 1, (extra, err)
        assert f"{tmp_path / 'bad.txt'}: line 2 holds characters" in err, (extra, err)
    code, _, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                        "--min_len", "48"], capsys)  # fmt: skip
    assert code == 2 and "min_len 48 is above the model's length limit (47" in err
