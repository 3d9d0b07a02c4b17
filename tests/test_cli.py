"""The command line is derived from the typed config: every key in --help, one naming scheme,
old spellings still understood, and only UserError turned into a one-line message."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from transformer.cli import commands, config_from_args, main
from transformer.cli.entry import COMMANDS, build_parser
from transformer.cli.options import parse
from transformer.config import SECTIONS, ModelConfig, load_config
from transformer.errors import BadValue
from transformer.model import products
from transformer.model.products import chosen_library
from transformer.model_dir.checkpoints import resolve_checkpoint

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


# What each command has no use for (the spec, written out here by hand): an option it took and
# then ignored would answer as if it had been honoured. Training only: timeout_minutes (the
# distributed group's) and loss_chunk (the training loss's). compile: training and the commands
# decoding many batches. inter_threads: batches decoded at once. A score is teacher-forced: it
# searches for nothing. One translation's text (BLEU, a figure): no n-best, no alignments. One
# sentence: no batches. The step-through view shows a beam search (its sampling is refused in
# a line of its own, so it stays an option).
TRAINING = {"runtime.timeout_minutes", "runtime.loss_chunk"}
ALIGNMENTS = {"decode.alignment", "decode.alignment_method"}
TEXT_ONLY = {"decode.nbest"} | ALIGNMENTS
ONE_SENTENCE = {"runtime.inter_threads", "decode.batch_size", "decode.max_source_tokens"}
SAMPLES = {"decode.temperature", "decode.top_k", "decode.top_p", "decode.sampling_seed"}
SEARCH = TEXT_ONLY | SAMPLES | {f"decode.{key}" for key in (
    "beam_size", "sampling", "max_len_a", "max_len_b", "min_len", "no_repeat_ngram",
    "repetition_penalty")}  # fmt: skip
NO_USE = {
    "translate": TRAINING,
    "serve": TRAINING,
    "evaluate": TRAINING | TEXT_ONLY,
    "compare": TRAINING | {"runtime.compile"} | TEXT_ONLY,
    "score": TRAINING | {"runtime.compile", "runtime.inter_threads"} | SEARCH,
    "attention": TRAINING | {"runtime.compile"} | ONE_SENTENCE | TEXT_ONLY,
    "explain": TRAINING | {"runtime.compile"} | ONE_SENTENCE | SAMPLES | ALIGNMENTS,
    "demo": {"runtime.timeout_minutes", "runtime.inter_threads"},
    "train": set(),
    "import": set(),
}


def _config_keys(sections) -> set[str]:
    return {f"{section}.{field.name}" for section in sections
            for field in dataclasses.fields(SECTIONS[section])}  # fmt: skip


@pytest.mark.parametrize("command", sorted(NO_USE))
def test_a_command_offers_every_config_key_it_uses_and_refuses_the_others(command, capsys):
    sections = [s for s in COMMANDS[command].sections if s in SECTIONS]
    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0
    offered = {key for key in _config_keys(sections) if re.search(rf"--{key}\b", out)}
    assert _config_keys(sections) - offered == NO_USE[command]
    for key in sorted(NO_USE[command]):
        code, _, err = cli([command, "somewhere", f"--{key}", "1"], capsys)
        assert code == 2 and f"this command has no use for --{key}: leave it out" in err, err


def test_a_section_file_may_not_bring_a_key_the_command_has_no_use_for(numbers_model, tmp_path,
                                                                      capsys):  # fmt: skip
    (tmp_path / "decode.yaml").write_text("beam_size: 2\nnbest: 2\n")
    (tmp_path / "in.txt").write_text("twelve\n")
    (tmp_path / "ref.txt").write_text("douze\n")
    files = ["--src", str(tmp_path / "in.txt"), "--ref", str(tmp_path / "ref.txt")]
    code, _, err = cli(["evaluate", str(numbers_model), *files, "--decode",
                        str(tmp_path / "decode.yaml")], capsys)  # fmt: skip
    assert code == 2 and "decode.yaml: this command has no use for decode.nbest" in err, err
    assert not (tmp_path / "in.txt.hyp").exists()
    code, out, _ = cli(["translate", str(numbers_model), "-i", str(tmp_path / "in.txt"),
                        "--decode", str(tmp_path / "decode.yaml")], capsys)  # fmt: skip
    assert code == 0 and len(out.splitlines()) == 2  # translate writes the 2 best


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


def test_checkpoint_is_refused_where_it_would_be_ignored(numbers_model, tmp_path, capsys):
    one = resolve_checkpoint(numbers_model, "last")  # a checkpoint folder: its weights, no choice
    source = str(tmp_path / "in.txt")
    (tmp_path / "in.txt").write_text("twelve\n")
    for args in (["translate", str(one), "-i", source], ["info", str(one)],
                 ["compare", str(numbers_model), str(one), "--out", str(tmp_path / "R")],
                 ["explain"], ["info"]):  # fmt: skip
        code, _, err = cli([*args, "--checkpoint", "best"], capsys)
        assert code == 2 and "--checkpoint best picks a checkpoint of a model directory" in err
        assert "leave --checkpoint out" in err
    assert not (tmp_path / "R").exists()
    code, out, _ = cli(["translate", str(one), "-i", source], capsys)  # without it: that one
    assert code == 0 and out.strip()
    code, out_last, _ = cli(["translate", str(numbers_model), "-i", source, "--checkpoint",
                             "last"], capsys)  # fmt: skip
    assert code == 0 and out_last == out


@pytest.mark.parametrize(
    ("name", "value"),
    [("LRU_CACHE_CAPACITY", v) for v in ("0", "", "abc", "-1", "\u00b2", "12abc")]
    + [("ONEDNN_PRIMITIVE_CACHE_CAPACITY", v) for v in ("-1", "abc", "1.5")],
)
def test_a_cache_size_in_the_environment_that_is_no_count_is_refused_before_anything_runs(
    name, value, numbers_model, monkeypatch, tmp_path, capsys
):
    """PyTorch's oneDNN reads these at its first product; an LRU_CACHE_CAPACITY that it reads
    as 0 ended the process with a segmentation fault there (exit 139, no message)."""
    monkeypatch.setenv(name, value)
    for command in (["train", str(tmp_path / "model")], ["translate", str(numbers_model)]):
        code, out, err = cli(command, capsys)
        assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
        assert f"{name}={value!r}" in err and "whole number" in err, err
    assert not list(tmp_path.iterdir())
    with pytest.raises(BadValue, match=name):  # from Python, before the first product
        products.limit_onednn_caches()


def test_a_cache_size_of_zero_no_longer_crashes_a_command(numbers_model, monkeypatch):
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "0")
    result = cli_process("translate", str(numbers_model), stdin="twelve\n")
    assert result.code == 2 and len(result.stderr) == 1, result  # was -11 (SIGSEGV)
    assert "LRU_CACHE_CAPACITY='0'" in result.stderr[0], result
    monkeypatch.setenv("LRU_CACHE_CAPACITY", " 3 ")  # a count, spaces around it: used
    assert cli_process("translate", str(numbers_model), stdin="twelve\n").code == 0


@pytest.mark.parametrize("command", ["train", "translate", "serve"])
def test_a_bad_product_library_in_the_environment_is_refused_before_anything_runs(
    command, monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("TRANSFORMER_CPU_PRODUCTS", "onednnn")
    out_dir = tmp_path / "model"
    code, out, err = cli([command, str(out_dir)], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "TRANSFORMER_CPU_PRODUCTS='onednnn'" in err and "mkl, onednn" in err
    assert not out_dir.exists() and not list(tmp_path.iterdir())
    monkeypatch.setenv("TRANSFORMER_CPU_PRODUCTS", " ONEDNN ")  # spelt loosely, still known
    assert chosen_library() == "onednn"
    monkeypatch.setenv("TRANSFORMER_CPU_PRODUCTS", "")
    assert chosen_library() is None
