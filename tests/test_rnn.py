"""The RNN encoder-decoder: its attention against the equations, the invariants the Transformer
keeps (alone = in a padded batch, causality, stepwise = teacher forcing, beam 1 = greedy), the
same search and checkpoints, a small task learned, and exact resume."""

import shutil
from dataclasses import replace

import pytest
import torch

from transformer.config import DecodeConfig, ModelConfig, RuntimeConfig
from transformer.errors import UserError
from transformer.export.spec import check_expressible
from transformer.inference import greedy_search
from transformer.inference.beam import beam_search
from transformer.inference.engine import load_torch_engine
from transformer.inspect.info import parameter_table
from transformer.model import (
    AdditiveAttention,
    MultiplicativeAttention,
    RNNEncoderDecoder,
    build_model,
    padding_mask,
)
from transformer.model.rnn_encoder import final_states
from transformer.model_dir.checkpoints import update_index
from transformer.training.loop import train
from transformer.training.loss import label_smoothed_nll
from transformer.vocab import BOS_ID, EOS_ID, PAD_ID

from helpers import (
    TINY_NUMBERS,
    assert_error,
    cli,
    client_for,
    padded,
    tiny_rnn,
    train_config,
    weights,
)

V = 30  # target vocabulary of the random models
KINDS = [("gru", "none"), ("gru", "bahdanau"), ("lstm", "luong"), ("lstm", "bahdanau")]
SENTENCES = [[5, 6, 7, 8, 9, 3], [10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 19, 3], [20, 3]]


def rnn(cell="gru", attention="bahdanau", varied=False, **overrides) -> RNNEncoderDecoder:
    """A random two-layer RNN (seed 0, eval mode); ``varied``: with weights drawn N(0, 1/4), so that
    searches vary with source and position and sometimes end early (as test_decoding's varied())."""
    model = tiny_rnn(cell, attention, tgt_vocab=V, **overrides)
    if varied:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 0.5)
            model.output.weight[EOS_ID] *= 1.5  # some sentences end before their limit
    return model


# --- Attention against the equations ----------------------------------------------------------


def test_additive_and_multiplicative_scores_follow_the_equations():
    torch.manual_seed(0)
    s, h = torch.randn(2, 1, 5), torch.randn(2, 4, 6)  # decoder states, annotations
    mask = padding_mask(torch.tensor([[7, 7, 7, 3], [7, 3, PAD_ID, PAD_ID]]))
    additive, multiplicative = AdditiveAttention(5, 6, 3), MultiplicativeAttention(5, 6)
    W_a, U_a, b = additive.query.weight, additive.key.weight, additive.key.bias
    v_a, W_m = additive.score.weight[0], multiplicative.key.weight
    for module, score in (
        (additive, lambda i, j: v_a @ torch.tanh(W_a @ s[i, 0] + U_a @ h[i, j] + b)),
        (multiplicative, lambda i, j: s[i, 0] @ (W_m @ h[i, j])),
    ):
        context, alpha = module(s, module.project_keys(h), h, mask)
        for i, length in enumerate((4, 2)):
            e = torch.stack([score(i, j) for j in range(length)])  # e_ij over the real words
            expected = torch.softmax(e, dim=0)  # α_ij
            assert torch.allclose(alpha[i, 0, :length], expected, atol=1e-6)
            assert torch.all(alpha[i, 0, length:] == 0)
            c = (expected[:, None] * h[i, :length]).sum(dim=0)  # c_i = Σ_j α_ij h_j
            assert torch.allclose(context[i, 0], c, atol=1e-6)


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
def test_attention_weights_sum_to_one_over_real_words_and_are_zero_on_padding(attention):
    model, src = rnn(attention=attention), padded(SENTENCES)
    tgt = torch.tensor([[BOS_ID, 4, 5, 6, 7]] * len(SENTENCES))
    maps = model.attention_maps(src, tgt)
    assert maps.encoder == [] and len(maps.decoder) == 1
    assert maps.decoder[0].self_attention is None
    alpha = maps.decoder[0].cross_attention  # (B, 1, T, S)
    assert alpha.shape == (len(SENTENCES), 1, 5, src.size(1))
    real = (src != PAD_ID)[:, None, None, :].expand_as(alpha)
    assert torch.allclose(alpha.sum(dim=-1), torch.ones(alpha.shape[:-1]), atol=1e-6)
    assert torch.all(alpha[~real] == 0) and torch.all(alpha[real] > 0)


