"""Fault cases of the paths a command writes and the limits it checks, through the real command
line (``python -m transformer``, or its ``main`` in this process where no process of its own is
needed): each asserts the exit code, a single stderr line without a traceback naming the value
at fault, and that every file the user had is byte-identical.

D1-D9 are the defects a held-out probe of a fresh clone found: section config files (D1), a
YAML section that is not a mapping (D2), outputs that are devices, FIFOs or links (D3), outputs
inside the model being read (D4), ``--overwrite`` over another kind of folder (D5), a run
inside another run (D6), an export over a user's files and evaluate's default output (D7),
absurd thread counts (D8) and a closed standard input (D9).
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.config import ModelConfig
from transformer.data import readers
from transformer.errors import UserError
from transformer.files import mark_folder
from transformer.inspect.info import parameter_table
from transformer.model import Transformer
from transformer.model.build import parameter_count
from transformer.model_dir.layout import folder_kind

from helpers import TINY_NUMBERS, Result, cli_process, one_line_error, snapshot
from helpers import cli_main as cli

needs_ct2 = pytest.mark.skipif(
    importlib.util.find_spec("ctranslate2") is None,
    reason="ctranslate2 is not installed (pip install '.[ct2]')",
)
TRAIN = ["--quiet", *TINY_NUMBERS, "--max_steps", "2", "--save_every", "2", "--validate_every", "2"]


@pytest.fixture
def home(numbers_model, tmp_path) -> Path:
    """A user's folder: a copy of the tiny model (M), a text to translate and a reference."""
    shutil.copytree(numbers_model, tmp_path / "M", ignore=shutil.ignore_patterns(".lock"))
    (tmp_path / "in.txt").write_text("twelve\nfour\n")
    (tmp_path / "ref.txt").write_text("douze\nquatre\n")
    return tmp_path


def step_of(model: Path) -> Path:
    return sorted((model / "checkpoints").glob("step_*"))[-1]


def refused(
    home: Path, args: list[str], *needles: str, forbidden: str = "", process: bool = False
) -> str:
    """Runs ``transformer ARGS`` (in a child process if ``process``, else in this one): exit 2,
    one line holding ``needles``, no file of the user's changed (or added)."""
    before = snapshot(home)
    line = one_line_error((cli_process if process else cli)(*args), 2, *needles)
    assert snapshot(home) == before
    assert not forbidden or forbidden not in line, line
    return line


# ------------------------------------------------------------ carriage returns inside a line
@pytest.mark.parametrize("where", ["<stdin>", "<stdin> --document", "--input", "--prefix",
                                   "train"])  # fmt: skip
def test_a_carriage_return_inside_a_line_is_refused(home, where):
    """Old Mac line endings made the whole input one line: translate printed the translation of
    its first sentence, the rest lost, with exit 0."""
    cr = b"twelve\nninety-one\rseven hundred\rtwelve\r\n"
    (home / "cr.txt").write_bytes(cr)
    (home / "crlf.txt").write_bytes(b"twelve\r\nfour\r\nfive\r\n")  # CRLF: read as usual
    args = ["translate", str(home / "M"), "-o", str(home / "out.txt")]
    stdin = cr if where.startswith("<stdin>") else None
    if where == "<stdin> --document":
        args.append("--document")
    elif where == "--input":
        args += ["--input", str(home / "cr.txt")]
    elif where == "--prefix":
        args += ["--input", str(home / "crlf.txt"), "--prefix", str(home / "cr.txt")]
    elif where == "train":
        args = ["train", "--preset", "tiny", "--data.src", str(home / "cr.txt"), "--data.tgt",
                str(home / "crlf.txt"), "--out", str(home / "R")]  # fmt: skip
    name = "<stdin>" if stdin else "cr.txt"
    before = snapshot(home)
    result = cli(*args, stdin=stdin)
    one_line_error(result, 2, f"{name}: line 2 holds a carriage return (\\r) inside the line")
    assert snapshot(home) == before


