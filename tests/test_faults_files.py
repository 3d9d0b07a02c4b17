"""Files from outside, damaged, through the real command line (its ``main`` in this process, a
child process for ``serve``): every JSON and YAML file goes through one bounded, typed reader
(``transformer/reading.py``), every model through one memory check (``model/build.py``), every
weights file through one finiteness check (``model_dir.check_weights_finite``).

Each case asserts exit code 2, a single stderr line without a traceback naming the file, the key
and the value, and that every file the user had is byte-identical afterwards (an import's OUT
is never made). The cases: JSON nested 100,000 deep in a model's ``config.json``, a tokenizer
table, an export's marker, a Marian ``config.json`` or ``vocab.json``, and in YAML; sizes out of
their range (``max_positions`` 10^12, ``d_model`` 10^6, ``n_encoder_layers`` 10^7,
``max_position_embeddings`` 10^8 and 10^12); sizes in range whose weights would not fit in memory,
in every command that builds a model; an activation given as a list; ``num_beams`` 10^9; NaN and
+inf weights; an ``index.json`` pointer that leaves ``checkpoints/``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from transformer import reading
from transformer.config.model import SIZE_LIMITS
from transformer.device import available_memory

from helpers import cli_main as cli
from helpers import cli_process, one_line_error, snapshot

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError
TOO_DEEP = "nests more than 32 levels deep"
# In range, but 4 bytes x 17 x 10^12 parameters fit in no machine's memory.
HUGE = {"d_model": 65_536, "n_heads": 8, "n_encoder_layers": 1_000, "n_decoder_layers": 1_000}
NOT_IN_MEMORY = "GB of float32 weights"
# Where free memory is unknown nothing is refused, and building HUGE would take it all.
knows_free_memory = pytest.mark.skipif(available_memory() is None, reason="free memory unknown")


@pytest.fixture
def home(numbers_model, tmp_path) -> Path:
    """A user's folder: a copy of the tiny model (M), another model (OTHER), a text and its
    reference."""
    for name in ("M", "OTHER"):
        shutil.copytree(numbers_model, tmp_path / name, ignore=shutil.ignore_patterns(".lock"))
    (tmp_path / "in.txt").write_text("twelve\nfour\n")
    (tmp_path / "ref.txt").write_text("douze\nquatre\n")
    return tmp_path


def refused(home: Path, args: list[str], *needles: str) -> str:
    """``transformer ARGS``: exit 2, one line holding ``needles``, no file in ``home`` changed
    or added."""
    before = snapshot(home)
    line = one_line_error(cli(*args), 2, *needles)
    assert snapshot(home) == before
    return line


def steps(model: Path) -> list[Path]:
    return sorted((model / "checkpoints").glob("step_*"))


def edit_configs(model: Path, **changes: object) -> None:
    """Sets model keys in the config.json of the model directory and of every checkpoint."""
    for path in [model / "config.json", *(step / "config.json" for step in steps(model))]:
        values = json.loads(path.read_text())
        values["model"].update(changes)
        path.write_text(json.dumps(values))


def translate(home: Path, model: Path | str) -> list[str]:
    return ["translate", str(model), "-i", str(home / "in.txt")]


# ------------------------------------------------------------------- a model directory's files
def test_json_nested_100000_deep_is_one_line(home):
    m = home / "M"
    (steps(m)[-1] / "config.json").write_text(DEEP)
    line = refused(home, translate(home, steps(m)[-1]), "config.json", TOO_DEEP)
    assert str(steps(m)[-1]) in line
    (m / "config.json").write_text(DEEP)  # what --resume reads first
    refused(home, ["train", "--out", str(m), "--resume", "--quiet"], "M/config.json", TOO_DEEP)


def test_an_unreadable_index_falls_back_with_one_warning(home):
    """An index.json nested 100,000 deep is an unreadable index: as with one that is missing or
    not JSON, the newest complete checkpoint is used, and a warning names the file."""
    m = home / "M"
    expected = cli(*translate(home, steps(m)[-1])).stdout
    (m / "checkpoints" / "index.json").write_text(DEEP)
    before = snapshot(home)
    result = cli(*translate(home, m))
    assert result.code == 0 and result.stdout == expected
    assert len(result.stderr) == 1 and "warning" in result.stderr[0], result.stderr
    assert "index.json" in result.stderr[0] and TOO_DEEP in result.stderr[0]
    assert snapshot(home) == before


@pytest.mark.parametrize("pointer", ["absolute", "dots", "link"])
def test_an_index_pointer_that_leaves_checkpoints_is_refused(home, pointer):
    """Followed, ``best`` = another model's checkpoint translated with that model, exit 0."""
    m, other = home / "M", steps(home / "OTHER")[0]
    name = {"absolute": str(other), "dots": f"../../OTHER/checkpoints/{other.name}",
            "link": "step_99999999"}[pointer]  # fmt: skip
    if pointer == "link":
        (m / "checkpoints" / name).symlink_to(other)
    index = m / "checkpoints" / "index.json"
    index.write_text(json.dumps({**json.loads(index.read_text()), "best": name}))
    refused(home, translate(home, m), "index.json", "best", name, f"{m / 'checkpoints'}")


