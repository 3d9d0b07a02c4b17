"""translate, evaluate, average and demo from the command line, on a small trained model."""

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time

import pytest
import torch
from sacrebleu.metrics import BLEU
from safetensors.torch import load_file, save_file

from transformer.demo import run_demo
from transformer.inference.engine import load_torch_engine
from transformer.model_dir.checkpoints import load_checkpoint, step_checkpoints

from helpers import SHARED_DATA, cli, command_process, imported_by_command

SOURCES = ["seven hundred and seventy-one", "", "twelve", "eighty"]


def test_translate_keeps_line_alignment(numbers_model, tmp_path, capsys, monkeypatch):
    code, out, err = cli(
        ["translate", str(numbers_model)], capsys, "\n".join(SOURCES) + "\n", monkeypatch
    )
    assert code == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == len(SOURCES)
    assert lines[1] == ""  # an empty line stays empty
    # Each line is the library's translation of its own input line (a barely trained model may
    # translate a number to nothing; what matters here is which line holds what).
    engine = load_torch_engine(numbers_model)
    assert lines == engine.translate(SOURCES).best
    # The same through --input / --output, and with greedy search.
    (tmp_path / "in.txt").write_text("\n".join(SOURCES) + "\n")
    code, _, _ = cli(
        [
            "translate",
            str(numbers_model),
            "-i",
            str(tmp_path / "in.txt"),
            "-o",
            str(tmp_path / "out.txt"),
        ],
        capsys,
    )
    assert code == 0
    assert (tmp_path / "out.txt").read_text().split("\n")[:-1] == lines


def test_translate_nbest_lists_are_sorted_with_scores(numbers_model, capsys, monkeypatch):
    code, out, _ = cli(
        ["translate", str(numbers_model), "--nbest", "3", "--beam_size", "4"],
        capsys,
        "twelve\nfour\n",
        monkeypatch,
    )
    assert code == 0
    rows = [line.split(" ||| ") for line in out.strip().split("\n")]
    assert [int(r[0]) for r in rows] == [0, 0, 0, 1, 1, 1]
    for sentence in (rows[:3], rows[3:]):
        scores = [float(r[2]) for r in sentence]
        assert scores == sorted(scores, reverse=True) and all(s <= 0 for s in scores)


def test_translate_warns_about_a_line_that_is_too_long(numbers_model, capsys, monkeypatch):
    long_line = " ".join(["seven"] * 200)  # the fixture model has 48 positions
    code, out, err = cli(
        ["translate", str(numbers_model), "--beam_size", "1"],
        capsys,
        f"twelve\n{long_line}\n",
        monkeypatch,
    )
    assert code == 0
    assert len(out.split("\n")[:-1]) == 2
    assert "warning: line 2: longer than the model accepts" in err


def test_translate_rejects_invalid_utf8_naming_the_line(numbers_model, tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"twelve\nfour \xff\n")
    code, _, err = cli(["translate", str(numbers_model), "-i", str(tmp_path / "bad.txt")], capsys)
    assert code == 2 and "bad.txt: line 2 is not valid UTF-8" in err and err.count("\n") == 1


def test_translate_missing_model_is_a_clear_error(tmp_path, capsys):
    code, _, err = cli(["translate", str(tmp_path / "nope")], capsys)
    assert code == 2 and "model directory not found" in err


def test_translate_imports_only_what_it_uses(numbers_model, tmp_path):
    # Every command starts by importing torch (0.85 s here); what we add on top is a command's
    # start-up. Translating scores nothing, so sacreBLEU (25-30 ms) is imported only by the
    # scoring; jsonargparse reads our typed configs without typeshed-client (80 ms), and the
    # compiler and matplotlib come only with compiling and drawing.
    (tmp_path / "in.txt").write_text("twelve\n")
    result, late = imported_by_command(
        ["translate", str(numbers_model), "-i", str(tmp_path / "in.txt")],
        ("sacrebleu", "typeshed_client", "torch._dynamo", "sympy", "matplotlib"),
    )
    assert result.code == 0 and result.stdout.count("\n") == 1, result.stderr  # one line out
    assert late == [], result.stderr


