"""The step-through view (`transformer explain MODEL_DIR SENTENCE --html OUT`; POST and GET
/step-through of `transformer serve`). Its numbers are read back from the written file and
checked against each other and against the model's own API: the softmax of the shown scaled
scores, `transformer attention`'s weights, layer-norm statistics, `model.probabilities`,
`beam_search`'s n-best, and a beam tree worked out by hand. Then its size and time limits, and
bad input.
"""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer.config import DecodeConfig, ModelConfig
from transformer.errors import UserError
from transformer.inference.beam import beam_search
from transformer.inference.beam_tree import FINISHED, KEPT, PRUNED, BeamTree
from transformer.inference.engine import TorchEngine
from transformer.inspect.attention import inspect_sentence
from transformer.inspect.step_page import step_through_job
from transformer.model import Transformer
from transformer.vocab import EOS_ID

from helpers import A, B, C, D, Stub, assert_error, cli, client_for, padded

SENTENCE = "seven hundred and seventy-one"


def read_view(path: Path) -> dict:
    """The data embedded in a written page."""
    text = Path(path).read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="step-data">')
    start = text.index(">", start) + 1
    return json.loads(text[start : text.index("</script>", start)])


def array(m: dict) -> np.ndarray:
    """A matrix of the view as the page decodes it: base64 of little-endian float32."""
    return np.frombuffer(base64.b64decode(m["data"]), "<f4").reshape(m["shape"])


def engine_with(engine: TorchEngine, model) -> TorchEngine:
    """``engine``'s tokenizers and search around another model."""
    return TorchEngine(model, engine.tokenizers, engine.decode, engine.config, engine.path)


def random_engine(engine: TorchEngine, preset: str = "tiny", **fields) -> TorchEngine:
    """A random model (seed 0) of ``preset`` with ``fields``, on ``engine``'s tokenizers."""
    torch.manual_seed(0)
    config = ModelConfig.preset(preset, src_vocab_size=engine.tokenizers.src.vocab_size,
                                tgt_vocab_size=engine.tokenizers.tgt.vocab_size, dropout=0.0,
                                **fields)  # fmt: skip
    return engine_with(engine, Transformer(config).eval())


@pytest.fixture(scope="module", params=["trained post-norm", "random pre-norm, learned positions"])
def shown(request, torch_engine, tmp_path_factory) -> tuple[TorchEngine, dict]:
    """(the engine, the view read back from its written file) for two kinds of model."""
    engine = torch_engine
    if request.param.startswith("random"):
        engine = random_engine(torch_engine, norm_first=True, positional="learned",
                               max_positions=48)  # fmt: skip
    out = tmp_path_factory.mktemp("view") / "step.html"
    step_through_job(engine, SENTENCE, out)
    return engine, read_view(out)


def attentions(view: dict):
    """(kind, layer, the shown attention) of every attention in the view."""
    for i, layer in enumerate(view["encoder"]):
        yield "encoder", i, layer["self"]
    for i, layer in enumerate(view["decoder"]):
        yield "decoder self", i, layer["self"]
        yield "cross", i, layer["cross"]


# ----------------------------------------------------------------------------- honest numbers
def test_shown_softmax_rows_are_the_softmax_of_the_shown_scaled_scores(shown):
    _, view = shown
    d_k = view["model"]["d_head"]
    for kind, layer, a in attentions(view):
        scores, scaled, weights = array(a["scores"]), array(a["scaled"]), array(a["weights"])
        blocked = np.isneginf(scaled)
        if kind == "decoder self":  # the look-ahead mask: exactly the cells above the diagonal
            T = scaled.shape[-1]
            assert (blocked == np.triu(np.ones((T, T), bool), 1)).all(), layer
        else:
            assert not blocked.any(), (kind, layer)
        np.testing.assert_allclose(scaled[~blocked], scores[~blocked] / math.sqrt(d_k),
                                   rtol=1e-5, atol=1e-6)  # fmt: skip
        x = np.where(blocked, -np.inf, scaled.astype(np.float64))
        softmax = np.exp(x - x.max(-1, keepdims=True))
        softmax /= softmax.sum(-1, keepdims=True)
        np.testing.assert_allclose(weights, softmax, atol=1e-6, err_msg=f"{kind} {layer}")
        assert (weights[blocked] == 0).all()


