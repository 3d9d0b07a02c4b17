"""The linear layer's packed product (model/linear.py) against ``F.linear``, where it is used and
where not, and the searches and the engine the same with it and without."""

import copy

import pytest
import torch
import torch.nn.functional as F

import transformer.model.linear as linear_module
from transformer import device as device_module
from transformer.cli import main
from transformer.config import ModelConfig, RuntimeConfig
from transformer.inference.engine import load_torch_engine
from transformer.inference.next_tokens import BLOCK, best_next_tokens
from transformer.model import Transformer, products
from transformer.model.linear import (
    Linear,
    PlainWeightReleased,
    largest_weight,
    linear,
    pack_linear_layers,
    packed_product,
)
from transformer.vocab import EOS_ID

from helpers import four_searches

pytestmark = pytest.mark.skipif(
    not linear_module.can_pack(), reason="this PyTorch has no oneDNN packed product here"
)


def packed_layer(inputs: int, outputs: int, bias: bool = True, multiple: int = 1) -> Linear:
    torch.manual_seed(0)
    layer = Linear(inputs, outputs, bias=bias)
    layer.pack(multiple)
    return layer


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(7,), (3, 5)])  # rows; batch and positions
@pytest.mark.parametrize("outputs,multiple", [(256, 1), (300, 1), (300, BLOCK)])
def test_the_packed_product_equals_f_linear(bias, shape, outputs, multiple):
    layer = packed_layer(256, outputs, bias, multiple)
    x = torch.randn(*shape, 256)
    with torch.inference_mode():
        found = linear(x, layer)
        whole = packed_product(x, layer)
    expected = F.linear(x, layer.weight, layer.bias)
    assert found.shape == expected.shape and found.is_contiguous()
    assert (found - expected).abs().max() <= 1e-4 * expected.abs().max()
    assert whole is not None and whole.size(-1) == -(-outputs // multiple) * multiple
    assert torch.equal(whole[..., :outputs], found)
    assert (whole[..., outputs:] == 0).all()  # the padding: zero weights, zero bias


def test_a_product_packed_in_bf16_is_float32_rounded_through_bf16():
    layer = Linear(256, 300)
    with torch.no_grad():
        layer.weight.normal_(0.0, 256**-0.5)
    layer.pack(BLOCK, torch.bfloat16)
    x = torch.randn(5, 256)
    with torch.inference_mode():
        found = linear(x, layer)
        whole = packed_product(x, layer)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = F.linear(x, layer.weight, layer.bias)  # what bf16 translation did
    expected = F.linear(x, layer.weight, layer.bias)
    assert found.dtype == torch.float and found.shape == expected.shape
    assert (found - expected).abs().max() <= 2e-2 * expected.abs().max()
    assert (found - autocast.float()).abs().max() <= 1e-2 * expected.abs().max()
    assert torch.equal(found, found.bfloat16().float())  # rounded to bf16
    assert whole.size(-1) == 320 and (whole[:, 300:] == 0).all()


def test_a_row_has_the_same_numbers_however_many_rows_share_its_product():
    """The packed product of a row does not depend on the rows multiplied with it, so that a
    sentence's numbers do not depend on its batch; MKL's do (one row against several)."""
    layer = packed_layer(256, 1024)
    x = torch.randn(200, 256)
    with torch.inference_mode():
        alone = linear(x[:1], layer)
        for rows in (2, 3, 7, 16, 17, 64, 65, 200):
            assert torch.equal(linear(x[:rows], layer)[:1], alone), rows


def test_the_packed_weight_is_used_only_in_inference_in_float32():
    layer = packed_layer(256, 256)
    x = torch.randn(4, 256)
    assert packed_product(x, layer) is None  # a gradient may be wanted
    with torch.inference_mode():
        assert packed_product(x, layer) is not None
        assert packed_product(x.double(), layer) is None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert packed_product(x, layer) is None
            assert layer(x).dtype == torch.bfloat16  # autocast's product, as before


@pytest.mark.parametrize("change", ["in place", "new parameter", "bias", "new bias"])
def test_a_changed_weight_drops_the_packed_copy(change):
    layer = packed_layer(256, 256)
    x = torch.randn(4, 256)
    with torch.no_grad():
        if change == "in place":
            layer.weight.mul_(2.0)  # as an optimizer step or load_state_dict writes it
        elif change == "new parameter":
            layer.weight = torch.nn.Parameter(layer.weight * 2.0)
        elif change == "bias":
            layer.bias.add_(1.0)
        else:  # a new tensor, its version counter brought to the old one's
            old = layer.bias
            layer.bias = torch.nn.Parameter(old + 1.0)
            while layer.bias._version < old._version:
                layer.bias.mul_(1.0)
    with torch.inference_mode():
        assert packed_product(x, layer) is None
        assert layer.packed is None
        # the plain weight's product: F.linear, or oneDNN's where it is the faster here
        assert torch.equal(layer(x), products.linear(x, layer.weight, layer.bias))


def test_a_copy_of_a_packed_layer_multiplies_without_the_packed_weight():
    layer = packed_layer(256, 256)
    copied = copy.deepcopy(layer)
    assert layer.packed is not None and copied.packed is None
    x = torch.randn(4, 256)
    with torch.inference_mode():
        assert torch.equal(copied(x), products.linear(x, layer.weight, layer.bias))


def wide_model(tgt_vocab: int, d_model: int = 256, tie_output: bool = False) -> Transformer:
    """A random Transformer wide enough to be packed: 1 + 1 layers, weights N(0, 1/√width)
    so that outputs vary and some end early."""
    torch.manual_seed(0)
    config = ModelConfig(
        src_vocab_size=40, tgt_vocab_size=tgt_vocab, d_model=d_model, n_heads=4,
        d_ff=4 * d_model, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0,
        share_embeddings=False, tie_output=tie_output,
    )  # fmt: skip
    model = Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 3.0 / d_model**0.5)
        model.output.weight[EOS_ID] *= 1.5
    return model


