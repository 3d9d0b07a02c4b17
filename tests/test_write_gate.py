"""The write gate (files.py) through the real command line: a folder is replaced whole only when
its marker lists every entry in it, nothing is written inside a model or any project folder
whatever ``--force`` says, and what a killed command left aside is cleaned by the next one.

Each refusal asserts exit 2, one stderr line without a traceback naming the path, and that every
file the user had is byte-identical. ``tests/test_structure.py`` checks that every write in the
package goes through the gate.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from transformer import files
from transformer.errors import UserError
from transformer.files import atomic_write, mark_folder, replace_folder, write_text
from transformer.inspect.compare import Comparison, RunSummary
from transformer.inspect.compare_report import write_report

from helpers import cli_main as cli
from helpers import one_line_error, snapshot


@pytest.fixture
def home(numbers_model, tmp_path) -> Path:
    """A user's folder: a copy of the tiny model (M)."""
    shutil.copytree(numbers_model, tmp_path / "M", ignore=shutil.ignore_patterns(".lock"))
    return tmp_path


def refused(home: Path, args: list[str], *needles: str, forbidden: str = "") -> str:
    """``transformer ARGS`` exits 2 with one line holding ``needles``; nothing of the user's
    changed."""
    before = snapshot(home)
    line = one_line_error(cli(*args), 2, *needles)
    assert snapshot(home) == before
    assert not forbidden or forbidden not in line, line
    return line


def dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ----------------------------------------------------------- import: replaced only if all ours
@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from marian_models import Shape, marian_folder

    return marian_folder(tmp_path_factory.mktemp("marian") / "hf", Shape())


def test_import_over_an_import_holding_the_users_files_is_refused(marian, tmp_path):
    out = tmp_path / "ours"
    assert cli("import", str(marian), str(out)).code == 0
    listed = json.loads((out / "transformer-import.json").read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in out.iterdir())
    (out / "NOTES.md").write_text("what I found\n")
    (out / "test.hyp").write_text("une\n")
    refused(tmp_path, ["import", str(marian), str(out)], f"{out} holds NOTES.md, test.hyp",
            "nothing in it is replaced")  # fmt: skip
    (out / "NOTES.md").unlink()
    (out / "test.hyp").unlink()
    assert cli("import", str(marian), str(out)).code == 0  # only its own files: replaced
    assert hidden(tmp_path) == []


# ------------------------------------------------------------- compare: reports are a kind
def a_report(out: Path) -> Path:
    """A report written by ``compare``'s writer, from made-up figures."""
    run = RunSummary("r", "/r", "GRU, no attention", 10, 1, 1.0, 1.0, 1.0, 0.0, 0.0, [0.0],
                     [0.0], [1.0])  # fmt: skip
    numbers = Comparison([run], "test split", 1, [(1, 1)], [1], [8], 1, "cpu",
                         {"all": "s", "buckets": "s"})  # fmt: skip
    write_report(numbers, out)
    return out


def test_compare_over_a_report_holding_the_users_notes_is_refused(home):
    runs = [str(home / "M"), str(home / "M")]  # refused before they are read
    report = a_report(home / "R")
    assert json.loads((report / "transformer-report.json").read_text())["kind"] == "report"
    (report / "my-notes.md").write_text("the GRU forgets long sentences\n")
    refused(home, ["compare", *runs, "--out", str(report)], f"{report} holds my-notes.md",
            "nothing in it is replaced")  # fmt: skip
    # and nothing else is written inside a report
    refused(home, ["translate", str(home / "M"), "-i", str(report / "report.md"), "-o",
                   str(report / "x.txt")], "lies inside the report")  # fmt: skip


def test_attention_never_overwrites_the_users_files_in_its_folder(home):
    """``attention --out A`` writes a report folder, replaced whole: a folder of the user's
    holding files of the names it writes (``report.html``, a figure) is refused and left as it
    was; an earlier attention folder is replaced, but not once the user has put a file in it."""
    mine = home / "A"
    mine.mkdir()
    (mine / "report.html").write_text("my report\n")
    (mine / "cross_layer1_head1.png").write_bytes(b"my figure")
    before = snapshot(home)
    refused(
        home,
        ["attention", str(home / "M"), "twelve", "--out", str(mine), "--html"],
        f"{mine} is not empty and holds no earlier report",
        "nothing in it is replaced",
    )
    assert snapshot(home) == before
    ours = home / "B"
    assert cli("attention", str(home / "M"), "twelve", "--out", str(ours), "--html").code == 0
    assert json.loads((ours / "transformer-report.json").read_text())["kind"] == "report"
    again = cli("attention", str(home / "M"), "seven", "--out", str(ours), "--html")
    assert again.code == 0, again.stderr  # an earlier one holding only its own files
    assert "seven" in (ours / "report.html").read_text()
    (ours / "notes.md").write_text("mine\n")
    refused(home, ["attention", str(home / "M"), "twelve", "--out", str(ours)],
            f"{ours} holds notes.md", "nothing in it is replaced")  # fmt: skip
    assert (ours / "notes.md").read_text() == "mine\n"


def test_compare_out_inside_a_run_is_refused(home):
    m = home / "M"
    step = sorted((m / "checkpoints").glob("step_*"))[-1]
    for out in (m / "report", m / "checkpoints", m / "checkpoints" / "report", step / "report"):
        refused(home, ["compare", str(m), str(m), "--out", str(out)], f"--out {out}",
                "lies inside the")  # fmt: skip
    refused(home, ["compare", str(m), str(m), "--out", str(m)], "is the run", "not a report")


