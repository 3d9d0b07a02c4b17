"""The typed config: YAML + --key value overrides fill frozen dataclasses; bad keys are errors."""

import dataclasses

import pytest

from transformer.cli import config_from_args
from transformer.cli.reference import attribute_docs
from transformer.config import RuntimeConfig, TrainConfig, build_config, load_config
from transformer.config.checks import range_of
from transformer.errors import UserError


def test_yaml_and_overrides_fill_the_dataclasses(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        "model: {preset: tiny, dropout: 0.2}\n"
        "data: {corpus: multi30k, src_lang: de, tgt_lang: en}\n"
        "train: {max_steps: 10}\nruntime: {precision: fp32}\n"
    )
    cfg = config_from_args(
        ["--config", str(path), "--train.max_steps", "20", "--beam-size=2", "--precision", "bf16"]
    )
    assert cfg.model.d_model == 32 and cfg.model.dropout == 0.2  # tiny preset + override
    assert (cfg.data.corpus, cfg.data.src_lang, cfg.data.tgt_lang) == ("multi30k", "de", "en")
    assert cfg.train.max_steps == 20 and cfg.runtime.precision == "bf16"
    assert cfg.decode.beam_size == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.max_steps = 5  # type: ignore[misc]


def test_config_round_trips_through_a_dict():
    cfg = config_from_args(["--preset", "tiny", "--corpus", "null", "--lr_factor", "2"])
    assert cfg.data.corpus is None and cfg.train.lr_factor == 2.0
    assert build_config(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--no_such_key", "1"], "unknown option --no_such_key"),
        (["--train.nope", "1"], r"unknown option --train.nope"),
        (
            ["--train.max_stepz", "1"],
            r"unknown option --train.max_stepz; did you mean --train.max_steps",
        ),
        (["--max_steps", "many"], "--train.max_steps must be int, got 'many'"),
        (["--bf16", "true"], "unknown option --bf16"),
        (["--runtime.compile", "maybe"], "--runtime.compile must be bool, got 'maybe'"),
        (["--d_model", "30"], "d_model"),
        (["--label_smoothing", "1.5"], "label_smoothing"),
        (["--nbest", "9"], "nbest"),
        (["--max_steps", ""], "--train.max_steps must be int, got ''"),
        (["--layer_norm_eps", "1e30"], r"layer_norm_eps must be > 0 and < 1, got 1e\+30"),
    ],
)
def test_bad_overrides_are_clear_errors(args, message):
    with pytest.raises(UserError, match=message):
        config_from_args(args)


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {max_stepz: 3}\n")
    with pytest.raises(UserError, match=r"bad.yaml: unknown config key train.max_stepz; did you"):
        load_config(str(bad))
    bad.write_text("trian: {}\n")
    with pytest.raises(UserError, match="unknown config section 'trian'"):
        load_config(str(bad))


def test_a_bad_value_is_named_by_where_it_came_from(tmp_path):
    # An option's bad value was blamed on the config file, which did not hold it.
    config = tmp_path / "c.yaml"
    config.write_text("train: {max_steps: 0}\n")
    with pytest.raises(UserError, match=r"c.yaml: TrainConfig.max_steps must be"):
        load_config(str(config))
    with pytest.raises(UserError, match=r"^--model.dropout 2.0: ModelConfig.dropout must be"):
        load_config(str(config), {"train": {"max_steps": 5}, "model": {"dropout": 2.0}})
    with pytest.raises(UserError, match=r"^--model.n_heads 3: ModelConfig.d_model \(512\) must"):
        load_config(str(config), {"train": {"max_steps": 5}, "model": {"n_heads": 3}})
    with pytest.raises(UserError, match=r"^numbers: ModelConfig.dropout must be"):
        build_config({"model": {"dropout": 2.0}}, "numbers", {"train": {"max_steps": 5}})


def test_every_key_belongs_to_one_section():
    # So that a bare --key always names one field.
    from collections import Counter

    from transformer.config import SECTIONS

    counts = Counter(f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls))
    assert [key for key, n in counts.items() if n > 1] == []


EXTREMES = [  # a value that hung or crashed training, and the typed option that takes it
    ("--train.accumulate", "9223372036854775807"),  # the first step never ended
    ("--runtime.timeout_minutes", "1e308"),  # OverflowError from timedelta under torchrun
    ("--runtime.timeout_minutes", "1e-320"),  # c10d waited 0 ms and failed with a traceback
]


@pytest.mark.parametrize(("option", "value"), EXTREMES)
def test_extreme_step_sizes_and_timeouts_are_refused_naming_the_range(option, value):
    section, name = option[2:].split(".")
    cls = {"train": TrainConfig, "runtime": RuntimeConfig}[section]
    allowed = range_of(cls, name)
    assert str(allowed) in attribute_docs(cls)[name]  # --help and the reference say it
    for bound in (allowed.low, allowed.high):
        cls(**{name: bound})
    with pytest.raises(UserError) as raised:
        config_from_args([option, value])
    assert f"{cls.__name__}.{name} must be in {allowed}, got" in str(raised.value)
    assert "\n" not in str(raised.value)