def test_only_layers_at_least_256_wide_on_both_sides_are_packed():
    assert pack_linear_layers(wide_model(300, d_model=128)) == 0  # the demo's width
    model = wide_model(300)
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert pack_linear_layers(model, model.output, BLOCK) == len(linears) == 4 + 8 + 4 + 1
    assert all(m.packed is not None for m in linears)
    assert model.output.packed.weight.size(0) == 320  # whole blocks of logits


@pytest.mark.parametrize("d_model,dtype,batch_layers_packed", [
    (256, torch.float, False), (512, torch.float, True), (256, torch.bfloat16, True),
])  # fmt: skip
def test_layers_run_once_per_batch_are_packed_in_float32_only_from_512_wide(
    d_model, dtype, batch_layers_packed
):
    model = wide_model(300, d_model)
    once = {id(m) for part in model.once_per_batch() for m in part.modules()}
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    batch = [m for m in linears if id(m) in once]
    step = [m for m in linears if id(m) not in once]
    assert len(batch) == 6 + 2 and len(step) == 4 + 2 + 2 + 1  # encoder, cross keys and values
    count = pack_linear_layers(model, model.output, BLOCK, dtype, model.once_per_batch())
    assert all(m.packed is not None for m in step)
    assert all((m.packed is not None) == batch_layers_packed for m in batch)
    assert count == len(step) + batch_layers_packed * len(batch)


