"""``transformer export --to huggingface``, checked with ``transformers`` itself.

References and invariants: the exported folder loads with ``MarianMTModel.from_pretrained`` and
``MarianTokenizer.from_pretrained`` unchanged, and its greedy translations equal ours text for
text on 100 inputs: for the tests' trained number-words model, for a model of the demo's
configuration (separate vocabularies of different sizes), and for random tiny post-norm models
(shared or separate vocabularies, tied or not, relu / silu / gelu, an output bias, an odd
d_model, either positional layout); ``pipeline("translation")`` runs it. Permuting the residual
stream into Marian's sinusoid layout leaves our own logits unchanged. What Marian cannot express
is refused in one line, and OUT is never lost.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from transformer.config import DataConfig, DecodeConfig, ModelConfig, RunConfig
from transformer.data.tokenizer import Tokenizers
from transformer.hub.marian_weights import halves_permutation, to_halves
from transformer.inference.engine import load_torch_engine
from transformer.model import Transformer
from transformer.model_dir.checkpoints import save_checkpoint, update_index
from transformer.model_dir.weights import model_state
from transformer.training.loop import train
from transformer.vocab import UNK_ID

from helpers import Result, cli, one_line_error, snapshot, train_config
from marian_models import load_hf, number_words

LIMIT = 24  # tokens before </s> at most, in both
DEMO = Path(__file__).resolve().parents[1] / "runs" / "numbers-en-fr"


def random_model_dir(folder: Path, joint: bool = True, seed: int = 0, **model) -> Path:
    """A model directory holding a random model of ours, with SentencePiece models trained on
    number words, and a random output bias when it has one."""
    data = DataConfig(corpus=None, vocab_size=90 if joint else 70, joint_vocab=joint)
    tokenizers = Tokenizers.train(number_words()[0], data)
    config = ModelConfig.preset("tiny", src_vocab_size=tokenizers.src.vocab_size,
                                tgt_vocab_size=tokenizers.tgt.vocab_size, **model)  # fmt: skip
    torch.manual_seed(seed)
    net = Transformer(config).eval()
    if config.output_bias:
        with torch.no_grad():
            net.output.bias.normal_()
    tokenizers.save(folder)
    save_checkpoint(folder / "checkpoints", "step_00000001", net, RunConfig(model=config), None)
    update_index(folder / "checkpoints", last="step_00000001", best="step_00000001")
    return folder


def export(model_dir: Path, out: Path, capsys) -> Path:
    code, _, err = cli(["export", str(model_dir), "--to", "huggingface", str(out)], capsys)
    assert code == 0, err
    return out


def assert_same_greedy_text(model_dir: Path, out: Path, limit: int = LIMIT) -> None:
    """Our greedy translations of 100 inputs equal those of the exported folder's."""
    texts = [src for src, _ in number_words()[1][:100]]
    ours = load_torch_engine(model_dir, beam_size=1, max_len_a=0.0, max_len_b=limit)
    mine = ours.translate(texts).nbest
    hf, tokenizer = load_hf(out)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    generated = hf.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=limit + 1)
    theirs = tokenizer.batch_decode(generated, skip_special_tokens=True)
    # <unk> aside: we show it as " ⁇ " (SentencePiece), MarianTokenizer leaves it out.
    compared = [i for i, n in enumerate(mine) if UNK_ID not in n[0].tokens]
    assert len(compared) >= 90
    # A lone "▁" piece at the end: SentencePiece's decode keeps its space, MarianTokenizer strips.
    assert [mine[i][0].text.rstrip(" ") for i in compared] == [theirs[i] for i in compared]


def test_the_tests_trained_model_goes_out_text_for_text(numbers_model, tmp_path, capsys):
    out = export(numbers_model, tmp_path / "hf", capsys)
    assert_same_greedy_text(numbers_model, out)
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "source.spm",
            "target.spm", "vocab.json", "tokenizer_config.json"} <= files  # fmt: skip


RANDOM = {
    "shared-tied-silu-bias": dict(share_embeddings=True, activation="silu", output_bias=True),
    "separate-untied-gelu-odd": dict(
        joint=False, tie_output=False, activation="gelu", d_model=33, n_heads=3, output_bias=True
    ),  # fmt: skip
    "halves-relu": dict(positional_layout="halves", seed=1),
}


@pytest.mark.parametrize("case", list(RANDOM))
def test_random_models_go_out_text_for_text(case, tmp_path, capsys):
    model_dir = random_model_dir(tmp_path / "ours", **RANDOM[case])
    out = export(model_dir, tmp_path / "hf", capsys)
    assert_same_greedy_text(model_dir, out, limit=12)  # random: most run to the limit
    config = json.loads((out / "config.json").read_text())
    assert config["share_encoder_decoder_embeddings"] == RANDOM[case].get("share_embeddings", False)