@pytest.mark.parametrize(
    ("key", "value"), [("max_positions", 10**12), ("d_model", 10**6), ("n_encoder_layers", 10**7)]
)
def test_a_size_out_of_range_in_a_models_config_is_one_line(home, key, value):
    edit_configs(home / "M", **{key: value})
    refused(home, translate(home, home / "M"), "config.json", f"ModelConfig.{key}", f"{value}")


def test_an_integer_too_large_for_a_float_is_one_line(home):
    """``dropout`` = 10^400, an integer no float holds: float() raised OverflowError."""
    edit_configs(home / "M", dropout=10**400)
    refused(home, translate(home, home / "M"), "config.json", "ModelConfig.dropout must be float")


@pytest.mark.parametrize("command", ["info", "evaluate", "average", "explain", "export", "train"])
def test_every_command_refuses_a_size_out_of_range(home, command):
    m = home / "M"
    edit_configs(m, max_positions=10**12)
    args = {
        "info": ["info", str(m)],
        "evaluate": ["evaluate", str(m), "--src", str(home / "in.txt"), "--ref",
                     str(home / "ref.txt"), "-o", str(home / "hyp.txt")],
        "average": ["average", str(m), "--last", "2"],
        "explain": ["explain", str(m), "twelve", "--html", str(home / "x.html")],
        "export": ["export", str(m), "--to", "huggingface", str(home / "HF")],
        "train": ["train", "--out", str(m), "--resume", "--quiet"],
    }[command]  # fmt: skip
    refused(home, args, "config.json", "ModelConfig.max_positions", "1000000000000")


@knows_free_memory
@pytest.mark.parametrize(
    "command", ["translate", "evaluate", "average", "explain", "export", "resume", "init_from"]
)
def test_sizes_that_do_not_fit_in_memory_are_refused_before_building(home, command):
    """Sizes within their ranges whose weights need terabytes: refused from the sizes alone,
    before a module is built, by every command that builds a model."""
    m = home / "M"
    edit_configs(m, **HUGE)
    args = {
        "translate": translate(home, m),
        "evaluate": ["evaluate", str(m), "--src", str(home / "in.txt"), "--ref",
                     str(home / "ref.txt"), "-o", str(home / "hyp.txt")],
        "average": ["average", str(m), "--last", "2"],
        "explain": ["explain", str(m), "twelve", "--html", str(home / "x.html")],
        "export": ["export", str(m), "--to", "huggingface", str(home / "HF")],
        "resume": ["train", "--out", str(m), "--resume", "--quiet"],
        "init_from": ["train", "--init_from", str(m), "--out", str(home / "R"), "--quiet",
                      "--corpus", "numbers", "--max_steps", "1"],
    }[command]  # fmt: skip
    refused(home, args, NOT_IN_MEMORY, "memory free on this machine")