@pytest.mark.parametrize("vocab", [300, 1100, 2560])  # one product; slices, padded; whole blocks
@pytest.mark.parametrize("k", [1, 8])
def test_the_vocabulary_step_is_the_same_with_the_output_layer_packed(vocab, k):
    model = wide_model(vocab)
    hidden = torch.randn(12, 256)
    at_limit = torch.tensor([False, True] * 6)
    with torch.inference_mode():
        plain = best_next_tokens(hidden, model.output, k, at_limit)
        pack_linear_layers(model, model.output, BLOCK)
        found = best_next_tokens(hidden, model.output, k, at_limit)
    assert torch.equal(found.tokens, plain.tokens)
    finite = plain.log_probs.isfinite()
    assert torch.equal(found.log_probs.isfinite(), finite)
    assert (found.log_probs[finite] - plain.log_probs[finite]).abs().max() <= 1e-4
    assert (found.log_normaliser - plain.log_normaliser).abs().max() <= 1e-4


@pytest.mark.parametrize("search", ["greedy", "beam"])
@pytest.mark.parametrize("tie_output", [False, True])
def test_searches_are_the_same_with_the_layers_packed(search, tie_output):
    model = wide_model(1100, tie_output=tie_output)
    plain = four_searches(model, search)
    assert pack_linear_layers(model, model.output, BLOCK) > 0
    packed = four_searches(model, search)
    assert [[h.tokens for h in hs] for hs in packed] == [[h.tokens for h in hs] for hs in plain]
    assert len({len(hs[0].tokens) for hs in plain}) > 1  # outputs of different lengths
    for a, b in zip(sum(packed, []), sum(plain, []), strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-3)


@pytest.mark.parametrize("tie_output", [False, True])
def test_plain_weights_released_once_packed_hold_no_memory_and_searches_stay_the_same(tie_output):
    model = wide_model(1100, tie_output=tie_output)
    plain = four_searches(model, "beam")
    largest = max(float(p.detach().abs().max()) for p in model.parameters())
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert pack_linear_layers(model, model.output, BLOCK, release=True) == len(linears)
    released = [m for m in linears if m.weight.is_meta]
    assert all(m.weight.shape == (m.out_features, m.in_features) for m in released)
    # a weight another module reads stays: the output layer's, tied to the embedding
    assert model.output.weight.is_meta != tie_output
    assert len(released) == len(linears) - tie_output
    assert tie_output == (model.output.weight is model.tgt_embed.tokens.weight)
    found = four_searches(model, "beam")
    assert [[h.tokens for h in hs] for hs in found] == [[h.tokens for h in hs] for hs in plain]
    assert largest_weight(model) == pytest.approx(largest)  # search.py's message names it


def test_a_layer_whose_plain_weight_was_released_refuses_what_only_it_could_do():
    """With a gradient or under autocast the packed weight is not used: such a layer raises,
    where multiplying by its stand-in would give no numbers, or wrong ones."""
    model = wide_model(300)
    pack_linear_layers(model, model.output, BLOCK, release=True)
    layer = model.decoder.layers[0].feed_forward.linear1
    x = torch.randn(3, 256)
    with pytest.raises(PlainWeightReleased, match="released once packed"):
        layer(x)  # gradients on
    with (
        torch.inference_mode(),
        torch.autocast("cpu", dtype=torch.bfloat16),
        pytest.raises(PlainWeightReleased),
    ):
        layer(x)
    with torch.inference_mode():
        assert layer(x).shape == (3, 1024)


