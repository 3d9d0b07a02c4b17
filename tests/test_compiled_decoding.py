"""Compiled decoding (``runtime.compile``, inference/compiled.py): the fixed cache it reads gives
the growing cache's outputs, the compiled step gives the eager step's, and where it cannot
compile, decoding stays eager with one line on stderr."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from transformer.config import DecodeConfig, RuntimeConfig
from transformer.errors import UserError
from transformer.inference import compiled
from transformer.inference.beam import beam_search
from transformer.inference.greedy import greedy_search
from transformer.vocab import EOS_ID, PAD_ID

from helpers import cli_main, cli_process, tiny_model, tiny_rnn

GREEDY = DecodeConfig(max_len_a=1.5, max_len_b=4)
BEAM = DecodeConfig(beam_size=3, nbest=2, max_len_a=1.5, max_len_b=4)


def sources(seed: int = 0, sentences: int = 7) -> torch.Tensor:
    """Random sources of 2 to 9 tokens, EOS last, right-padded: (B, S)."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 10, (sentences,), generator=generator)
    src = torch.full((sentences, int(lengths.max())), PAD_ID)
    for row, n in enumerate(lengths.tolist()):
        src[row, : n - 1] = torch.randint(4, 40, (n - 1,), generator=generator)
        src[row, n - 1] = EOS_ID
    return src


def outputs(model, src):
    """Greedy tokens and scores, and the beam's n-best tokens and scores."""
    greedy = [(h.tokens, h.score) for h in greedy_search(model, src, GREEDY)]
    beam = [[(h.tokens, h.score) for h in hyps] for hyps in beam_search(model, src, BEAM)]
    return greedy, beam


def assert_same(found, expected, tolerance: float) -> None:
    """The same tokens everywhere, the scores within ``tolerance``."""
    (greedy, beam), (greedy_ref, beam_ref) = found, expected
    assert [t for t, _ in greedy] == [t for t, _ in greedy_ref]
    assert [[t for t, _ in n] for n in beam] == [[t for t, _ in n] for n in beam_ref]
    scores = [s for _, s in greedy] + [s for n in beam for _, s in n]
    scores_ref = [s for _, s in greedy_ref] + [s for n in beam_ref for _, s in n]
    assert scores == pytest.approx(scores_ref, abs=tolerance)


@pytest.fixture
def uncompiled(monkeypatch):
    """``torch.compile`` as the identity: the compiled path's code (the fixed cache, the
    position as a tensor, the mask over empty slots) run eagerly, in no time."""
    monkeypatch.setattr(torch, "compile", lambda fn, **options: fn)


@pytest.fixture
def fixed_caches(monkeypatch) -> list:
    """The fixed caches the searches make from now on (one per search that takes the compiled
    step), as the arguments each was made with."""
    running = sys.modules["transformer.inference.search"]  # inference/search.py
    made, fixed_cache = [], running.fixed_cache
    monkeypatch.setattr(running, "fixed_cache", lambda *a: made.append(a) or fixed_cache(*a))
    return made


@pytest.mark.parametrize(
    "overrides",
    [{}, {"norm_first": True}, {"positional": "learned"}],
    ids=["post-norm", "pre-norm", "learned positions"],
)
def test_the_fixed_cache_decodes_as_the_growing_one(uncompiled, overrides):
    model = tiny_model(**overrides)
    src = sources()
    expected = outputs(model, src)
    assert compiled.compile_decoding(model)
    assert compiled.compiled_step(model) is not None
    # the same numbers up to the order of the sums over the cache's empty (zero) slots
    assert_same(outputs(model, src), expected, tolerance=1e-5)


def test_a_fixed_step_equals_a_growing_step_position_by_position(uncompiled):
    model = tiny_model()
    src = sources(1, 4)
    memory, src_mask = model.encode(src)
    tokens = torch.randint(4, 30, (4, 6), generator=torch.Generator().manual_seed(2))
    assert compiled.compile_decoding(model)
    step = compiled.compiled_step(model)
    growing, fixed = model.new_cache(), compiled.fixed_cache(model, 6)
    with torch.no_grad():
        for t in range(tokens.size(1)):
            new = tokens[:, t : t + 1]  # (B, 1)
            expected = model.decode_hidden(new, memory, src_mask, growing)[:, -1]  # (B, D)
            torch.testing.assert_close(step(new, memory, src_mask, fixed), expected)
    assert fixed.length == growing.length == tokens.size(1)


def test_a_search_with_alignments_runs_its_steps_uncompiled(uncompiled, fixed_caches):
    model, src = tiny_model(), sources(4)
    aligned = DecodeConfig(beam_size=3, nbest=2, max_len_a=1.5, max_len_b=4, alignment=True)
    expected = beam_search(model, src, aligned)
    assert compiled.compile_decoding(model)
    steps = fixed_caches  # the compiled step's cache, made per search
    found = beam_search(model, src, aligned)  # the compiled step returns no attention
    assert steps == []
    for hyps, hyps_ref in zip(found, expected, strict=True):
        for h, ref in zip(hyps, hyps_ref, strict=True):
            assert h.tokens == ref.tokens
            torch.testing.assert_close(h.attention, ref.attention)
    assert beam_search(model, src, BEAM) and steps  # without alignments: the compiled step