def test_final_states_are_the_last_state_of_each_direction():
    # The reference: the bidirectional RNN's own h_n, for each sentence run alone, unpadded.
    model = rnn(cell="gru", attention="none")
    annotations, src_mask = model.encode(padded(SENTENCES))
    summary = final_states(annotations, src_mask)  # (B, 2H)
    for i, sentence in enumerate(SENTENCES):
        with torch.no_grad():
            x = model.encoder.embedding(torch.tensor([sentence]))
            _, h_n = model.encoder.rnn(x)  # (layers · 2, 1, H): forward, backward per layer
        assert torch.allclose(summary[i], torch.cat([h_n[-2, 0], h_n[-1, 0]]), atol=1e-6)


# --- The Transformer's invariants ------------------------------------------------------------


@pytest.mark.parametrize(("cell", "attention"), KINDS)
def test_a_sentence_alone_equals_the_same_sentence_in_a_padded_batch(cell, attention):
    model = rnn(cell, attention)
    src = torch.tensor([[5, 6, 7, 8, 3]])
    tgt = torch.tensor([[BOS_ID, 9, 10]])
    with torch.no_grad():
        alone = model(src, tgt)
        src_batch = torch.tensor([[5, 6, 7, 8, 3, PAD_ID, PAD_ID], [11, 12, 13, 14, 15, 16, 3]])
        tgt_batch = torch.tensor([[BOS_ID, 9, 10, PAD_ID, PAD_ID], [BOS_ID, 4, 5, 6, 7]])
        batched = model(src_batch, tgt_batch)
    assert (batched[0, :3] - alone[0]).abs().max() < 1e-5


def _same(a, b) -> None:
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], rel=1e-5, abs=1e-4)


@pytest.mark.parametrize(("cell", "attention"), KINDS)
def test_the_searches_run_the_rnn_unchanged(cell, attention):
    model, src = rnn(cell, attention, varied=True), padded(SENTENCES)
    greedy = greedy_search(model, src, DecodeConfig(max_len_b=12))
    assert any(len(h.tokens) < len(s) + 12 for h, s in zip(greedy, SENTENCES, strict=True))
    _same(greedy, greedy_search(model, src, DecodeConfig(max_len_b=12), use_cache=False))
    beam_1 = beam_search(model, src, DecodeConfig(1, 0.0, max_len_b=12))
    _same(greedy, [nbest[0] for nbest in beam_1])  # beam size 1 = greedy
    wide = DecodeConfig(beam_size=4, nbest=3, max_len_b=12)
    beams = beam_search(model, src, wide)  # reorder and keep, through the state
    for cached, uncached in zip(beams, beam_search(model, src, wide, use_cache=False), strict=True):
        _same(cached, uncached)
    for i, sentence in enumerate(SENTENCES):  # alone = in the batch
        _same(beam_search(model, torch.tensor([sentence]), wide)[0], beams[i])


# --- One config, two families -----------------------------------------------------------------


def test_the_other_familys_keys_change_nothing():
    src, tgt = padded(SENTENCES), torch.tensor([[BOS_ID, 4, 5]] * len(SENTENCES))

    def logits(**fields):
        torch.manual_seed(0)
        config = ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=V, **fields)
        return build_model(config).eval()(src, tgt)

    with torch.no_grad():
        assert torch.equal(logits(), logits(rnn_hidden=8, rnn_cell="lstm", rnn_layers=3))
        rnn_keys = {"architecture": "rnn", "rnn_hidden": 16, "rnn_embedding": 8}
        assert torch.equal(
            logits(**rnn_keys), logits(**rnn_keys, d_model=64, n_heads=2, n_encoder_layers=1)
        )


def test_the_parameter_table_counts_every_parameter_once():
    for tie in (True, False):
        model = rnn(tie_output=tie, share_embeddings=True, tgt_vocab_size=40)
        rows = dict(parameter_table(model))
        assert rows["total"] == sum(p.numel() for p in model.parameters())