def test_crlf_line_endings_are_read_as_lines(home):
    (home / "crlf.txt").write_bytes(b"twelve\r\nfour\r\n")
    result = cli("translate", str(home / "M"), "--input", str(home / "crlf.txt"))
    assert result.code == 0 and len(result.stdout.splitlines()) == 2, result.stderr


# ------------------------------------------------------------------- text files holding NUL bytes
@pytest.mark.parametrize(("command", "flag"), [
    ("translate", "--prefix"), ("score", "--src"), ("score", "--ref"), ("evaluate", "--src"),
    ("evaluate", "--ref"),
])  # fmt: skip
def test_a_text_file_holding_a_nul_byte_is_refused_by_every_reader(home, command, flag):
    """Binary data can decode as UTF-8; ``--input`` refused it, the other text files were read
    (a prefix of "twel\\0ve" forced "t ⁇ el ⁇ ve" on the translation)."""
    (home / "nul.txt").write_bytes(b"douze\nqua\x00tre\n")
    files = {"--input": "in.txt", "--src": "in.txt", "--ref": "ref.txt", flag: "nul.txt"}
    names = ["--input", "--prefix"] if command == "translate" else ["--src", "--ref"]
    args = [command, str(home / "M"), "-o", str(home / "out.txt")]
    for name in names:
        args += [name, str(home / files.get(name, "nul.txt"))]
    refused(home, args, "nul.txt", "line 2", "NUL byte")


@pytest.mark.parametrize("where", ["<stdin>", "<stdin> --document", "--input", "--prefix"])
def test_a_line_longer_than_the_bound_is_refused(home, monkeypatch, where):
    """``/dev/zero`` piped into translate was a MemoryError, and 300 MB on one line SentencePiece's
    ``bad_alloc``: every reader of lines reads a line no further than its bound."""
    monkeypatch.setattr(readers, "MAX_LINE_BYTES", 1000)
    long = b"twelve\n" + b"one " * 300 + b"\n"
    (home / "long.txt").write_bytes(long)
    args = ["translate", str(home / "M"), "-o", str(home / "out.txt")]
    stdin = long if where.startswith("<stdin>") else None
    if where == "<stdin> --document":
        args.append("--document")
    elif where != "<stdin>":
        args += ["--input", str(home / ("in.txt" if where == "--prefix" else "long.txt"))]
        args += ["--prefix", str(home / "long.txt")] if where == "--prefix" else []
    name = "<stdin>" if stdin else "long.txt"
    before = snapshot(home)
    one_line_error(cli(*args, stdin=stdin), 2, f"{name}: line 2 is longer than 1,000 bytes")
    assert snapshot(home) == before


def test_a_prefix_the_target_vocabulary_cannot_spell_is_refused(home):
    """It was forced as the unknown piece: "Zebra!" began the translation " ⁇ e ⁇ ra ⁇ "."""
    (home / "p.txt").write_text("douze\nZebra!\n")
    refused(home, ["translate", str(home / "M"), "-i", str(home / "in.txt"), "--prefix",
                   str(home / "p.txt"), "-o", str(home / "out.txt")],
            "p.txt: line 2", "cannot spell", "'!' 'Z' 'b'")  # fmt: skip
    from transformer.inference.engine import load_torch_engine

    with pytest.raises(UserError, match=r"^prefix 1 holds characters .* cannot spell: 'Z'"):
        load_torch_engine(home / "M").translate(["one"], prefixes=["Zoo"])


@pytest.mark.parametrize("command", ["translate", "evaluate", "export"])
def test_a_tokenizer_that_does_not_fit_the_model_is_refused(home, command):
    """Another model's tokenizer copied in (or the two sides' swapped): "ninety-one" translated
    as "thi" with exit 0, and other words gave an IndexError from the embedding."""
    from transformer.config import DataConfig
    from transformer.data.tokenizer import Tokenizers

    pairs = [("one two three four", "un deux trois quatre"), ("five six", "cinq six")] * 20
    other = Tokenizers.train(pairs, DataConfig(vocab_size=30))
    (home / "M" / "tokenizer" / "joint.model").write_bytes(other.src.model)
    args = {"translate": ["-i", str(home / "in.txt"), "-o", str(home / "out.txt")],
            "evaluate": ["--src", str(home / "in.txt"), "--ref", str(home / "ref.txt")],
            "export": ["--to", "huggingface", str(home / "E")]}[command]  # fmt: skip
    refused(home, [command, str(home / "M"), *args], "joint.model has 30 pieces", "src_vocab_size",
            "not the tokenizer the model was trained with")  # fmt: skip