@pytest.mark.slow  # trains (or uses the demo's own model when `make demo` has made it)
def test_the_demo_model_goes_out_text_for_text(tmp_path, capsys):
    model_dir = DEMO
    if not (DEMO / "checkpoints").is_dir():
        model_dir = tmp_path / "demo"
        args = ["--config", "numbers", "--numbers_train", "3000", "--max_steps", "40",
                "--max_tokens", "1500", "--max_minutes", "0", "--validate_every", "40",
                "--bleu_sentences", "0"]  # fmt: skip
        train(train_config(args), model_dir, progress=False)
    out = export(model_dir, tmp_path / "hf", capsys)
    assert (out / "target_vocab.json").is_file()  # the demo's vocabularies are separate
    assert_same_greedy_text(model_dir, out)


def test_pipeline_translation_runs_the_export(numbers_model, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    pipelines = importlib.import_module("transformers.pipelines")
    if "translation" in getattr(pipelines, "REMOVED_TASKS", {}):  # from transformers 5 on
        pytest.skip(f"transformers {transformers.__version__} has no translation pipeline")
    out = export(numbers_model, tmp_path / "hf", capsys)
    texts = [src for src, _ in number_words()[1][:5]]
    translator = transformers.pipeline("translation", model=str(out))
    found = [r["translation_text"] for r in translator(texts, num_beams=1, max_new_tokens=LIMIT)]
    ours = load_torch_engine(numbers_model, beam_size=1, max_len_a=0.0, max_len_b=LIMIT - 1)
    assert found == ours.translate(texts).best


def test_the_halves_permutation_leaves_the_model_unchanged():
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", src_vocab_size=40, tgt_vocab_size=30, d_model=36,
                                n_heads=4, activation="silu", output_bias=True)  # fmt: skip
    interleaved = Transformer(config).eval()
    halves = Transformer(replace(config, positional_layout="halves")).eval()
    perm = halves_permutation(config.d_model)
    state = {name: to_halves(name, t, perm) for name, t in model_state(interleaved).items()}
    halves.load_state_dict(state, strict=False)
    src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 30, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(halves(src, tgt), interleaved(src, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize(("change", "needle"), [
    (dict(norm_first=True), "ModelConfig.norm_first = True"),
    (dict(positional="learned"), "ModelConfig.positional = 'learned'"),
    (dict(layer_norm_eps=1e-6), "ModelConfig.layer_norm_eps = 1e-06"),
])  # fmt: skip
def test_what_marian_cannot_express_is_refused(change, needle, tmp_path, capsys):
    model_dir = random_model_dir(tmp_path / "ours", **change)
    before = snapshot(tmp_path)
    code, _, err = cli(["export", str(model_dir), "--to", "huggingface", str(tmp_path / "hf")],
                       capsys)  # fmt: skip
    one_line_error(Result(code, "", err.splitlines()), 2, "Hugging Face format", needle)
    assert snapshot(tmp_path) == before and not (tmp_path / "hf").exists()


def test_out_is_never_lost(numbers_model, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = snapshot(tmp_path)
    args = ["export", str(numbers_model), "--to", "huggingface", str(out)]
    code, _, err = cli(args, capsys)
    one_line_error(Result(code, "", err.splitlines()), 2, "holds no earlier export")
    code, _, err = cli([*args[:-1], "--quantization", "int8", str(tmp_path / "x")], capsys)
    one_line_error(Result(code, "", err.splitlines()), 2, "--quantization int8")
    assert snapshot(tmp_path) == before
    (out / "notes.txt").unlink()
    export(numbers_model, out, capsys)
    export(numbers_model, out, capsys)  # an earlier export is replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == DecodeConfig().beam_size  # the model's own default


def test_an_export_given_as_a_model_directory_says_what_it_is(numbers_model, tmp_path, capsys):
    """A Hugging Face export given to translate was "a CTranslate2 export; use it with --engine
    ctranslate2", which then refused its format; to train --init_from, an unknown config
    section 'model_type'."""
    out = export(numbers_model, tmp_path / "hf", capsys)
    said = ["format 'transformer/huggingface'", "exported from", f"transformer import {out} OUT"]
    for args in (["translate", str(out)], ["translate", str(out), "--engine", "ctranslate2"],
                 ["train", "--init_from", str(out), "--corpus", "numbers", "--out",
                  str(tmp_path / "run")]):  # fmt: skip
        code, stdout, err = cli(args, capsys)
        one_line_error(Result(code, stdout, err.splitlines()), 2, *said)
    assert not (tmp_path / "run").exists()