def test_one_row_throughout_decodes_eagerly_over_a_growing_cache(uncompiled, fixed_caches):
    """A batch of one sentence and one row (greedy search: a lone request, the last line of a
    file) would run the compiled step uncompiled over the fixed cache's every slot, slower than
    the eager step; it takes the eager step. Beams, or two sentences, take the compiled one."""
    model, src = tiny_model(), sources(5, 2)
    expected = outputs(model, src[:1])
    assert compiled.compile_decoding(model)
    made = fixed_caches  # the compiled step's cache, made per search
    assert [h.tokens for h in greedy_search(model, src[:1], GREEDY)] == [
        tokens for tokens, _ in expected[0]
    ]
    assert made == []
    assert greedy_search(model, src, GREEDY) and len(made) == 1  # two sentences: compiled
    assert beam_search(model, src[:1], BEAM) and len(made) == 2  # one sentence, 3 beams: compiled
    assert_same(outputs(model, src[:1]), expected, tolerance=1e-5)


def test_the_compiled_step_gives_the_eager_outputs():
    """A real ``torch.compile`` (about 30 s on the 2-core CPU): greedy search and beam search
    over sentences of several lengths, finishing at different steps (rows leave the batch)."""
    if compiled.why_not_compiled(torch.device("cpu")) is not None:
        pytest.skip(f"cannot compile here: {compiled.why_not_compiled(torch.device('cpu'))}")
    model = tiny_model()
    src = sources(3)
    expected = outputs(model, src)
    assert compiled.compile_decoding(model)
    assert_same(outputs(model, src), expected, tolerance=1e-4)


def test_without_a_compiler_decoding_stays_eager_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(compiled, "why_not_compiled", lambda device: "no C++ compiler on PATH")
    model = tiny_model()
    assert not compiled.compile_decoding(model)
    assert compiled.compiled_step(model) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["transformer: decoding runs uncompiled: no C++ compiler on PATH"]


def test_an_rnn_decodes_eagerly_with_one_line(capsys):
    model = tiny_rnn()
    assert not compiled.compile_decoding(model)
    assert compiled.compiled_step(model) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("attention model has no compiled step"), err


def test_the_ctranslate2_engine_refuses_compile(numbers_model):
    pytest.importorskip("ctranslate2")
    from transformer.inference.ctranslate2 import load_ctranslate2

    with pytest.raises(UserError, match="runtime.compile compiles the torch engine's decoding"):
        load_ctranslate2(numbers_model, runtime=RuntimeConfig(compile=True))


def test_translate_takes_compile_and_without_a_compiler_says_so(numbers_model, tmp_path):
    """``translate --runtime.compile`` in a process whose PATH has no C++ compiler: one line on
    stderr, and the same translations as without the option."""
    source = tmp_path / "in.txt"
    source.write_text("twelve\nforty-one\nthree hundred\n")
    plain = cli_main("translate", str(numbers_model), "-i", str(source))
    env = {"PATH": os.path.dirname(sys.executable)}  # the venv's python, and no g++ or c++
    script = ("import os, sys; os.environ.pop('CXX', None); os.environ['PATH'] = sys.argv[1]; "
              "from transformer.cli import main; sys.exit(main(sys.argv[2:]))")  # fmt: skip
    found = cli_process(env["PATH"], "translate", str(numbers_model), "-i", str(source),
                        "--runtime.compile", script=script)  # fmt: skip
    assert plain.code == found.code == 0, found.stderr
    assert found.stdout == plain.stdout
    assert any("decoding runs uncompiled: no C++ compiler" in line for line in found.stderr)


def test_a_server_compiles_before_it_listens(uncompiled, torch_engine, capsys):
    """``serve --runtime.compile`` translates two lines through the compiled step before it
    listens (``warm_up``); a model that decodes eagerly has nothing to warm up."""
    lines = []

    def translate(sentences):
        lines.append(sentences)
        return torch_engine.translate(sentences)

    assert not compiled.warm_up(translate, torch_engine.model) and lines == []
    assert compiled.compile_decoding(torch_engine.model)
    steps = []
    step = compiled.compiled_step(torch_engine.model)
    compiled._STEPS[torch_engine.model] = lambda *args: steps.append(1) or step(*args)
    try:
        assert compiled.warm_up(translate, torch_engine.model)
    finally:
        del compiled._STEPS[torch_engine.model]
    assert lines == [["a", "b"]] and steps
    assert "decoding is compiled at its first step" in capsys.readouterr().err


@pytest.mark.gpu
def test_the_compiled_step_gives_the_eager_outputs_on_a_gpu():
    """The same on CUDA (Triton kernels), where launching hundreds of small kernels a step is
    what compiling removes."""
    model = tiny_model().cuda()
    src = sources(4).cuda()
    expected = outputs(model, src)
    assert compiled.compile_decoding(model)
    assert_same(outputs(model, src), expected, tolerance=1e-4)