def test_shown_attention_is_what_transformer_attention_returns(shown):
    engine, view = shown
    seen = inspect_sentence(engine.model, engine.tokenizers, SENTENCE, engine.decode)
    assert view["translation"] == seen.translation
    assert view["source"]["pieces"] == seen.src_labels
    assert view["target"]["pieces"] == seen.tgt_labels
    for i, layer in enumerate(view["encoder"]):
        want = seen.maps.encoder[i][0].numpy()
        np.testing.assert_allclose(array(layer["self"]["weights"]), want, atol=1e-6)
    for i, layer in enumerate(view["decoder"]):
        maps = seen.maps.decoder[i]
        np.testing.assert_allclose(array(layer["self"]["weights"]), maps.self_attention[0],
                                   atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(array(layer["cross"]["weights"]), maps.cross_attention[0],
                                   atol=1e-6)  # fmt: skip


def test_layer_norm_outputs_have_mean_0_and_std_1_before_gamma_and_beta(shown):
    engine, view = shown
    model = engine.model
    modules = [[layer.norm1, layer.norm2] for layer in model.encoder.layers]
    modules += [[layer.norm1, layer.norm2, layer.norm3] for layer in model.decoder.layers]
    shown_norms = [layer["norms"] for layer in view["encoder"] + view["decoder"]]
    norms = [(m, n) for ms, ns in zip(modules, shown_norms, strict=True)
             for m, n in zip(ms, ns, strict=True)]  # fmt: skip
    norms += [(getattr(model, name).final_norm, n) for name, n in view["final_norms"].items()]
    assert len(norms) == 2 * 2 + 3 * 2 + (2 if model.config.norm_first else 0)
    for module, norm in norms:
        mean_h, std_h, mean_hat, std_hat, _, _ = array(norm["stats"])
        assert np.abs(mean_hat).max() <= 1e-5 and np.abs(std_hat - 1).max() <= 1e-5
        # The shown ĥ and y against the notes' four steps and the model's own LayerNorm.
        h = array(norm["input"]).astype(np.float64)  # (T, D): d_model 32 is not cut
        np.testing.assert_allclose(mean_h, h.mean(-1), atol=1e-5)
        np.testing.assert_allclose(std_h, h.std(-1), atol=1e-5)
        x_hat = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + module.eps)
        np.testing.assert_allclose(array(norm["normalized"]), x_hat, atol=1e-5)
        with torch.no_grad():
            y = module(torch.from_numpy(array(norm["input"]).copy()))
        np.testing.assert_allclose(array(norm["output"]), y.numpy(), atol=1e-5)


def test_the_top_10_are_model_probabilities(shown):
    engine, view = shown
    model = engine.model
    src = torch.tensor([view["source"]["ids"]])
    tgt = torch.tensor([view["target"]["ids"]])
    with torch.inference_mode():
        memory, src_mask = model.encode(src)
        for t, shown_t in enumerate(view["next"]):
            logits = model.decode(tgt[:, : t + 1], memory, src_mask)[0, -1]  # a prefix alone
            probs = model.probabilities(logits)
            top = probs.topk(10)
            assert [i for i, _, _ in shown_t["top"]] == top.indices.tolist()
            assert [p for _, _, p in shown_t["top"]] == pytest.approx(top.values.tolist(), abs=1e-6)
            following = tgt[0, t + 1].item() if t + 1 < tgt.size(1) else EOS_ID
            assert shown_t["chosen"][0] == following
            assert shown_t["chosen"][2] == pytest.approx(probs[following].item(), abs=1e-6)


def test_the_beam_trees_finished_hypotheses_are_beam_searchs_nbest(torch_engine):
    model, tokenizers = torch_engine.model, torch_engine.tokenizers
    sentences = [SENTENCE, "twelve", "nine hundred thousand and four"]
    src = padded([[*tokenizers.src.encode(s), EOS_ID] for s in sentences])
    decode = replace(torch_engine.decode, beam_size=4, nbest=4)
    tree = BeamTree()
    recorded = beam_search(model, src, decode, recorder=tree)
    plain = beam_search(model, src, decode)
    as_pairs = [[(h.tokens, h.score) for h in hyps] for hyps in plain]
    assert [[(h.tokens, h.score) for h in hyps] for hyps in recorded] == as_pairs  # no effect
    for sentence, hyps in enumerate(plain):
        finals = tree.finished(sentence)[: decode.nbest]
        assert [n.tokens[-1] for n in finals] == [EOS_ID] * len(hyps)
        assert [(n.tokens[:-1], n.score) for n in finals] == as_pairs[sentence]
        assert [n.log_prob for n in finals] == [h.log_prob for h in hyps]


