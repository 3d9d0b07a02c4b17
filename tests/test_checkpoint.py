"""Checkpoints: exact round trip, index pointers, pruning, and atomic writes."""

import json

import pytest
import torch

from transformer import files
from transformer.config import ModelConfig, RunConfig
from transformer.errors import UserError
from transformer.model import Transformer
from transformer.model_dir import checkpoints as ckpt
from transformer.training.state import TrainerState
from transformer.training.stream import Position


def run_config(**model):
    return RunConfig(
        model=ModelConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=20, **model)
    )


def trainer_state(model):
    """What training saves as trainer.pt (training/state.py), after one optimizer step."""
    opt = torch.optim.Adam(model.parameters())
    model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])).sum().backward()
    opt.step()
    return TrainerState(step=7, position=Position(epoch=1, batch=3)).to_dict(opt)


@pytest.mark.parametrize("share", [False, True])
def test_round_trip_is_exact_with_tied_weights(tmp_path, share):
    cfg = run_config(share_embeddings=share, tie_output=True)
    torch.manual_seed(0)
    model = Transformer(cfg.model)
    saved_state = trainer_state(model)
    folder = ckpt.save_checkpoint(tmp_path, "step_00000007", model, cfg, saved_state)
    ckpt.update_index(tmp_path, last="step_00000007")
    loaded = ckpt.load_checkpoint(folder)
    assert loaded.config == cfg
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    assert loaded.model.output.weight is loaded.model.tgt_embed.tokens.weight
    state = ckpt.load_trainer_state(folder)
    assert state["step"] == 7 and state["position"] == {"epoch": 1, "batch": 3}
    assert torch.equal(state["rng"]["torch"], saved_state["rng"]["torch"])
    assert state["rng"]["python"] == saved_state["rng"]["python"]
    exp_avg = state["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(exp_avg, saved_state["optimizer"]["state"][0]["exp_avg"])


def _with(key, value):
    return lambda saved: {**saved, key: value}


def _rng(key, value):
    return lambda saved: {**saved, "rng": {**saved["rng"], key: value}}


DAMAGE = {  # what a trainer.pt that still unpickles may hold instead, and what the error says
    "not a dict": (lambda saved: [1, 2, 3], "a list, not a dict"),
    "no step": (lambda saved: {k: v for k, v in saved.items() if k != "step"}, "no step"),
    "step a string": (_with("step", "abc"), "its step is 'abc'"),
    "step negative": (_with("step", -5), "its step is -5"),
    "step a bool": (_with("step", True), "its step is True"),
    "position short": (_with("position", {"epoch": 1}), "its position is {'epoch': 1}"),
    "elapsed a string": (_with("elapsed", "x"), "its elapsed is 'x'"),
    "elapsed infinite": (_with("elapsed", float("inf")), "its elapsed is inf"),
    "optimizer empty": (_with("optimizer", {}), "its optimizer is {}"),
    "scaler a list": (_with("scaler", [1]), "its scaler is [1]"),
    "world_size 0": (_with("world_size", 0), "its world_size is 0"),
    "rng empty": (_with("rng", {}), "its rng: not a dict with a 'python' and a 'torch' state"),
    "python rng short": (_rng("python", (3, (1, 2), None)), "its rng: state vector is the wrong"),
    "torch rng short": (_rng("torch", torch.zeros(3, dtype=torch.uint8)), "its rng: Expected a"),
    "rank rng empty": (_with("rng_ranks", [{}]), "its rng_ranks[0]: not a dict"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_trainer_state_of_the_wrong_structure_is_damaged(tmp_path, damage):
    """A trainer.pt that unpickles but is not a trainer state is refused when it is loaded,
    like one that does not unpickle (resume_point then tries an older checkpoint)."""
    change, said = DAMAGE[damage]
    cfg = run_config()
    model = Transformer(cfg.model)
    folder = ckpt.save_checkpoint(tmp_path, "step_00000007", model, cfg, trainer_state(model))
    assert ckpt.load_trainer_state(folder)["step"] == 7
    saved = torch.load(folder / "trainer.pt", weights_only=True)
    torch.save(change(saved), folder / "trainer.pt")
    with pytest.raises(UserError) as error:
        ckpt.load_trainer_state(folder)
    assert str(error.value).startswith(f"{folder / 'trainer.pt'} is damaged ({said}")
    assert "\n" not in str(error.value)


def test_model_directory_resolves_best_then_last(tmp_path):
    cfg = run_config()
    model = Transformer(cfg.model)
    checkpoints = tmp_path / "checkpoints"
    for step in (1, 2):
        ckpt.save_checkpoint(checkpoints, f"step_{step:08d}", model, cfg, None)
    ckpt.update_index(checkpoints, last="step_00000002")
    assert ckpt.resolve_checkpoint(tmp_path).name == "step_00000002"
    ckpt.update_index(checkpoints, best="step_00000001")
    assert ckpt.resolve_checkpoint(tmp_path).name == "step_00000001"
    assert ckpt.resolve_checkpoint(tmp_path, "last").name == "step_00000002"
    one = checkpoints / "step_00000001"  # a checkpoint folder is itself; a choice is refused
    assert ckpt.resolve_checkpoint(one) == one
    for which in ("best", "last"):
        with pytest.raises(
            ValueError,
            match=f"checkpoint '{which}' picks a checkpoint of a "
            "model directory, and .*step_00000001 is one checkpoint already",
        ):
            ckpt.load_checkpoint(one, which)


def test_prune_keeps_the_newest_and_the_indexed(tmp_path):
    cfg = run_config()
    model = Transformer(cfg.model)
    for step in range(1, 7):
        ckpt.save_checkpoint(tmp_path, f"step_{step:08d}", model, cfg, None)
    ckpt.update_index(tmp_path, last="step_00000006", best="step_00000001")
    ckpt.prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == [
        "step_00000001",
        "step_00000005",
        "step_00000006",
    ]


def test_a_crash_while_saving_leaves_the_last_good_checkpoint(tmp_path, monkeypatch):
    cfg = run_config()
    model = Transformer(cfg.model)
    ckpt.save_checkpoint(tmp_path, "step_00000001", model, cfg, None)
    ckpt.update_index(tmp_path, last="step_00000001")

    def crash(path, mode="r", *args, **kwargs):
        if "x" in mode and ".config.json." in str(path):  # after the weights were written
            raise KeyboardInterrupt("killed mid-save")
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(files, "open", crash, raising=False)  # the write gate's
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, "step_00000002", model, cfg, None)
    assert not (tmp_path / "step_00000002").exists()
    assert json.loads((tmp_path / "index.json").read_text())["last"] == "step_00000001"
    assert ckpt.load_checkpoint(tmp_path / "step_00000001").config == cfg
    monkeypatch.undo()
    ckpt.prune_checkpoints(tmp_path, keep=5)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_missing_or_empty_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="model directory not found"):
        ckpt.load_checkpoint(tmp_path / "nope")
    with pytest.raises(UserError, match="holds no checkpoint"):
        ckpt.load_checkpoint(tmp_path)


def test_weights_of_another_shape_or_name_are_refused_before_any_is_copied(tmp_path):
    """load_weights reads names and shapes from the file's header first: a mismatch is one
    UserError naming the file and the tensor, and the model keeps every weight it had."""
    from safetensors.torch import save_file

    from transformer.model_dir.weights import load_weights, model_state

    torch.manual_seed(0)
    model = Transformer(run_config().model)
    before = {name: t.clone() for name, t in model_state(model).items()}
    wider = model_state(Transformer(run_config(d_ff=24).model))
    save_file(wider, tmp_path / "wider.safetensors")
    with pytest.raises(UserError, match=r"wider\.safetensors: .*linear1\.weight has shape"):
        load_weights(model, tmp_path / "wider.safetensors")
    extra = {**before, "stray": torch.zeros(2)}
    save_file(extra, tmp_path / "extra.safetensors")
    with pytest.raises(UserError, match=r"extra\.safetensors: weights do not match.*'stray'"):
        load_weights(model, tmp_path / "extra.safetensors")
    assert all(torch.equal(t, before[n]) for n, t in model_state(model).items())
    torch.manual_seed(1)
    other = {n: torch.randn_like(t) for n, t in before.items()}
    save_file(other, tmp_path / "other.safetensors")
    load_weights(model, tmp_path / "other.safetensors")
    assert all(torch.equal(t, other[n]) for n, t in model_state(model).items())


def _peak_rss_reset() -> bool:
    """Resets the process's peak resident memory (VmHWM); False where Linux does not let it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def test_loading_weights_holds_no_second_copy_of_them(tmp_path):
    """load_weights reads each float32 tensor into its parameter: while it runs, the process
    holds not much more than the model, where reading the tensors through the file's mapping
    held the file's pages and a new tensor of each besides (the peak at twice the weights)."""
    from safetensors.torch import save_file

    from transformer.model_dir.weights import load_weights, model_state

    cfg = ModelConfig.preset("tiny", src_vocab_size=40_000, tgt_vocab_size=40_000, d_model=128)
    torch.manual_seed(0)
    saved = model_state(Transformer(cfg))
    size_mb = sum(t.numel() * 4 for t in saved.values()) / 2**20  # 20 MB: the embedding
    save_file(saved, tmp_path / "model.safetensors")
    model = Transformer(cfg)
    before = _status_mb("VmRSS")
    if not _peak_rss_reset():
        pytest.skip("this system does not let a process reset its peak memory")
    load_weights(model, tmp_path / "model.safetensors")
    assert _status_mb("VmHWM") - before < 0.25 * size_mb
    assert all(torch.equal(t, saved[n]) for n, t in model_state(model).items())


def test_weights_whose_sum_overflows_are_finite_and_load(tmp_path):
    """The finiteness check sums a tensor first; a sum that overflows on finite values is looked
    at value by value, not refused."""
    from safetensors.torch import save_file

    from transformer.model_dir.weights import load_weights, model_state

    torch.manual_seed(0)
    model = Transformer(run_config().model)
    state = model_state(model)
    state["encoder.layers.0.feed_forward.linear1.weight"].fill_(3e38)
    save_file(state, tmp_path / "large.safetensors")
    assert model_state(model)["encoder.layers.0.feed_forward.linear1.weight"].sum().isinf()
    load_weights(Transformer(run_config().model), tmp_path / "large.safetensors")


@pytest.mark.parametrize(
    "model",
    [
        dict(share_embeddings=True, tie_output=True),
        dict(share_embeddings=False, tie_output=True, positional="learned"),
        dict(share_embeddings=False, tie_output=False, norm_first=True, output_bias=True),
        dict(architecture="rnn", share_embeddings=True, tie_output=True),
    ],
)
def test_a_checkpoint_loads_into_a_model_whose_weights_were_not_drawn(tmp_path, model):
    """load_checkpoint builds the model without drawing its weights at random (build.py,
    ``initialise=False``): the same weights, ties, fixed tables and outputs as a model built
    and initialised first, and no random number drawn (an initialisation draws them)."""
    from transformer.model.build import build_model

    cfg = run_config(**model)
    torch.manual_seed(0)
    trained = build_model(cfg.model).eval()
    folder = ckpt.save_checkpoint(tmp_path, "step_00000001", trained, cfg, trainer_state(trained))
    rng = torch.get_rng_state()
    loaded = ckpt.load_checkpoint(folder).model
    assert torch.equal(torch.get_rng_state(), rng)
    expected = trained.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    assert all(torch.equal(t, expected[n]) for n, t in loaded.state_dict().items())
    assert all(torch.equal(a, b) for a, b in zip(loaded.buffers(), trained.buffers(), strict=True))
    # the same ties: ``parameters`` lists a shared weight once
    assert len(list(loaded.parameters())) == len(list(trained.parameters()))
    src, tgt = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]]), torch.tensor([[2, 9, 4], [2, 5, 0]])
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt), trained(src, tgt))
    if model.get("architecture") == "rnn":
        return
    # a model built to train still draws them: its embedding first, as torch.randn did
    torch.manual_seed(5)
    fresh = build_model(cfg.model)
    torch.manual_seed(5)
    table = torch.randn(cfg.model.src_vocab_size, cfg.model.d_model) * cfg.model.d_model**-0.5
    table[0] = 0.0  # the padding row
    assert torch.equal(fresh.src_embed.tokens.weight, table)