@knows_free_memory
@pytest.mark.slow
def test_serve_refuses_sizes_that_do_not_fit_in_memory(home):
    edit_configs(home / "M", **HUGE)
    before = snapshot(home)
    result = cli_process("serve", str(home / "M"), "--port", "0", timeout=120)
    one_line_error(result, 2, "config.json", NOT_IN_MEMORY)
    assert snapshot(home) == before


@pytest.mark.parametrize("damage", ["all NaN", "every 7th +inf"])
@pytest.mark.parametrize("command", ["translate", "average", "export"])
def test_non_finite_weights_are_refused_naming_the_tensor(home, damage, command):
    m = home / "M"
    for step in steps(m):
        weights = load_file(step / "model.safetensors")
        for tensor in weights.values():
            if damage == "all NaN":
                tensor.fill_(float("nan"))
            else:
                tensor.view(-1)[::7] = float("inf")
        save_file(weights, step / "model.safetensors", metadata={"format": "pt"})
    args = {
        "translate": translate(home, m),
        "average": ["average", str(m), "--last", "2"],
        "export": ["export", str(m), "--to", "huggingface", str(home / "HF")],
    }[command]
    line = refused(home, args, "model.safetensors", "the tensor", "non-finite values")
    assert ("nan" if damage == "all NaN" else "inf") in line


@pytest.mark.parametrize(
    ("line", "needle"),
    [('{"step": ' + DEEP + "}", f"line 4 {TOO_DEEP}"),
     ('{"step": "ten"}', "line 4: step must be an integer"),
     ('{"step": 10, "tokens_per_s": 0}', "line 4: tokens_per_s must be a finite number above 0"),
     ('{"step": 10, "tokens_per_s": -5000}', "tokens_per_s must be a finite number above 0, got "
      "-5000.0"),
     ('{"step": 10, "tokens_per_s": NaN}', "got nan"),
     ('{"step": 10, "tokens_per_s": Infinity}', "got inf"),
     ('{"event": "end", "step": 10, "seconds": -1}', "line 4: seconds must be a finite number 0 "
      "or more")],
)  # fmt: skip
def test_a_damaged_metrics_log_is_one_line_in_compare(home, line, needle):
    log = home / "M" / "metrics.jsonl"
    rows = log.read_text().splitlines()[:3]
    log.write_text("\n".join([*rows, line]) + "\n")
    refused(home, ["compare", str(home / "M"), "--out", str(home / "R")], "metrics.jsonl", needle)


@pytest.mark.parametrize(
    ("key", "value", "needle"), [("n_encoder_layers", 3, "missing ["), ("d_ff", 128, "(64, 32)")]
)
def test_export_checks_the_weights_against_the_config(home, key, value, needle):
    """A config whose sizes are not the weights' was a KeyError, or a broken export, exit 0."""
    edit_configs(home / "M", **{key: value})
    args = ["export", str(home / "M"), "--to", "huggingface", str(home / "HF")]
    refused(home, args, "model.safetensors", needle)


# ------------------------------------------------------------------------------ size limits
@pytest.mark.parametrize("which", ["json", "yaml"])
def test_a_file_over_the_size_limit_is_refused_unread(home, monkeypatch, which):
    m = home / "M"
    if which == "json":
        monkeypatch.setattr(reading, "MAX_BYTES", 1000)
        path = steps(m)[-1] / "config.json"
        path.write_text(path.read_text() + " " * 1000)  # still valid JSON
        refused(home, translate(home, steps(m)[-1]), "config.json", "larger than 1,000 bytes")
    else:
        monkeypatch.setattr(reading, "MAX_YAML_BYTES", 100)
        (home / "d.yaml").write_text("beam_size: 2\n" + "# a comment\n" * 20)
        refused(home, [*translate(home, m), "--decode", str(home / "d.yaml")], "d.yaml",
                "larger than 100 bytes")  # fmt: skip


@pytest.mark.parametrize("text", ["train: " + DEEP, "model:\n" + "".join(
    f"{'  ' * i}- \n" for i in range(1, 100))])  # fmt: skip