def test_the_beam_tree_of_hand_set_probabilities():
    # K = 2, no length penalty. Step 0: A 0.6 and B 0.3 go on; </s> 0.1 is third of the 2K
    # best, outside the top K: pruned. Step 1: A </s> 0.42 and B </s> 0.27 finish, A C 0.18 and
    # B D 0.03 go on; the best running beam (0.18) cannot beat the worse finished one (0.27).
    stub = Stub({(): {A: 0.6, B: 0.3, EOS_ID: 0.1}, (A,): {EOS_ID: 0.7, C: 0.3},
                 (B,): {EOS_ID: 0.9, D: 0.1}})  # fmt: skip
    tree = BeamTree()
    decode = DecodeConfig(beam_size=2, nbest=2, length_penalty=0.0)
    found = beam_search(stub, padded([[4, 5, EOS_ID]]), decode, recorder=tree)[0]
    ln = math.log
    got = [(n.step, n.tokens, n.status, n.parent, n.log_prob) for n in tree.nodes[0]]
    want = [
        (0, [A], KEPT, None, ln(0.6)),
        (0, [B], KEPT, None, ln(0.3)),
        (0, [EOS_ID], PRUNED, None, ln(0.1)),
        (1, [A, EOS_ID], FINISHED, 0, ln(0.6) + ln(0.7)),
        (1, [B, EOS_ID], FINISHED, 1, ln(0.3) + ln(0.9)),
        (1, [A, C], KEPT, 0, ln(0.6) + ln(0.3)),
        (1, [B, D], KEPT, 1, ln(0.3) + ln(0.1)),
    ]
    assert [g[:4] for g in got] == [w[:4] for w in want]  # fmt: skip
    assert [g[4] for g in got] == pytest.approx([w[4] for w in want], abs=1e-5)
    assert tree.last_step == {0: 1}
    assert [h.tokens for h in found] == [[A], [B]]
    assert [n.score for n in tree.finished(0)] == [h.score for h in found]


def test_the_view_marks_the_chosen_output_in_the_tree(shown):
    _, view = shown
    nodes, nbest = view["beam"]["nodes"], view["beam"]["nbest"]
    best = nodes[nbest[0]["node"]]
    assert best[5] == FINISHED and best[6] == pytest.approx(nbest[0]["score"])
    pieces, node = [], nbest[0]["node"]
    while node is not None:
        pieces.insert(0, nodes[node][2])
        node = nodes[node][1]
    assert pieces == [*view["target"]["pieces"][1:], "</s>"]


# ------------------------------------------------------------------------- sizes and times
TEN_WORDS = "nine hundred and ninety nine thousand nine hundred and twelve"


@pytest.mark.slow
def test_a_demo_sized_model_writes_at_most_2_mb_in_at_most_2_s(torch_engine, tmp_path):
    # The demo's shape (configs numbers.yaml): d_model 128, 4 heads, d_ff 512, 3 + 3 layers. A
    # random one runs to its length limit (S + 50 tokens): the largest view a sentence gives.
    engine = random_engine(torch_engine, "small", d_model=128, n_heads=4, d_ff=512,
                           n_encoder_layers=3, n_decoder_layers=3)  # fmt: skip
    assert len(TEN_WORDS.split()) == 10
    step_through_job(engine, TEN_WORDS, tmp_path / "warm.html")  # first calls allocate
    cpu = time.process_time()
    written = step_through_job(engine, TEN_WORDS, tmp_path / "step.html")
    cpu = time.process_time() - cpu
    print(f"demo-sized: {written.bytes} bytes, {written.seconds:.2f} s wall, {cpu:.2f} s CPU")
    assert written.bytes == (tmp_path / "step.html").stat().st_size <= 2_000_000
    assert min(written.seconds, cpu) <= 2.0  # CPU time: the machine may be busy with others
    assert written.truncated == []  # nothing of the demo's size needs cutting