@pytest.mark.parametrize(
    "args", [["--help"], ["translate", "--help"], ["train", "--help"], ["serve", "--help"]]
)
def test_the_help_answers_without_torch(args):
    # torch's import is most of a command's start-up (0.85-1 s); the usage and a command's
    # help need none of it: 0.1-0.2 s
    result, late = imported_by_command(args, ("torch",))
    assert result.code == 0 and "usage:" in result.stdout, result.stderr
    assert late == [], result.stderr


def test_the_command_imports_with_the_cycle_collector_paused_and_frozen():
    # `transformer` (the command, and `python -m transformer`) imports torch and the commands
    # with the collector paused, then freezes what the import made: no full collection walks
    # the ~280,000 objects, during the command or at the interpreter's exit. Without the pause
    # the import alone ran 3 full collections (150-200 ms), and the command took 1.7-1.9 s for
    # one sentence against 1.2-1.4 s. Importing the package alone imports nothing more.
    done = command_process(
        ["info", "--preset", "small"],
        before=(
            "import gc\n"
            "import transformer\n"
            "light = 'torch' not in sys.modules\n"
            "full = []\n"
            "gc.callbacks.append(lambda phase, info: phase == 'stop' and info['generation'] == 2\n"
            "                    and full.append(1))"
        ),
        after=(
            "print('light', light, 'full', len(full), 'frozen', gc.get_freeze_count(),\n"
            "      'enabled', gc.isenabled(), file=sys.stderr)"
        ),
    )
    assert done.code == 0 and "total" in done.stdout, done.stderr
    words = " ".join(done.stderr).split()
    said = dict(zip(words[::2], words[1::2], strict=True))
    assert said["light"] == "True" and said["full"] == "0" and said["enabled"] == "True", said
    assert int(said["frozen"]) > 100_000, said


@pytest.mark.slow
def test_translate_is_interactive_on_a_terminal(numbers_model, capsys, monkeypatch):
    _, expected, _ = cli(["translate", str(numbers_model)], capsys, "twelve\n", monkeypatch)
    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer", "translate", str(numbers_model)],
        stdin=child_fd, stdout=child_fd, stderr=child_fd, close_fds=True,
    )  # fmt: skip
    os.close(child_fd)
    seen = b""

    def read_until(pattern: bytes, start: int = 0, timeout: float = 60) -> None:
        nonlocal seen
        end = time.time() + timeout
        while pattern not in seen[start:] and time.time() < end:
            if select.select([main_fd], [], [], 0.5)[0]:
                seen += os.read(main_fd, 4096)
        assert pattern in seen[start:], seen

    read_until(b"> ")
    os.write(main_fd, b"twelve\n")
    read_until(b"twelve\r\n")  # the echo
    start = len(seen)
    read_until(b"> ", start)  # a translation, then the next prompt
    translation = seen[start:].split(b"> ")[0].decode().strip()
    assert translation == expected.strip() != ""
    os.write(main_fd, b"\x04")  # Ctrl-D
    assert proc.wait(timeout=30) == 0
    os.close(main_fd)