def test_attention_refuses_a_sentence_longer_than_the_models_positions(home):
    """It drew the attention of the sentence cut to the model's positions, without a word, and
    took hours over 82 figures of that size; explain refused the same sentence."""
    line = refused(home, ["attention", str(home / "M"), "one " * 600, "--out", str(home / "A")],
                   "tokens", "max_positions", "shorten it")  # fmt: skip
    assert not (home / "A").exists(), line


# ------------------------------------------------------------------- D1: section config files
@pytest.mark.slow
def test_a_section_file_is_read_with_the_checks_of_config(home):
    m, text = str(home / "M"), str(home / "in.txt")
    (home / "greedy.yaml").write_text("beam_size: 1\nmax_len_b: 20\n")
    with_file = cli("translate", m, "-i", text, "--decode", str(home / "greedy.yaml"))
    with_options = cli("translate", m, "-i", text, "--beam_size", "1", "--max_len_b", "20")
    assert with_file.code == with_options.code == 0, with_file.stderr
    assert with_file.stdout == with_options.stdout
    # the options go on top of the file
    beam = cli("translate", m, "-i", text, "--decode", str(home / "greedy.yaml"), "--beam_size",
               "4", "--max_len_b", "20")  # fmt: skip
    assert beam.stdout == cli("translate", m, "-i", text, "--max_len_b", "20").stdout
    (home / "rt.yaml").write_text("device: cpu\nthreads: 1\n")
    assert cli("translate", m, "-i", text, "--runtime", str(home / "rt.yaml")).code == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "section", "text", "needle"),
    [
        ("translate", "decode", "beam_sise: 2\n", "unknown decode key 'beam_sise'; did you mean"),
        ("translate", "decode", "beam_size: 0\n", "beam_size"),
        ("translate", "decode", "- 1\n- 2\n", "expected a mapping of decode keys"),
        ("translate", "runtime", "threads: -1\n", "threads must be >= 0"),
        ("serve", "serve", "port: 99999\n", "port must be in 0..65535"),
        ("info", "model", "d_model: [1]\n", "d_model"),
    ],
)
def test_a_bad_section_file_is_one_line_naming_it(home, command, section, text, needle):
    (home / "s.yaml").write_text(text)
    model = [] if command == "info" else [str(home / "M")]
    refused(home, [command, *model, f"--{section}", str(home / "s.yaml")], "s.yaml", needle)


@pytest.mark.slow
def test_a_model_section_file_gives_the_table_of_its_sizes(home):
    (home / "m.yaml").write_text("preset: tiny\nd_model: 64\n")
    by_file = cli("info", "--model", str(home / "m.yaml"))
    by_options = cli("info", "--preset", "tiny", "--d_model", "64")
    assert (
        by_file.code == 0 and by_file.stdout == by_options.stdout and "d_model=64" in by_file.stdout
    )


# ------------------------------------------------------------- D2: a section that is no mapping
@pytest.mark.slow
@pytest.mark.parametrize("text", ["train: 5\n", "model: tiny\n", "decode: [1, 2]\n"])
def test_a_config_section_that_is_not_a_mapping_names_it(home, text):
    (home / "c.yaml").write_text(text)
    section = text.split(":")[0]
    args = ["train", "--config", str(home / "c.yaml"), "--out", str(home / "R"), *TRAIN]
    refused(home, args, "c.yaml", f"section '{section}' must be a mapping")


