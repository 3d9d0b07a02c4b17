"""Property-based: any damage to a JSON file that comes from outside (tests/mutations.py: wrong
types; huge, negative and non-finite numbers; JSON 100,000 deep; keys missing or added; the file
cut short, replaced by garbage, a link, a pipe, missing or over the size limit) leaves the
command that reads it either working or refused in one line naming the file, exit 2, never a
traceback; and every file of the user's folder (and of the folder beside it that a damaged path
may name) byte-identical afterwards.

The files: a model directory's ``config.json``, its best checkpoint's ``config.json``,
``checkpoints/index.json`` and its marker (read by ``translate`` and ``info``); an export's
marker (``translate --engine ctranslate2`` and ``info``); a Marian folder's ``config.json``,
``generation_config.json``, ``vocab.json`` and ``tokenizer_config.json`` (``import``, then
``translate`` of what it imported).

A longer run by hand: ``FUZZ_EXAMPLES=40 pytest tests/test_files_fuzz.py`` (each example
copies a model and runs a command in this process: 1 to 3 s each on a 2-core machine). Run so,
40 examples per test: the model's and the Marian folder's files passed; the export marker found
a marker removed and a marker replaced by a pipe, each refused as "E holds no checkpoint",
naming the folder rather than the marker, which the property now allows.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutations import Mutation, mutations

from helpers import Result, cli_main, snapshot

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "10"))
pytestmark = pytest.mark.slow  # the tests' trained model
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))  # fmt: skip
NO_COPY = shutil.ignore_patterns(".lock", "trainer.pt", "data")  # what no reader here needs


def best_step(model: Path) -> str:
    """The checkpoint ``index.json`` names best, relative to the model directory."""
    return "checkpoints/" + json.loads((model / "checkpoints" / "index.json").read_text())["best"]


def worked_or_refused(result: Result, file: Path | None, lines: int | None) -> None:
    """Exit 0 with ``lines`` lines out (at most one warning), or exit 2 with one line naming
    ``file`` (if given; its folder if it is gone: a model without its marker is no model);
    never a traceback."""
    assert not any("Traceback" in line for line in result.stderr), result
    if result.code == 0:
        assert len(result.stderr) <= 1, result
        if lines is not None:
            assert len(result.stdout.splitlines()) == lines, result
        return
    assert result.code == 2 and len(result.stderr) == 1, result
    if file is not None:  # no file there (removed, a pipe, a dangling link): its folder named
        name = file.name if os.path.isfile(file) else str(file.parent)
        assert name in result.stderr[0], (name, result.stderr)


def two_translations(result: Result) -> None:
    """Where the damaged file gives the search, the translation of the two input lines: two
    lines, or an n-best list of each (``0 ||| ...``, ``1 ||| ...``) where it asks for one."""
    out = result.stdout.splitlines()
    assert result.code or len(out) == 2 or {x.split(" ||| ")[0] for x in out} == {"0", "1"}, out


def damaged(folder: Path, name: str, mutation: Mutation, elsewhere: Path) -> Path:
    """``folder/name``, with ``mutation`` applied."""
    mutation.apply(folder / name, elsewhere)
    return folder / name


# ------------------------------------------------------------------------ a model directory
MODEL_FILES = ["config.json", "BEST/config.json", "checkpoints/index.json", "transformer-run.json"]


@pytest.fixture(scope="module")
def elsewhere(numbers_model, tmp_path_factory) -> Path:
    """Another model, beside the damaged one: what a damaged path may name."""
    return Path(shutil.copytree(numbers_model, tmp_path_factory.mktemp("other") / "OTHER",
                                ignore=NO_COPY))  # fmt: skip


@FUZZ
@given(data=st.data(), name=st.sampled_from(MODEL_FILES), command=st.sampled_from(["translate",
       "info"]))  # fmt: skip
def test_a_damaged_model_file_is_read_or_refused_in_one_line(
    numbers_model, elsewhere, tmp_path_factory, data, name, command
):
    home = tmp_path_factory.mktemp("home")
    model = Path(shutil.copytree(numbers_model, home / "M", ignore=NO_COPY))
    (home / "in.txt").write_text("twelve\nforty two\n")
    name = name.replace("BEST", best_step(model))
    mutation = data.draw(mutations(model / name), label="mutation")
    file = damaged(model, name, mutation, elsewhere)
    before, other = snapshot(home), snapshot(elsewhere)
    if command == "translate":
        result = cli_main("translate", str(model), "-i", str(home / "in.txt"))
    else:
        result = cli_main("info", str(model))
    assert (snapshot(home), snapshot(elsewhere)) == (before, other)
    searched = command == "translate" and name == "config.json"  # its decode section is used
    if searched:
        two_translations(result)
    worked_or_refused(result, file, 2 if command == "translate" and not searched else None)


# -------------------------------------------------------------------------------- an export
@FUZZ
@given(data=st.data(), command=st.sampled_from(["translate", "info"]))
def test_a_damaged_export_marker_is_read_or_refused_in_one_line(
    exported, elsewhere, tmp_path_factory, data, command
):
    home = tmp_path_factory.mktemp("home")
    export = Path(shutil.copytree(exported, home / "E"))
    (home / "in.txt").write_text("twelve\nforty two\n")
    name = "transformer-export.json"
    file = damaged(export, name, data.draw(mutations(export / name)), elsewhere)
    before, other = snapshot(home), snapshot(elsewhere)
    if command == "translate":
        result = cli_main("translate", str(export), "-i", str(home / "in.txt"), "--engine",
                          "ctranslate2")  # fmt: skip
    else:
        result = cli_main("info", str(export))
    assert (snapshot(home), snapshot(elsewhere)) == (before, other)
    if command == "translate":  # the marker's config gives the search
        two_translations(result)
    worked_or_refused(result, file, None)


# --------------------------------------------------------------------------- a Marian folder
MARIAN_FILES = ["config.json", "generation_config.json", "vocab.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    """A random Hugging Face Marian folder (tests/marian_models.py; needs transformers)."""
    marian_models = pytest.importorskip("marian_models")
    return marian_models.marian_folder(tmp_path_factory.mktemp("marian") / "hf")


@FUZZ
@given(data=st.data(), name=st.sampled_from(MARIAN_FILES))
def test_a_damaged_marian_file_is_imported_or_refused_in_one_line(
    marian, tmp_path_factory, data, name
):
    """``import``, and when it worked, ``translate`` with what it imported (a value the import
    took must not fail later: ``num_beams`` 10^9 did)."""
    home = tmp_path_factory.mktemp("home")
    source = Path(shutil.copytree(marian, home / "hf"))
    other = Path(shutil.copytree(marian, home / "OTHER"))
    (home / "in.txt").write_text("twelve\n")
    file = damaged(source, name, data.draw(mutations(source / name)), other)
    before = snapshot(home)
    result = cli_main("import", str(source), str(home / "out"))
    assert {k: v for k, v in snapshot(home).items() if not k.startswith("out/")} == before
    worked_or_refused(result, file, None)
    if result.code == 0:
        translated = cli_main("translate", str(home / "out"), "-i", str(home / "in.txt"))
        worked_or_refused(translated, None, 1)  # refused: naming the imported model's file
    else:
        assert not (home / "out").exists()