def test_evaluate_prints_bleu_and_chrf_with_signatures(numbers_model, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("twelve\nfour hundred\n")
    (tmp_path / "ref.txt").write_text("douze\nquatre cents\n")
    hyp = tmp_path / "hyp.txt"
    code, out, err = cli(
        ["evaluate", str(numbers_model), "--src", str(tmp_path / "src.txt"), "--ref",
         str(tmp_path / "ref.txt"), "-o", str(hyp), "--lowercase"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert re.search(
        r"^BLEU = \d+\.\d\d .*nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:", out, re.M
    )
    assert re.search(
        r"^chrF = \d+\.\d\d .*nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:",
        out,
        re.M,
    )
    assert re.search(r"^BLEU lowercase = .*case:lc", out, re.M)
    assert len(hyp.read_text().split("\n")[:-1]) == 2
    # lines of one and two words: BLEU is 0 whatever they are, and the report says so, once
    assert out.count("note: BLEU is 0 whatever the words: no hypothesis has 4 tokens") == 1


def test_bleu_says_why_it_is_0_where_no_hypothesis_has_four_tokens():
    from transformer.inference import score_translations

    right = ["un", "deux trois", "quatre cinq six"]  # every hypothesis right, none of 4 tokens
    bleu, chrf = score_translations(right, right)
    assert bleu.score == 0.0 and chrf.score == pytest.approx(100.0)
    assert "no hypothesis has 4 tokens or more" in bleu.note and chrf.note == ""
    wrong = ["un deux trois quatre", "x"]  # one of 4 tokens: BLEU above 0, nothing to say
    bleu, _ = score_translations(wrong, ["un deux trois cinq", "x"])
    assert bleu.score > 0 and bleu.note == ""
    bleu, _ = score_translations(["a b c d"], ["w x y z"])  # 4 tokens, none right: a true 0
    assert bleu.score == 0.0 and bleu.note == ""


def test_evaluate_scores_a_source_with_several_translations_against_all_of_them(
    numbers_model, tmp_path, capsys
):
    # "twelve" twice with two references: scored per line and, once, against both.
    (tmp_path / "src.txt").write_text("twelve\nfour hundred\ntwelve\n")
    (tmp_path / "ref.txt").write_text("douze\nquatre cents\nune douzaine\n")
    hyp = tmp_path / "hyp.txt"
    code, out, err = cli(
        ["evaluate", str(numbers_model), "--src", str(tmp_path / "src.txt"), "--ref",
         str(tmp_path / "ref.txt"), "-o", str(hyp)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    lines = hyp.read_text().splitlines()
    assert len(lines) == 3 and lines[0] == lines[2]  # one hypothesis per line, the same twice
    assert "one reference per line (3 lines):" in out
    assert "all references of each distinct source (2 sources):" in out
    single, multi = (float(m) for m in re.findall(r"^  BLEU = (\d+\.\d\d)", out, re.M))
    assert re.search(r"^  BLEU = .*nrefs:var\|", out, re.M)  # sacreBLEU's multi-reference mark
    expected = BLEU().corpus_score(lines[:2], [["douze", "quatre cents"], ["une douzaine", None]])
    assert multi == pytest.approx(expected.score, abs=0.005)
    assert single == pytest.approx(BLEU().corpus_score(lines, [["douze", "quatre cents",
                                   "une douzaine"]]).score, abs=0.005)  # fmt: skip


def test_evaluate_defaults_to_the_runs_test_split(numbers_model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the hypotheses go to the current folder, not the model's
    code, out, _ = cli(["evaluate", str(numbers_model), "--beam_size", "1"], capsys)
    assert code == 0 and "BLEU = " in out
    assert len((tmp_path / "model.test.hyp").read_text().split("\n")[:-1]) == 30
    assert not (numbers_model / "test.hyp").exists()


def test_evaluate_mismatched_files_is_an_error(numbers_model, tmp_path, capsys):
    (tmp_path / "src.txt").write_text("a\nb\n")
    (tmp_path / "ref.txt").write_text("a\n")
    code, _, err = cli(
        [
            "evaluate",
            str(numbers_model),
            "--src",
            str(tmp_path / "src.txt"),
            "--ref",
            str(tmp_path / "ref.txt"),
        ],
        capsys,
    )
    assert code == 2 and "src.txt has 2 lines" in err and "ref.txt has 1" in err


def test_average_is_the_mean_of_the_last_checkpoints(numbers_model, capsys):
    folders = step_checkpoints(numbers_model / "checkpoints")[-2:]
    code, out, _ = cli(["average", str(numbers_model), "--last", "2"], capsys)
    assert code == 0 and "average_last2" in out
    averaged = load_file(str(numbers_model / "checkpoints/average_last2/model.safetensors"))
    a, b = (load_file(str(f / "model.safetensors")) for f in folders)
    for name in averaged:
        torch.testing.assert_close(averaged[name], (a[name] + b[name]) / 2)
    # It is a loadable checkpoint that translates.
    loaded = load_checkpoint(numbers_model / "checkpoints/average_last2")
    assert loaded.model.config == load_checkpoint(numbers_model).model.config
    code, _, err = cli(["average", str(numbers_model), "--last", "99"], capsys)
    assert code == 2 and "--last 99: give 1 to " in err
    code, _, err = cli(["average", str(numbers_model), "--last", "0"], capsys)
    assert code == 2 and "--last 0: give 1 to " in err


def test_average_refuses_damaged_weights_and_never_replaces_a_users_files(
    numbers_model, tmp_path, capsys
):
    run = tmp_path / "run"
    shutil.copytree(numbers_model, run)
    checkpoints = run / "checkpoints"
    for earlier in checkpoints.glob("average_last*"):  # another test's
        shutil.rmtree(earlier)
    # a tensor of shape (1,) in the newest but one: it was broadcast into the mean, exit 0
    weights = step_checkpoints(checkpoints)[-2] / "model.safetensors"
    state = load_file(str(weights))
    name = next(n for n, t in state.items() if t.dim() == 1 and t.numel() > 1)
    save_file({**state, name: state[name][:1].clone()}, str(weights), {"format": "pt"})
    code, _, err = cli(["average", str(run), "--last", "2"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert str(weights) in err and f"{name} has shape (1,)" in err
    assert not (checkpoints / "average_last2").exists()
    # a folder of the user's where the average would go: refused, every file kept
    mine = checkpoints / "average_last1"
    mine.mkdir()
    (mine / "notes.md").write_text("mine")
    code, _, err = cli(["average", str(run), "--last", "1"], capsys)
    assert code == 2 and "notes.md" in err and (mine / "notes.md").read_text() == "mine"
    (mine / "notes.md").unlink()
    (checkpoints / "average_last1.txt").write_text("x")
    os.symlink(checkpoints / "average_last1.txt", checkpoints / "average_last3")
    code, _, err = cli(["average", str(run), "--last", "3"], capsys)
    assert code == 2 and "not a folder average made" in err
    # an earlier average (an empty folder, too) is replaced
    for _ in range(2):
        code, out, err = cli(["average", str(run), "--last", "1"], capsys)
        assert code == 0 and "average_last1" in out, err


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_short_budget(tmp_path, capsys):
    result = run_demo(
        tmp_path / "demo",
        progress=False,
        overrides={
            "train": {"max_steps": 20, "validate_every": 10, "save_every": 10},
            "data": {"numbers_train": 2000},
        },
    )
    out = capsys.readouterr().out
    assert [row.group for row in result.exact] == [
        "1 digit", "2 digits", "3 digits", "4-6 digits", "all"
    ]  # fmt: skip
    assert [row.total for row in result.exact] == [10, 90, 112, 788, 1000]
    assert sum(row.correct for row in result.exact[:-1]) == result.exact[-1].correct
    assert "Exact match on the 1000 test numbers (numbers of 3+ digits are held out" in out
    assert f"exact match all        {100 * result.accuracy:6.2f}%" in out
    assert "  four hundred and twelve thousand and eighty\n    -> " in out
    assert (tmp_path / "demo" / "checkpoints" / "index.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "tatoeba").is_dir(),
                    reason=f"the Tatoeba pairs are not in {SHARED_DATA}/tatoeba")  # fmt: skip
def test_the_french_demo_trains_and_scores_against_all_references(tmp_path, capsys):
    # a few steps of a tiny model: what is checked is the path, not the translations
    result = run_demo(
        tmp_path / "fr-en", progress=False, corpus="tatoeba-fr-en",
        overrides={
            "model": {"preset": "tiny"}, "data": {"data_dir": str(SHARED_DATA),
            "vocab_size": 500, "tokenizer_sample": 5000},
            "train": {"max_steps": 6, "validate_every": 6, "save_every": 6, "warmup_steps": 2,
                      "bleu_sentences": 10},
            "decode": {"beam_size": 1, "max_len_b": 5},
        },
    )  # fmt: skip
    out = capsys.readouterr().out
    assert result.exact is None and result.bleu is not None
    multi, single = result.bleu
    assert "nrefs:var" in multi.signature and "nrefs:1" in single.signature
    assert "  Je suis étudiant.\n    -> " in out
    assert re.search(r"On the 2,\d\d\d test sentences, none of them trained on:", out)
    assert (tmp_path / "fr-en" / "checkpoints" / "index.json").exists()


def test_explain_command_prints_the_walkthrough(capsys):
    code, out, _ = cli(["explain", "--topic", "attention"], capsys)
    assert code == 0
    assert "0.8446" in out and "1.2669" in out  # our value, and the notes' slip it points out
    assert "== attention" in out and "== masks" not in out
    code, out, _ = cli(["explain"], capsys)
    assert all(
        f"== {topic}" in out
        for topic in ("attention", "scaling", "layernorm", "positional", "masks")
    )
    assert "\x1b[" not in out  # no colour codes when not on a terminal


@pytest.mark.slow
def test_attention_command_writes_figures_and_report(numbers_model, tmp_path, capsys):
    out_dir = tmp_path / "att"
    code, out, err = cli(
        [
            "attention",
            str(numbers_model),
            "seven hundred and twelve",
            "--out",
            str(out_dir),
            "--layer",
            "2",
            "--head",
            "1",
            "--html",
        ],
        capsys,
    )
    assert code == 0, err
    names = sorted(p.stem for p in out_dir.glob("*.png"))
    assert names == [  # layers and heads counted from 1, as everywhere a person reads them
        "cross_layer2_head1",
        "decoder_self_layer2_head1",
        "encoder_self_layer2_head1",
        "pe_dot_product",
        "pe_heatmap",
    ]
    assert len(list(out_dir.glob("*.svg"))) == 5
    html = (out_dir / "report.html").read_text()
    assert "seven hundred and twelve" in html and "data:image/png;base64," in html
    code, _, err = cli(
        ["attention", str(numbers_model), "twelve", "--out", str(out_dir), "--layer", "7"], capsys
    )
    assert code == 2 and "layer 7 is out of range" in err and err.count("\n") == 1


def test_the_model_directorys_own_config_gives_the_search_and_never_the_sizes(
    numbers_model, tmp_path, capsys, monkeypatch
):
    """Editing a model directory's config.json changes the search its commands run (its decode
    section, over every checkpoint's copy); an edited model size is not used, and one line
    says so. A checkpoint folder named on its own keeps its own config."""
    model = tmp_path / "M"
    shutil.copytree(numbers_model, model, ignore=shutil.ignore_patterns("data"))
    before = load_torch_engine(model)
    config = json.loads((model / "config.json").read_text())
    config["decode"].update(nbest=2, beam_size=3, max_len_b=7)
    config["model"]["d_model"] = 2 * config["model"]["d_model"]
    (model / "config.json").write_text(json.dumps(config))

    code, out, err = cli(["translate", str(model)], capsys, "twelve\neighty\n", monkeypatch)
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "1"], out  # 2-best
    warning = [line for line in err.splitlines() if line]
    assert len(warning) == 1 and "model.d_model" in warning[0], err
    assert str(model / "config.json") in warning[0] and "not used" in warning[0], err

    engine = load_torch_engine(model)
    assert (engine.decode.beam_size, engine.decode.nbest, engine.decode.max_len_b) == (3, 2, 7)
    assert engine.model.config.d_model == before.model.config.d_model  # the weights' own
    assert engine.decode != before.decode
    alone = load_torch_engine(engine.path)  # the checkpoint folder: its own decode
    assert alone.decode == before.decode
    code, out, err = cli(["average", str(model), "--last", "2"], capsys)  # carries the search
    assert code == 0, err
    averaged = json.loads((model / "checkpoints" / "average_last2" / "config.json").read_text())
    assert (averaged["decode"]["beam_size"], averaged["decode"]["nbest"]) == (3, 2)
    assert averaged["model"] == json.loads((engine.path / "config.json").read_text())["model"]
    # a directory's config without those sections: the checkpoint's, without a word
    del config["decode"], config["model"]
    (model / "config.json").write_text(json.dumps(config))
    code, out, err = cli(["translate", str(model)], capsys, "twelve\neighty\n", monkeypatch)
    assert (code, err, len(out.splitlines())) == (0, "", 2), (out, err)
    assert load_torch_engine(model).decode == before.decode


def test_a_damaged_model_directory_config_is_one_line_naming_it(
    numbers_model, tmp_path, capsys, monkeypatch
):
    model = tmp_path / "M"
    shutil.copytree(numbers_model, model, ignore=shutil.ignore_patterns("data"))
    (model / "config.json").write_text('{"decode": {"beam_size": -3}}')
    code, out, err = cli(["translate", str(model)], capsys, "twelve\n", monkeypatch)
    assert code == 2 and out == "", (out, err)
    assert len(err.strip().splitlines()) == 1 and "config.json" in err and "beam_size" in err, err