def test_yaml_nested_too_deep_is_one_line(home, text):
    (home / "c.yaml").write_text(text)
    args = ["train", "--config", str(home / "c.yaml"), "--out", str(home / "R"), "--quiet"]
    refused(home, args, "c.yaml", TOO_DEEP)


def test_yaml_that_gives_a_key_twice_is_one_line_naming_the_key(home):
    """PyYAML keeps the last of two equal keys without a word: 6 steps where 5 were read."""
    (home / "c.yaml").write_text("train:\n  max_steps: 5\n  max_steps: 6\n")
    args = ["train", "--config", str(home / "c.yaml"), "--out", str(home / "R"), "--quiet"]
    refused(home, args, "c.yaml", "the key 'max_steps' is given twice (line 3)")
    (home / "m.yaml").write_text("base: &b {max_steps: 5}\ntrain:\n  <<: *b\n  max_steps: 6\n")
    assert reading.read_yaml(home / "m.yaml")["train"] == {
        "max_steps": 6
    }  # a merged key may be given


def _alias_bomb(key: str, indent: str = "") -> str:
    """YAML of ``key``: a list of 10 anchors, each a list of nine aliases of the one before:
    9^10 strings once expanded, from 500 bytes (the "billion laughs")."""
    lines = [f"{indent}{key}:", f'{indent}  - &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"{indent}  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("flag", "text"), [
    ("--config", _alias_bomb("bombs")),  # an unknown section, named after reading
    ("--config", "data:\n" + _alias_bomb("src_lang", "  ")),  # a string's value
    ("--decode", _alias_bomb("beam_size")),
])  # fmt: skip
def test_yaml_whose_aliases_expand_to_millions_of_values_is_one_line(home, flag, text):
    (home / "c.yaml").write_text(text)
    before = snapshot(home)
    args = ["train", flag, str(home / "c.yaml"), "--out", str(home / "R"), "--quiet"]
    result = cli_process(*args, timeout=120)  # it was a walk of 9^10 values, for hours
    one_line_error(result, 2, "c.yaml", "more than 1,048,576 values")
    assert snapshot(home) == before


@pytest.mark.parametrize("key", list(SIZE_LIMITS))
def test_every_size_has_a_documented_limit_that_is_refused_beyond(home, key):
    limit = SIZE_LIMITS[key]
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith(f"| `model.{key}` |"))
    assert f"at most {limit:,}" in row
    refused(home, ["info", f"--model.{key}", str(limit + 1)], f"ModelConfig.{key}", f"{limit:,}")


# ------------------------------------------------------------------------------ an export
MARKERS = {
    "deep": (lambda values: DEEP, TOO_DEEP),
    "a list": (lambda values: "[1, 2]", "expected an object at the top level"),
    "config not an object": (lambda v: json.dumps({**v, "config": "base"}),
                             "config must be an object, got 'base'"),
    "quantization a list": (lambda v: json.dumps({**v, "quantization": ["int8"]}),
                            "quantization must be a string, got ['int8']"),
    "alignment_heads 10^9": (lambda v: json.dumps({**v, "alignment_heads": 10**9}),
                             "alignment_heads = 1,000,000,000 is out of range"),
    "max_positions 10^12": (lambda v: json.dumps({**v, "config": {**v["config"], "model": {
        **v["config"]["model"], "max_positions": 10**12}}}), "ModelConfig.max_positions"),
}  # fmt: skip


@pytest.mark.parametrize("damage", list(MARKERS))
@pytest.mark.parametrize("command", ["translate", "info"])
def test_a_damaged_export_marker_is_one_line(exported, home, damage, command):
    export = Path(shutil.copytree(exported, home / "E"))
    marker = export / "transformer-export.json"
    change, needle = MARKERS[damage]
    marker.write_text(change(json.loads(marker.read_text())))
    args = [*translate(home, export), "--engine", "ctranslate2"]
    refused(home, args if command == "translate" else ["info", str(export)], marker.name, needle)


# ------------------------------------------------------------------------ a Marian folder
@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    """A random Hugging Face Marian folder (tests/marian_models.py; needs transformers)."""
    marian_models = pytest.importorskip("marian_models")
    return marian_models.marian_folder(tmp_path_factory.mktemp("marian") / "hf")