# ---------------------------------------------------- explain --html: --force relaxes "exists"
def test_explain_never_writes_inside_the_model_it_reads_even_with_force(home):
    m = home / "M"
    step = sorted((m / "checkpoints").glob("step_*"))[-1]
    targets = (m / "config.json", step / "model.safetensors", m / "checkpoints" / "index.json",
               m / "view.html", step / "view.html")  # fmt: skip
    for target in targets:
        for force in ([], ["--force"]):
            refused(home, ["explain", str(m), "twelve", "--html", str(target), *force],
                    f"--html {target}", "lies inside MODEL_DIR", forbidden="--force")  # fmt: skip
    other = home / "other"
    shutil.copytree(m, other)
    refused(home, ["explain", str(m), "twelve", "--html", str(other / "config.json"), "--force"],
            "lies inside the run", forbidden="--force")  # fmt: skip
    mine = home / "mine.html"
    mine.write_text("my page\n")
    refused(home, ["explain", str(m), "twelve", "--html", str(mine)], "exists", "--force")
    assert cli("explain", str(m), "twelve", "--html", str(mine), "--force").code == 0
    assert "step-data" in mine.read_text() and hidden(home) == []


# ---------------------------------------------------------------- what a killed command left
KILLED_EXPORT = textwrap.dedent("""
    import sys, time
    from transformer.hub import huggingface_export
    from transformer.cli import main

    def stop_here(*args, **kwargs):  # the folder is built, not yet marked nor renamed
        print("built", flush=True)
        time.sleep(600)

    huggingface_export.mark_folder = stop_here
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.slow  # a process of its own, killed
def test_a_killed_export_leaves_a_folder_the_next_export_removes(home):
    out = home / "E"
    args = ["export", str(home / "M"), "--to", "huggingface", str(out)]
    child = subprocess.Popen([sys.executable, "-c", KILLED_EXPORT, *args], stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "built"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    leftover = home / f".E.transformer-tmp-{child.pid}"
    assert hidden(home) == [leftover.name] and (leftover / "model.safetensors").is_file()
    assert not out.exists()
    result = cli(*args)
    assert result.code == 0, result.stderr
    assert len(result.stderr) == 1 and "warning" in result.stderr[0]
    assert f"removed {leftover}" in result.stderr[0] and f"process {child.pid}" in result.stderr[0]
    assert hidden(home) == [] and (out / "transformer-export.json").is_file()


def test_an_export_moved_aside_by_a_killed_replacement_is_put_back(home):
    out = home / "E"
    args = ["export", str(home / "M"), "--to", "huggingface", str(out)]
    assert cli(*args).code == 0
    (out / "NOTES.md").write_text("mine\n")
    before = snapshot(out)
    pid = dead_pid()  # killed between moving E aside and renaming the new one into place
    os.rename(out, home / f".E.transformer-old-{pid}")
    (home / f".E.transformer-tmp-{pid}").mkdir()
    result = cli(*args)
    assert result.code == 2 and len(result.stderr) == 3, result.stderr
    assert f"put {out} back" in result.stderr[0] and f"process {pid}" in result.stderr[0]
    assert f".E.transformer-tmp-{pid}" in result.stderr[1]
    assert "holds NOTES.md" in result.stderr[2] and "Traceback" not in "".join(result.stderr)
    assert snapshot(out) == before and hidden(home) == []


def test_a_file_left_half_written_is_removed_by_the_next_write(home):
    (home / "in.txt").write_text("twelve\n")
    out = home / "out.txt"
    pid = dead_pid()
    (home / f".out.txt.transformer-tmp-{pid}").write_text("half a transl")
    result = cli("translate", str(home / "M"), "-i", str(home / "in.txt"), "-o", str(out))
    assert result.code == 0 and len(result.stderr) == 1, result.stderr
    assert f".out.txt.transformer-tmp-{pid}" in result.stderr[0]
    assert hidden(home) == [] and out.read_text().count("\n") == 1


def test_what_a_running_process_writes_is_left_alone(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".out.txt.transformer-tmp-{sleeper.pid}"
        busy.write_text("being written")
        said = files.clean_leftovers(tmp_path, "out.txt")
        assert busy.exists() and said == [f"{busy} is being written by process {sleeper.pid}; "
                                          "left as it is"]  # fmt: skip
    finally:
        sleeper.kill()
        sleeper.wait()


# ----------------------------------------------------------------- the gate, called directly
def test_a_write_that_names_no_owner_never_lands_in_a_project_folder(home):
    before = snapshot(home)
    for path in (home / "M" / "config.json", home / "M" / "checkpoints" / "notes.txt"):
        with pytest.raises(UserError, match="lies inside the run"):
            write_text(path, "x")  # whatever its caller checked before
        with pytest.raises(UserError, match="lies inside the run"), atomic_write(path):
            pass
    assert snapshot(home) == before
    write_text(home / "M" / "notes.txt", "x", owner=home / "M")  # the run's own command may
    with pytest.raises(ValueError, match="lies outside"):
        write_text(home / "elsewhere.txt", "x", owner=home / "M")


def test_a_folder_replaced_whole_must_list_every_entry(tmp_path):
    out = tmp_path / "E"
    with replace_folder(out, "export", "OUT", {}) as staging:
        write_text(staging / "a.txt", "a", staging)
        mark_folder(staging, "export", format="test")
    before = snapshot(out)
    unmarked = pytest.raises(RuntimeError, match="without a marker")
    with unmarked, replace_folder(out, "export", "OUT", {}) as staging:
        write_text(staging / "b.txt", "b", staging)  # and no marker
    assert snapshot(out) == before and hidden(tmp_path) == []