@pytest.mark.slow
def test_a_base_model_writes_at_most_10_mb_and_says_what_it_cut(torch_engine, tmp_path):
    # A translation about as long as its source, as a trained model's is (a random one runs to
    # its length limit; the budget test below covers any length).
    engine = random_engine(torch_engine, "base")
    decode = replace(engine.decode, max_len_a=1.0, max_len_b=2)
    written = step_through_job(engine, TEN_WORDS, tmp_path / "step.html", decode=decode)
    print(f"base: {written.bytes} bytes in {written.seconds:.2f} s; cut: {written.truncated}")
    assert written.bytes <= 10_000_000
    view = read_view(tmp_path / "step.html")
    assert any("d_model" in cut for cut in view["truncated"])
    norm = view["encoder"][0]["norms"][0]["input"]
    assert norm["full"][-1] == 512 and norm["shape"][-1] == view["caps"]["width"] < 512
    T = len(view["target"]["ids"])
    for matrix in ("scores", "scaled", "weights"):  # never cut
        assert view["decoder"][0]["self"][matrix]["shape"] == [8, T, T]


def test_a_view_over_budget_is_cut_further_or_refused(torch_engine, monkeypatch):
    from transformer.inspect import step_view as module
    from transformer.inspect.step_page import engine_view

    engine = random_engine(torch_engine, "small", n_encoder_layers=1, n_decoder_layers=1,
                           max_positions=48)  # d_model 256, d_k 64, d_ff 1024  # fmt: skip
    full = engine_view(engine, SENTENCE)
    assert full["caps"] == {"head": 64, "width": 256, "hidden": 512}
    monkeypatch.setattr(module, "MAX_BYTES", int(len(json.dumps(full)) * 0.6))
    view = engine_view(engine, SENTENCE)
    assert len(json.dumps(view)) <= module.MAX_BYTES
    assert view["caps"] == {"head": 32, "width": 128, "hidden": 256}
    assert len(view["truncated"]) == 3  # Q/K/V, d_model-wide vectors, feed-forward units
    monkeypatch.setattr(module, "MAX_BYTES", 1000)  # not even the scores fit
    with pytest.raises(UserError, match=r"would take at least [\d.]+ MB, over the 0.001 MB"):
        engine_view(engine, SENTENCE)


def test_the_size_of_the_scores_is_what_the_view_holds_of_them(torch_engine):
    from transformer.inspect.step_page import engine_view, model_facts
    from transformer.inspect.step_view import scores_bytes

    engine = random_engine(torch_engine, "small", n_encoder_layers=2, n_decoder_layers=1,
                           max_positions=48)  # fmt: skip
    view = engine_view(engine, SENTENCE)
    held = sum(len(attention[m]["data"]) for stack in ("encoder", "decoder")
               for layer in view[stack] for kind in ("self", "cross") if kind in layer
               for attention in [layer[kind]] for m in ("scores", "scaled", "weights"))  # fmt: skip
    S, T = len(view["source"]["ids"]), len(view["target"]["ids"])
    assert scores_bytes(S, T, model_facts(engine)) == held


def test_a_view_that_cannot_fit_is_refused_before_the_work_it_would_waste(
    torch_engine, monkeypatch
):
    from transformer.inspect import step_page, step_view
    from transformer.inspect.step_page import engine_view, model_facts

    engine = random_engine(torch_engine, "small", n_encoder_layers=1, n_decoder_layers=1,
                           max_positions=48)  # fmt: skip
    searched, built = [], []
    trace, view = step_page.trace_sentence, step_view._view
    monkeypatch.setattr(step_page, "trace_sentence", lambda *a: searched.append(1) or trace(*a))
    monkeypatch.setattr(step_view, "_view", lambda *a: built.append(1) or view(*a))
    S = len(engine.tokenizers.src.encode(SENTENCE)) + 1
    facts = model_facts(engine)
    # min_len 40: at least 40 tokens out, too many for the budget: no search at all
    monkeypatch.setattr(step_view, "MAX_BYTES", step_view.scores_bytes(S, 41, facts) - 1)
    with pytest.raises(UserError, match=r"\(\d+ tokens in, at least 40 out\) would take at "):
        engine_view(engine, SENTENCE, replace(engine.decode, min_len=40, max_len_b=47))
    assert searched == [] and built == []
    # min_len 20 fits, but the random model's output runs to the limit of 47 tokens: searched
    # once, and refused before any of the view is built
    monkeypatch.setattr(step_view, "MAX_BYTES", step_view.scores_bytes(S, 21, facts))
    with pytest.raises(UserError, match=r"\(\d+ tokens in, 47 out\) would take [\d.]+ MB"):
        engine_view(engine, SENTENCE, replace(engine.decode, min_len=20, max_len_b=47))
    assert searched == [1] and built == []