def test_what_only_a_transformer_can_do_is_a_one_line_error():
    with pytest.raises(UserError, match="architecture is 'rnn'") as error:
        check_expressible(rnn().config)
    assert "\n" not in str(error.value)
    # A Transformer's unused RNN keys do not stop its export.
    check_expressible(ModelConfig(rnn_hidden=8, rnn_attention="luong", rnn_cell="lstm"))
    with pytest.raises(UserError, match="no attention"):
        rnn(attention="none").attention_maps(padded(SENTENCES), torch.tensor([[BOS_ID]] * 4))


# --- Learning and resuming ---------------------------------------------------------------------


@pytest.fixture
def one_thread():
    """Torch on one thread for the test. A step of these small models is a long chain of small
    operations; on a busy 2-core machine two threads waiting for each other made the same
    training 22x slower (127 s against 5.7 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def reversal(generator: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor, list]:
    """n random sequences of 3-6 symbols (ids 4..13) and their reversals, as a padded batch."""
    src, tgt, answers = [], [], []
    for length in torch.randint(3, 7, (n,), generator=generator).tolist():
        x = torch.randint(4, 14, (length,), generator=generator).tolist()
        src.append([*x, EOS_ID])
        tgt.append(x[::-1])
        answers.append(x[::-1])
    tgt_in = padded([[BOS_ID, *y] for y in tgt])
    tgt_out = padded([[*y, EOS_ID] for y in tgt])
    return padded(src), torch.stack([tgt_in, tgt_out]), answers


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fields", "accuracy"),
    [
        ({"architecture": "rnn", "rnn_attention": "none"}, 0.7),
        ({"architecture": "rnn", "rnn_attention": "bahdanau"}, 0.95),
        ({"architecture": "rnn", "rnn_attention": "luong", "rnn_cell": "lstm"}, 0.95),
        ({"architecture": "transformer"}, 0.9),
    ],
    ids=["gru", "gru-bahdanau", "lstm-luong", "transformer"],
)
def test_each_architecture_learns_to_reverse_a_short_sequence(fields, accuracy, one_thread):
    # 300 Adam steps of 64 sequences, the rate falling linearly to 0 (at a constant rate the
    # last steps' loss jumps about, and the accuracy with it: 0.85-0.995 over four seeds and the
    # two libraries of model/products.py). Seconds on a CPU. Measured (greedy, 200 new
    # sequences, seeds 0-3): GRU 0.88-0.93, GRU + Bahdanau 1.0, LSTM + Luong 1.0, Transformer
    # 1.0 (MKL's products and oneDNN's alike).
    torch.manual_seed(0)
    config = ModelConfig.preset(
        "tiny", src_vocab_size=14, tgt_vocab_size=14, d_model=64, d_ff=128, dropout=0.0,
        rnn_hidden=64, rnn_embedding=32, rnn_dropout=0.0, **fields,
    )  # fmt: skip
    model = build_model(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / 300)
    data = torch.Generator().manual_seed(1)
    for _ in range(300):
        src, (tgt_in, tgt_out), _ = reversal(data, 64)
        sums = label_smoothed_nll(model(src, tgt_in), tgt_out, 0.0)
        optimizer.zero_grad()
        (sums.loss / sums.n_tokens).backward()
        optimizer.step()
        schedule.step()
    src, _, answers = reversal(torch.Generator().manual_seed(99), 200)
    hypotheses = greedy_search(model, src, DecodeConfig())
    correct = sum(h.tokens == y for h, y in zip(hypotheses, answers, strict=True))
    assert correct / len(answers) >= accuracy


@pytest.mark.slow
def test_an_rnn_run_resumes_exactly(tmp_path):
    # The run to step 30; a copy cut back to its step-10 checkpoint, resumed to step 30, must end
    # with the same weights, bit for bit (dropout on: the RNG state is restored too).
    args = [*TINY_NUMBERS, "--architecture", "rnn", "--rnn_hidden", "24", "--rnn_embedding", "16",
            "--rnn_dropout", "0.1", "--max_steps", "30", "--save_every", "10",
            "--validate_every", "100", "--keep_checkpoints", "10", "--bleu_sentences", "0",
            "--threads", "1",
    ]  # fmt: skip
    whole = tmp_path / "whole"
    train(train_config(args), whole, progress=False)
    cut = tmp_path / "cut"
    shutil.copytree(whole, cut)
    for later in ("step_00000020", "step_00000030"):
        shutil.rmtree(cut / "checkpoints" / later)
    update_index(cut / "checkpoints", last="step_00000010", best="step_00000010")
    result = train(train_config(args), cut, resume=True, progress=False)
    assert (result.first_step, result.step) == (10, 30)
    expected, resumed = (
        weights(whole / "checkpoints/step_00000030"),
        weights(cut / "checkpoints/step_00000030"),
    )
    assert "encoder.rnn.weight_hh_l0" in expected  # an RNN was trained
    assert expected.keys() == resumed.keys()
    assert [k for k in expected if not torch.equal(expected[k], resumed[k])] == []


# --- The commands ------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_commands_take_an_rnn_run(rnn_numbers_model, tmp_path, capsys):
    run = str(rnn_numbers_model)
    figures = tmp_path / "attention"
    code, said, err = cli(["attention", run, "seven hundred", "--out", str(figures), "--html"],
                          capsys)  # fmt: skip
    assert code == 0, err
    drawn = sorted(p.name for p in figures.glob("*.png"))
    assert drawn == ["cross_layer1_head1.png", "cross_layer1_mean.png"]  # α_ij, no self-attention
    assert "RNN encoder-decoder" in (figures / "report.html").read_text()
    code, said, _ = cli(["info", "--architecture", "rnn", "--rnn_hidden", "32"], capsys)
    assert code == 0 and "bidirectional GRU" in said and "attention (bahdanau)" in said
    code, _, err = cli(["export", run, "--to", "ctranslate2", str(tmp_path / "ct2")], capsys)
    assert code == 2 and "architecture is 'rnn'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ct2").exists()


@pytest.mark.slow
def test_serve_draws_the_rnns_attention_as_one_layer_and_head(rnn_numbers_model):
    engine = load_torch_engine(rnn_numbers_model, runtime=RuntimeConfig(device="cpu"))
    with client_for(engine) as client:
        seen = client.post("/attention", json={"sentence": "seven hundred and seventy-one"})
        said = client.post("/translate", json={"sentences": ["seven hundred and seventy-one"]})
    assert seen.status_code == 200, seen.text
    seen = seen.json()
    assert seen["translation"] == said.json()["translations"][0]["text"]
    (layer,) = seen["cross_attention"]  # [layer][head][row][column]
    (alpha,) = layer
    assert len(alpha) == len(seen["target_tokens"])
    for row in alpha:
        assert len(row) == len(seen["source_tokens"])
        assert sum(row) == pytest.approx(1.0, abs=1e-3)
    # Without attention there is nothing to draw: 501, as for the CTranslate2 engine.
    config = replace(engine.config, model=replace(engine.config.model, rnn_attention="none"))
    without = replace(engine, model=build_model(config.model).eval(), config=config)
    with client_for(without) as client:
        answer = client.post("/attention", json={"sentence": "seven"})
    assert_error(answer, 501, "not_implemented", "no attention")


@pytest.mark.slow
def test_the_search_options_and_score_take_an_rnn_run(rnn_numbers_model):
    engine = load_torch_engine(rnn_numbers_model, runtime=RuntimeConfig(device="cpu"))
    sources = ["seven hundred", "twelve", "three hundred and four"]
    found = engine.translate(sources, DecodeConfig(beam_size=4, length_penalty=0.0,
                                                   alignment=True)).nbest  # fmt: skip
    # score: the beam's own log-probability of what it found, teacher-forced.
    texts = [hyps[0].text for hyps in found]
    scored = engine.score(sources, texts, DecodeConfig(length_penalty=0.0)).scores
    for hyps, s in zip(found, scored, strict=True):
        if engine.tokenizers.tgt.encode(hyps[0].text) == hyps[0].tokens:
            assert s.log_prob == pytest.approx(hyps[0].score, abs=1e-5)  # no length penalty
    # alignment: a link for every output word, from its one attention (α_ij).
    for source, hyps in zip(sources, found, strict=True):
        links = hyps[0].alignment
        assert sorted({j for _, j in links}) == list(range(len(hyps[0].text.split())))
        assert all(0 <= i < len(source.split()) for i, _ in links)
    # prefix: every output starts with it.
    started = engine.translate(sources, DecodeConfig(beam_size=4), ["dou"] * 3).nbest
    assert all(hyps[0].text.startswith("dou") for hyps in started)