def _set(name: str, **changes: object):
    def change(folder: Path) -> None:
        path = folder / name
        values = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**values, **changes}))

    return change


def _weights(damage: str):
    def change(folder: Path) -> None:
        weights = load_file(folder / "model.safetensors")
        for tensor in weights.values():
            if damage == "nan":
                tensor.fill_(float("nan"))
            else:
                tensor.view(-1)[::7] = float("inf")
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})

    return change


def _deep(name: str):
    return lambda folder: (folder / name).write_text(DEEP)


IMPORTS = {
    "config.json 100,000 deep": (_deep("config.json"), "config.json", TOO_DEEP),
    "vocab.json 100,000 deep": (_deep("vocab.json"), "vocab.json", TOO_DEEP),
    "activation_function a list": (_set("config.json", activation_function=["gelu", "relu"]),
                                   "config.json", "activation_function must be a string"),
    "max_position_embeddings 10^8": (_set("config.json", max_position_embeddings=10**8),
                                     "config.json", "max_position_embeddings = 100,000,000"),
    "max_position_embeddings 10^12": (_set("config.json", max_position_embeddings=10**12),
                                      "config.json", "max_position_embeddings = 1,000,000,000,000"),
    "d_model 10^6": (_set("config.json", d_model=10**6), "config.json", "d_model = 1,000,000"),
    "too big for memory": (_set("config.json", d_model=65_536, encoder_layers=1_000,
                                decoder_layers=1_000), "config.json", NOT_IN_MEMORY),
    "num_beams 10^9": (_set("generation_config.json", num_beams=10**9),
                       "generation_config.json", "num_beams = 1,000,000,000 is out of range"),
    "separate_vocabs a string": (_set("tokenizer_config.json", separate_vocabs="no"),
                                 "tokenizer_config.json", "separate_vocabs must be true or false"),
    "weights all NaN": (_weights("nan"), "model.safetensors", "non-finite values (the first: nan"),
    "weights every 7th +inf": (_weights("inf"), "model.safetensors", "(the first: inf"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(IMPORTS))
def test_a_damaged_marian_folder_is_refused_by_import(marian, tmp_path, case):
    if case == "too big for memory" and available_memory() is None:
        pytest.skip("free memory unknown")
    source = Path(shutil.copytree(marian, tmp_path / "hf"))
    damage, *needles = IMPORTS[case]
    damage(source)
    before = snapshot(tmp_path)
    one_line_error(cli("import", str(source), str(tmp_path / "out")), 2, *needles)
    assert snapshot(tmp_path) == before and not (tmp_path / "out").exists()


def test_an_imported_models_damaged_tokenizer_table_is_one_line(marian, tmp_path):
    assert cli("import", str(marian), str(tmp_path / "ours")).code == 0
    table = tmp_path / "ours" / "tokenizer" / "src.pieces.json"
    assert table.is_file()
    table.write_text(DEEP)
    (tmp_path / "in.txt").write_text("twelve\n")
    refused(tmp_path, translate(tmp_path, tmp_path / "ours"), "src.pieces.json", TOO_DEEP)


def test_a_sane_model_loads_with_its_minus_inf_output_bias(marian, tmp_path):
    """An import's padding row has an output bias of -inf (hub/marian_vocab.py): allowed there,
    and nowhere else."""
    assert cli("import", str(marian), str(tmp_path / "ours")).code == 0
    (tmp_path / "in.txt").write_text("twelve\n")
    assert cli(*translate(tmp_path, tmp_path / "ours")).code == 0
    weights = next((tmp_path / "ours" / "checkpoints").glob("step_*")) / "model.safetensors"
    state = load_file(weights)
    assert torch.isneginf(state["output.bias"]).any()
    state["output.bias"].fill_(float("-inf"))
    save_file(state, weights, metadata={"format": "pt"})
    refused(tmp_path, translate(tmp_path, tmp_path / "ours"), "output.bias", "-inf in every entry")