# -------------------------------------------------------------------------------- bad input
def test_an_empty_or_too_long_sentence_is_a_one_line_error(numbers_model, tmp_path, capsys):
    out = tmp_path / "step.html"
    too_long = " ".join(["seven"] * 60)
    for sentence, words in (("", ["empty"]), ("   ", ["empty"]),
                            (too_long, ["tokens", "at most 48", "max_positions"])):  # fmt: skip
        code, _, err = cli(["explain", str(numbers_model), sentence, "--html", str(out)], capsys)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert all(word in err for word in words), err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_replaced_only_with_force(numbers_model, tmp_path, capsys):
    out = tmp_path / "mine.html"
    out.write_text("my notes")
    args = ["explain", str(numbers_model), SENTENCE, "--html", str(out)]
    code, _, err = cli(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(out) in err and "--force" in err
    assert out.read_text() == "my notes"
    code, said, _ = cli([*args, "--force"], capsys)
    assert code == 0 and f"wrote {out}" in said
    assert read_view(out)["sentence"] == SENTENCE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.html"]  # no temporary file left
    code, _, err = cli(["explain", str(numbers_model), SENTENCE, "--html", str(tmp_path)], capsys)
    assert code == 2 and "is a folder" in err


def test_the_command_without_a_model_still_shows_the_notes(numbers_model, capsys):
    code, said, _ = cli(["explain", "--topic", "scaling", "--no-color"], capsys)
    assert code == 0 and "softmax" in said
    for args, words in ((["explain", str(numbers_model)], "SENTENCE --html OUT"),
                        (["explain", "--html", "x.html"], "need MODEL_DIR"),
                        (["explain", "--force"], "need MODEL_DIR"),  # it was ignored
                        (["explain", str(numbers_model), SENTENCE, "--html", "x.html",
                          "--topic", "masks"], "--topic")):  # fmt: skip
        code, _, err = cli(args, capsys)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_model_that_is_not_a_transformer_is_refused(torch_engine):
    from transformer.inspect.trace import trace_sentence

    with pytest.raises(UserError, match="shows the Transformer; .* holds a Stub"):
        trace_sentence(engine_with(torch_engine, Stub({})), SENTENCE)


# -------------------------------------------------------------------------------------- serve
def test_serve_answers_the_view_and_the_page_that_draws_it(torch_engine):
    from transformer.inspect.step_page import engine_view

    with client_for(torch_engine) as client:
        answer = client.post("/step-through", json={"sentence": SENTENCE, "beam_size": 2})
        said = client.post("/translate", json={"sentences": [SENTENCE], "beam_size": 2}).json()
        page = client.get("/step-through", params={"sentence": SENTENCE})
        scripts = [client.get(f"/steps/{name}") for name in ("step-core.js", "step-main.js")]
    assert answer.status_code == 200, answer.text
    view = answer.json()["view"]
    assert answer.json()["translation"] == view["translation"]
    assert view["translation"] == said["translations"][0]["text"]
    library = engine_view(torch_engine, SENTENCE, replace(torch_engine.decode, beam_size=2))
    assert view["decoder"][-1]["cross"]["weights"] == library["decoder"][-1]["cross"]["weights"]
    assert view["beam"]["beam_size"] == 2
    assert page.status_code == 200 and '<script src="/steps/step-main.js" defer>' in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for text in (page.text, *(s.text for s in scripts)):
        assert "http://" not in text and "https://" not in text


def test_serve_refuses_bad_input_with_json_422(torch_engine):
    with client_for(torch_engine, max_chars=400, max_beam=4) as client:
        for body, words in (
            ({"sentence": ""}, ["sentence"]),
            ({"sentence": "  "}, ["empty"]),
            ({"sentence": " ".join(["seven"] * 60)}, ["max_positions"]),
            ({"sentence": SENTENCE, "beam_size": 5}, ["beam_size", "serve.max_beam"]),
        ):
            assert_error(client.post("/step-through", json=body), 422, "invalid_request", *words)


def test_serve_with_ctranslate2_answers_501(numbers_model):
    pytest.importorskip("ctranslate2")
    from transformer.config import RuntimeConfig
    from transformer.inference.engine import load_engine

    engine = load_engine(numbers_model, "ctranslate2", runtime=RuntimeConfig(device="cpu"))
    with client_for(engine) as client:
        answer = client.post("/step-through", json={"sentence": "twelve"})
    assert_error(answer, 501, "not_implemented", "torch engine", "ctranslate2")