# ------------------------------------------------------------- D3: devices, FIFOs, links
def _special(home: Path, kind: str) -> Path:
    path = home / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
        listener.close()
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private /dev/null
        except PermissionError:
            pytest.skip("making a device node needs root")
    elif kind == "link_to_dev_null":
        path.symlink_to("/dev/null")
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "needle"),
    [("fifo", "is a FIFO"), ("socket", "is a socket"), ("folder", "is a folder"),
     ("device", "is a character device"), ("link_to_dev_null", "is a character device")],
)  # fmt: skip
def test_an_output_that_is_not_a_regular_file_is_refused(home, kind, needle):
    target = _special(home, kind)
    args = ["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o", str(target)]
    mode = os.lstat(target).st_mode  # a link's own mode: still a link afterwards
    refused(home, args, f"--output {target}", needle)  # (a FIFO opened for writing would hang)
    assert os.lstat(target).st_mode == mode


def test_an_output_that_ends_with_a_slash_is_refused(home):
    """``-o new/`` names a folder: it made a file called ``new``."""
    for output in (home / "new", home):
        args = ["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o", f"{output}/"]
        refused(home, args, f"--output {output}/", "names a folder")
    assert not (home / "new").exists()


def test_a_folder_that_cannot_be_written_is_refused_before_the_work(home, monkeypatch):
    """A read-only file system (simulated: the tests run as root, whom permissions never stop)
    is refused when the command starts: ``evaluate`` translated the whole test set first."""
    from transformer import files

    locked = home / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(files.os, "access", lambda p, m: Path(p) != locked and real(p, m))
    monkeypatch.chdir(locked)
    for args in (["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o",
                  str(locked / "out.txt")],
                 ["evaluate", str(home / "M"), "--src", str(home / "in.txt"), "--ref",
                  str(home / "ref.txt"), "-o", str(locked / "out.txt")],
                 ["attention", str(home / "M"), "twelve", "--out", str(locked / "A")]):  # fmt: skip
        refused(home, args, f"the folder {locked} is not writable")


def test_a_full_disk_names_the_output_not_its_temporary(home, monkeypatch):
    from transformer import files

    out = home / "out.txt"
    out.write_text("yesterday\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    line = refused(home, ["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o",
                          str(out)], f"no space left on device while writing {out}")  # fmt: skip
    assert "transformer-tmp" not in line
    assert out.read_text() == "yesterday\n" and not [p for p in home.iterdir() if ".tmp" in p.name]


def test_a_read_only_file_system_names_the_output_not_its_temporary(home, monkeypatch):
    """The temporary beside the output is where the error happens (its name given as a path)."""
    import builtins

    from transformer import files

    out, real = home / "out.txt", builtins.open

    def read_only(file, mode="r", *args, **kwargs):
        if "transformer-tmp" in str(file) and "x" in mode:
            raise OSError(errno.EROFS, "Read-only file system", file)
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(files, "open", read_only, raising=False)
    line = refused(home, ["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o",
                          str(out)], f"{out}: Read-only file system")  # fmt: skip
    assert "transformer-tmp" not in line


@pytest.mark.slow
def test_a_link_to_a_file_is_written_through_and_stays_a_link(home):
    real, link = home / "real.txt", home / "link.txt"
    real.write_text("yesterday\n")
    link.symlink_to("real.txt")
    direct = cli("translate", str(home / "M"), "-i", str(home / "in.txt"))
    result = cli("translate", str(home / "M"), "-i", str(home / "in.txt"), "-o", str(link))
    assert result.code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert real.read_text() == direct.stdout
    dash = cli("translate", str(home / "M"), "-i", str(home / "in.txt"), "-o", "-")
    assert dash.stdout == direct.stdout and not (Path.cwd() / "-").exists()


