"""The command line is derived from the typed config: every key in --help, one naming scheme,
old spellings still understood, and only UserError turned into a one-line message."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from transformer.cli import commands, config_from_args, main
from transformer.cli.main import COMMANDS, build_parser
from transformer.cli.options import parse
from transformer.config import SECTIONS, ModelConfig, load_config

from helpers import cli, cli_process


def test_train_help_lists_every_config_key_with_type_default_and_help(capsys):
    code, out, _ = cli(["train", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    for section, cls in SECTIONS.items():
        for field in dataclasses.fields(cls):
            option = rf"--{section}\.{field.name} (INT|NUMBER|TEXT|\{{true,false}}) "
            match = re.search(option + r"((?:(?!\(default:| --).)*)(\(default: [^)]*\))?", text)
            assert match, f"--{section}.{field.name}"
            assert match.group(2).strip(), f"--{section}.{field.name} has no help text"
            assert (match.group(3) is not None) == (field.default not in (None, "")), field.name
    assert "(default: null)" not in text


def test_help_puts_the_model_dir_first_and_one_default_per_option(capsys):
    code, out, _ = cli(["translate", "--help"], capsys)
    assert code == 0 and out.startswith("usage: transformer translate MODEL_DIR [options]")
    for line in out.splitlines():
        assert line.count("(default:") <= 1, line
    assert "(default: standard input)" in out and "(default: null)" not in out


@pytest.mark.parametrize("command", ["translate", "evaluate", "attention", "serve", "score"])
def test_only_training_offers_training_only_options(command, capsys):
    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0 and "--runtime.timeout_minutes" not in out
    code, _, err = cli([command, "somewhere", "--runtime.timeout_minutes", "5"], capsys)
    assert code == 2 and "unknown option --runtime.timeout_minutes" in err
    # compile: training, and the commands that decode many sentences (inference/compiled.py)
    decodes = command in ("translate", "evaluate", "serve")
    assert ("--runtime.compile" in out) == decodes
    if not decodes:
        code, _, err = cli([command, "somewhere", "--runtime.compile"], capsys)
        assert code == 2 and "unknown option --runtime.compile" in err
    code, out, _ = cli(["train", "--help"], capsys)
    assert "--runtime.compile" in out and "--runtime.timeout_minutes" in out


@pytest.mark.parametrize("command", ["translate", "evaluate", "attention"])
def test_search_commands_take_the_decode_keys(command, capsys):
    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0
    for field in dataclasses.fields(SECTIONS["decode"]):
        assert f"--decode.{field.name}" in out


def test_one_scheme_with_short_spellings():
    scheme = config_from_args(["--train.max_steps", "7", "--decode.beam_size", "2"])
    assert config_from_args(["--max_steps", "7", "--beam_size", "2"]) == scheme
    assert config_from_args(["--train.max-steps=7", "--decode.beam-size=2"]) == scheme
    # A true/false key alone means true.
    assert config_from_args(["--decode.sampling"]).decode.sampling is True


@pytest.mark.parametrize("after", [["-o", "out.txt"], ["-i", "in.txt"], ["--document"], []])
def test_a_true_false_key_alone_means_true_before_any_other_option(after):
    ns, given = parse(build_parser("translate"), ["M", "--decode.alignment", *after],
                      COMMANDS["translate"].sections)  # fmt: skip
    assert given["decode"]["alignment"] is True and ns.model_dir == "M"
    assert (ns.output, ns.input, ns.document) == (
        "out.txt" if "-o" in after else None,
        "in.txt" if "-i" in after else None,
        "--document" in after,
    )


def test_info_takes_short_spellings(capsys):
    short = cli(["info", "--preset", "tiny", "--src-vocab-size", "90", "--tgt-vocab-size", "90",
                 "--share-embeddings", "--norm-first"], capsys)[1]  # fmt: skip
    full = cli(["info", "--model.preset", "tiny", "--model.src_vocab_size", "90",
                "--model.tgt_vocab_size", "90", "--model.share_embeddings", "true",
                "--model.norm_first", "true"], capsys)[1]  # fmt: skip
    assert short == full and "pre-norm" in short and "vocab=90/90" in short


def test_a_misspelt_option_names_the_one_meant(capsys):
    code, _, err = cli(["translate", "somewhere", "--max-tokens", "100"], capsys)
    assert code == 2 and "did you mean --decode.max_source_tokens?" in err


def test_one_default_preset_everywhere(capsys):
    assert ModelConfig() == ModelConfig.preset("base")
    assert load_config().model == ModelConfig()
    assert config_from_args([]).model == ModelConfig()
    assert "d_model=512 heads=8 d_ff=2048 layers=6+6" in cli(["info"], capsys)[1]


def test_only_user_errors_become_one_line(monkeypatch, capsys):
    def bug(ns, given):
        raise ValueError("a bug, not a user's mistake")

    monkeypatch.setitem(
        commands.COMMANDS, "explain", dataclasses.replace(commands.COMMANDS["explain"], run=bug)
    )
    with pytest.raises(ValueError, match="a bug"):
        main(["explain"])


def test_unknown_commands_and_options_get_suggestions(capsys):
    code, _, err = cli(["trian"], capsys)
    assert code == 2 and "unknown command 'trian'; did you mean train?" in err
    code, _, err = cli(["train", "--lable_smoothing", "0"], capsys)
    assert code == 2 and "did you mean --train.label_smoothing?" in err
    # The options a command takes, not words of its help: info's help mentions --config.
    code, _, err = cli(["info", "--config", "x.yaml"], capsys)
    assert code == 2 and "unknown option --config" in err and "did you mean --config" not in err


def test_resume_takes_the_saved_config_and_the_options_on_top(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(config_from_args(["--preset", "tiny"]).to_dict())
    )
    resumed = config_from_args(["--out", str(tmp_path), "--resume", "--max_steps", "9"])
    assert resumed.model == ModelConfig.preset("tiny") and resumed.train.max_steps == 9


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["train", "--out", ""], "--out"),
        (["translate", "m", "-o", ""], "--output"),
        (["translate", "m", "--input="], "--input"),
        (["import", "", "x"], "SOURCE"),
        (["export", "m", "", "--to", "ctranslate2"], "OUT"),
    ],
)
def test_an_empty_value_is_refused_not_read_as_the_current_folder(
    args, name, tmp_path, monkeypatch, capsys
):
    """``--out ""`` (a shell variable left unset) trained into the current folder, beside the
    user's files."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(args, capsys)
    assert code == 2 and err == f"transformer {args[0]}: error: {name} is empty: give it a value\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["attention", "MODEL", "five \udcff", "--out", "figures"], "SENTENCE"),
        (["explain", "MODEL", "five \udcff", "--html", "page.html"], "SENTENCE"),
        (["translate", "MODEL", "--target_language", "fr\udce9"], "--decode.target_language"),
        (["train", "--data.src_lang", "e\udcff", "--out", "run"], "--data.src_lang"),
        (["serve", "MODEL", "--host", "host\udcff"], "--serve.host"),
    ],
)
def test_text_that_is_not_utf8_is_refused_naming_the_argument(
    args, name, numbers_model, tmp_path, monkeypatch, capsys
):
    """An undecodable byte of argv arrives as a lone surrogate (surrogateescape): in a sentence
    it reached SentencePiece, whose RuntimeError was a traceback."""
    monkeypatch.chdir(tmp_path)
    args = [str(numbers_model) if arg == "MODEL" else arg for arg in args]
    code, _, err = cli(args, capsys)
    assert (code, err) == (2, f"transformer {args[0]}: error: {name} is not valid UTF-8 (byte "
                              f"0x{'e9' if 'e9' in repr(args) else 'ff'})\n")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_a_path_that_is_not_utf8_is_still_a_path(numbers_model, tmp_path):
    """Linux file names may hold any bytes: such a file is read, not refused."""
    text = tmp_path / "in\udcff.txt"  # the file name holds the byte 0xff
    text.write_text("twelve\n")
    result = cli_process("translate", str(numbers_model), "-i", str(text))
    assert result.code == 0 and len(result.stdout.splitlines()) == 1, result.stderr


def test_a_config_key_may_still_be_empty(capsys):
    ns, given = parse(build_parser("translate"), ["m", "--decode.target_language", ""],
                      COMMANDS["translate"].sections)  # fmt: skip
    assert given["decode"]["target_language"] == ""


@pytest.mark.parametrize(("args", "named"), [
    (["score", "MODEL", "--src", "s.txt"], "--ref"),
    (["score"], "MODEL_DIR, --src, --ref"),
    (["compare", "RUN"], "--out"),
    (["export", "MODEL", "OUT"], "--to"),
])  # fmt: skip
def test_missing_arguments_are_named_as_the_help_names_them(args, named, capsys):
    # argparse named the options by their keys: "required: ref", "required: out"
    code, out, err = cli(args, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"the following arguments are required: {named} (see --help)" in err, err