@pytest.mark.parametrize("pack", [True, False])
def test_the_engine_packs_on_a_cpu_unless_told_not_to(numbers_model, pack, monkeypatch):
    """Through ``transformer translate``'s engine, two batches at once on two threads."""
    monkeypatch.setattr(linear_module, "MIN_FEATURES", 1)  # the test model is narrow
    runtime = RuntimeConfig(device="cpu", inter_threads=2, pack_weights=pack)  # threads as set
    engine = load_torch_engine(numbers_model, runtime=runtime, batch_size=2)
    once = {id(m) for part in engine.model.once_per_batch() for m in part.modules()}
    layers = [m for m in engine.model.modules() if isinstance(m, Linear)]
    step = [m for m in layers if id(m) not in once]
    assert all((m.packed is not None) == pack for m in step)
    assert all(m.packed is None for m in layers if id(m) in once)  # narrower than 512
    # the engine only translates: the plain weights of the packed layers go (but the tied one)
    tied = engine.model.output.weight is engine.model.tgt_embed.tokens.weight
    assert all(m.weight.is_meta == (pack and not (tied and m is engine.model.output))
               for m in step)  # fmt: skip
    assert engine.device == "cpu"
    unpacked = RuntimeConfig(device="cpu", inter_threads=1, pack_weights=False)
    plain = load_torch_engine(numbers_model, runtime=unpacked)
    sentences = "three hundred and twelve|forty-one|nine thousand and six|seven|eighty-eight|two"
    sentences = sentences.split("|")
    assert engine.translate(sentences).best == plain.translate(sentences).best


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "auto"])
@pytest.mark.parametrize("native_bf16", [True, False])
def test_every_precision_runs_every_command_on_a_packed_model(
    numbers_model, precision, native_bf16, tmp_path, monkeypatch, capsys
):
    # fp16 runs under autocast, whose products need the plain weights: a model packed in
    # float32 and released raised PlainWeightReleased (a traceback) at the first search
    monkeypatch.setattr(linear_module, "MIN_FEATURES", 1)  # the test model is narrow
    monkeypatch.setattr(device_module, "BF16_MIN_D_MODEL_TRANSLATION", 1)
    monkeypatch.setattr(device_module, "native_bf16_cpu",
                        lambda: "avx512_bf16" if native_bf16 else None)  # fmt: skip
    (tmp_path / "src.txt").write_text("forty-one\nseven\n")
    (tmp_path / "ref.txt").write_text("quarante et un\nsept\n")
    runtime = ["--runtime.device", "cpu", "--runtime.precision", precision]
    model = str(numbers_model)
    commands = [
        ["translate", model, "--input", str(tmp_path / "src.txt"), *runtime],
        ["score", model, "--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt"),
         *runtime],
        ["explain", model, "forty-one", "--html", str(tmp_path / "step.html"), *runtime],
        ["attention", model, "forty-one", "--layer", "1", "--head", "1",
         "--out", str(tmp_path / "figures"), *runtime],
    ]  # fmt: skip
    for command in commands:
        assert main(command) == 0, (command, capsys.readouterr().err)
        out = capsys.readouterr().out
        assert command[0] not in ("translate", "score") or len(out.splitlines()) == 2, out


@pytest.mark.parametrize("precision", ["bf16", "auto"])
def test_bf16_translation_packs_the_layers_in_bf16_without_autocast(
    numbers_model, precision, monkeypatch
):
    monkeypatch.setattr(linear_module, "MIN_FEATURES", 1)  # the test model is narrow
    monkeypatch.setattr(device_module, "BF16_MIN_D_MODEL_TRANSLATION", 1)
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: "avx512_bf16")
    runtime = RuntimeConfig(device="cpu", precision=precision)
    engine = load_torch_engine(numbers_model, runtime=runtime)
    assert engine.model.output.packed.weight.dtype == torch.bfloat16
    with engine.precision():
        assert not torch.is_autocast_enabled("cpu")  # the packed layers carry the precision
    plain = load_torch_engine(numbers_model, runtime=RuntimeConfig(device="cpu"))
    sentences = ["three hundred and twelve", "forty-one", "nine thousand and six"]
    assert engine.translate(sentences).best == plain.translate(sentences).best


def test_bf16_without_packing_is_autocast_as_asked_and_auto_stays_fp32(numbers_model, monkeypatch):
    monkeypatch.setattr(device_module, "BF16_MIN_D_MODEL_TRANSLATION", 1)
    monkeypatch.setattr(device_module, "native_bf16_cpu", lambda: "avx512_bf16")
    for precision, autocast in (("bf16", True), ("auto", False)):
        runtime = RuntimeConfig(device="cpu", precision=precision, pack_weights=False)
        engine = load_torch_engine(numbers_model, runtime=runtime)
        with engine.precision():
            assert torch.is_autocast_enabled("cpu") == autocast, precision