# ------------------------------------------------------- D4: outputs inside what is read
@pytest.mark.slow
def test_an_output_inside_the_model_being_read_is_refused(home):
    m, text = home / "M", str(home / "in.txt")
    weights = step_of(m) / "model.safetensors"
    for output in (weights, m / "config.json", m / "tokenizer" / "new.txt"):
        refused(home, ["translate", str(m), "-i", text, "-o", str(output)], f"--output {output}",
                "lies inside MODEL_DIR")  # fmt: skip
    refused(home, ["translate", str(step_of(m)), "-i", text, "-o", str(m / "x.txt")],
            "lies inside the run")  # fmt: skip
    refused(home, ["evaluate", str(m), "--src", text, "--ref", str(home / "ref.txt"),
                   "-o", str(m / "test.hyp")], "lies inside MODEL_DIR")  # fmt: skip
    refused(home, ["attention", str(m), "twelve", "--out", str(m / "figures")],
            "--out", "lies inside MODEL_DIR")  # fmt: skip


@pytest.mark.slow
def test_an_output_inside_any_project_folder_is_refused(home):
    other = home / "other-run"
    shutil.copytree(home / "M", other)
    marked = home / "imported"  # an import (another toolkit's model) made by its command
    marked.mkdir()
    mark_folder(marked, "import", source="elsewhere")
    for folder, kind in ((other, "run"), (other / "checkpoints", "run"), (marked, "import")):
        output = folder / "out.txt"
        refused(home, ["translate", str(home / "M"), "-i", str(home / "in.txt"), "-o",
                       str(output)], f"lies inside the {kind}")  # fmt: skip


# ------------------------------------------- D5, D6: --overwrite only over a run, never in one
@pytest.mark.slow
def test_train_overwrite_refuses_an_export_or_import(home):
    for kind in ("export", "import"):
        folder = home / kind
        folder.mkdir()
        (folder / "config.json").write_text('{"not": "a run"}\n')
        (folder / "tokenizer").mkdir()
        mark_folder(folder, kind)
        assert folder_kind(folder) == kind
        refused(home, ["train", "--out", str(folder), "--overwrite", *TRAIN],
                f"is the {kind}", "not a run", forbidden="--overwrite")  # fmt: skip


@pytest.mark.slow
def test_train_refuses_a_folder_holding_a_runs_entries_that_is_no_run(home):
    (home / "mine").mkdir()
    (home / "mine" / "config.json").write_text("my own config\n")
    refused(home, ["train", "--out", str(home / "mine"), "--overwrite", *TRAIN],
            "is not a training run but holds config.json")  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("inside", ["checkpoints/STEP", "checkpoints", "tokenizer", "data/new"])
def test_train_into_another_run_is_refused(home, inside):
    out = home / "M" / inside.replace("STEP", step_of(home / "M").name)
    for extra in ([], ["--overwrite"], ["--resume"]):
        refused(home, ["train", "--out", str(out), *extra, *TRAIN], "lies inside the run",
                forbidden="--overwrite")  # fmt: skip


@needs_ct2
@pytest.mark.slow
def test_a_damaged_export_is_a_one_line_error(home):
    assert cli("export", str(home / "M"), "--to", "ctranslate2", str(home / "E")).code == 0
    (home / "E" / "config.json").write_text('{"bos_token": null}\n')  # as a run's would be
    args = ["translate", str(home / "E"), "--engine", "ctranslate2", "-i", str(home / "in.txt")]
    refused(home, args, "CTranslate2 cannot load this export", "export the model again")


# ----------------------------------------------- D7: export and evaluate keep the user's files
@needs_ct2
@pytest.mark.slow
def test_export_over_an_export_holding_the_users_files_is_refused(home):
    export = ["export", str(home / "M"), "--to", "ctranslate2", str(home / "E")]
    assert cli(*export).code == 0
    (home / "E" / "NOTES.md").write_text("the user's notes\n")
    refused(home, export, "holds NOTES.md", "nothing in it is replaced")
    (home / "E" / "NOTES.md").unlink()
    assert cli(*export).code == 0  # an export holding only its own files is replaced


@pytest.mark.slow
def test_evaluate_writes_its_hypotheses_beside_the_source(home):
    model = snapshot(home / "M")
    args = ["evaluate", str(home / "M"), "--src", str(home / "in.txt"), "--ref",
            str(home / "ref.txt"), "--beam_size", "1"]  # fmt: skip
    result = cli(*args)
    assert result.code == 0, result.stderr
    assert len((home / "in.txt.hyp").read_text().splitlines()) == 2
    assert f"hypotheses: {home / 'in.txt.hyp'}" in result.stdout
    assert snapshot(home / "M") == model


def test_evaluate_never_replaces_a_users_file_at_its_default_place(home, monkeypatch):
    """``SRC.hyp`` (or ``MODEL.test.hyp``) that evaluate did not write, such as another
    system's hypotheses, was silently replaced; now it is refused before any work, and only
    what evaluate wrote there, unchanged, is replaced by the next evaluate."""
    args = ["evaluate", str(home / "M"), "--src", str(home / "in.txt"), "--ref",
            str(home / "ref.txt"), "--beam_size", "1"]  # fmt: skip
    hyp = home / "in.txt.hyp"
    hyp.write_text("another system's line 1\nanother system's line 2\n")
    refused(home, args, f"{hyp} exists", "evaluate did not write it", f"--output {hyp}")
    hyp.unlink()
    assert cli(*args).code == 0  # evaluate's own: recorded beside it ...
    ours = hyp.read_text()
    assert cli(*args).code == 0 and hyp.read_text() == ours  # ... and replaced the next time
    hyp.write_text(ours + "a line the user added\n")  # changed since: the user's now
    refused(home, args, f"{hyp} exists", "or it changed since")
    assert cli(*args, "--output", str(hyp)).code == 0  # named: replaced, and recorded again
    assert hyp.read_text() == ours and cli(*args).code == 0
    monkeypatch.chdir(home)  # the run's test split: MODEL.test.hyp in the current folder
    (home / "M.test.hyp").write_text("mine\n")
    refused(home, ["evaluate", str(home / "M")], "M.test.hyp exists")


# --------------------------------------------------------- D8: thread counts; info's sizes
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_an_absurd_thread_count_is_refused_before_it_reaches_the_library(home, engine):
    if engine == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
        pytest.skip("ctranslate2 is not installed")
    args = ["translate", str(home / "M"), "-i", str(home / "in.txt"), "--engine", engine]
    for threads in ("100000", "20000"):
        refused(home, [*args, "--runtime.threads", threads], f"--runtime.threads {threads}",
                "per CPU core", process=True)  # a regression would crash the process  # fmt: skip


@pytest.mark.slow
def test_info_refuses_sizes_that_would_not_fit_in_memory(home):
    args = ["info", "--d_model", "65536", "--n_heads", "8", "--n_encoder_layers", "1000"]
    refused(home, args, "GB of float32 weights", "memory free on this machine")


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_the_parameter_count_from_the_sizes_is_that_of_the_built_model(
    share, tie, positional, norm_first, bias
):
    config = ModelConfig.preset(
        "tiny", src_vocab_size=50, tgt_vocab_size=50 if share else 70, share_embeddings=share,
        tie_output=tie, positional=positional, norm_first=norm_first, n_encoder_layers=3,
        n_decoder_layers=1, d_ff=48, output_bias=bias,
    )  # fmt: skip
    model = Transformer(config)
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())
    assert parameter_table(model)[-1][1] == parameter_count(config)


# ----------------------------------------------------------- D9: closed standard streams
def _with_closed(fd: int, *args: str) -> Result:
    """``transformer ARGS`` with file descriptor ``fd`` closed (``<&-`` for 0, ``>&-`` for 1)."""
    done = subprocess.run([sys.executable, "-m", "transformer", *args], stderr=subprocess.PIPE,
                          preexec_fn=lambda: os.close(fd), timeout=300)  # fmt: skip
    return Result(done.returncode, "", done.stderr.decode(errors="replace").splitlines())


@pytest.mark.slow
def test_a_closed_standard_input_or_output_is_a_one_line_error(home):
    before = snapshot(home)
    m = str(home / "M")
    one_line_error(_with_closed(0, "translate", m), 2, "standard input is closed", "--input")
    closed_stdout = _with_closed(1, "translate", m, "-i", str(home / "in.txt"))
    one_line_error(closed_stdout, 2, "standard output is closed", "--output")
    assert snapshot(home) == before
