"""Weights that are finite but huge (every 7th 3e38: they pass the load's finiteness check)
overflow in the forward pass. Every search (greedy, beam, sampling) and ``score`` refuses the
NaN and +inf scores in one line naming the model's folder (exit 2 on the command line, a JSON
422 over HTTP). Without the check, on this model, greedy and beam search raised an IndexError,
sampling a RuntimeError in ``torch.multinomial`` (the server: 500), and ``score`` gave null
scores with exit 0 (the server: 200).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from transformer.config import RuntimeConfig
from transformer.inference.engine import load_torch_engine

from helpers import assert_error, cli_main, client_for, one_line_error, snapshot

pytestmark = pytest.mark.slow  # the tests' trained model
NOT_FINITE = "the model's scores are not finite"
SEARCHES = {
    "greedy": [],
    "beam": ["--decode.beam_size", "4"],
    "sampling": ["--decode.sampling"],
}


@pytest.fixture(scope="module")
def huge(numbers_model, tmp_path_factory) -> Path:
    """A copy of the tests' model whose every checkpoint has every 7th weight set to 3e38."""
    model = Path(shutil.copytree(numbers_model, tmp_path_factory.mktemp("huge") / "M",
                                 ignore=shutil.ignore_patterns(".lock")))  # fmt: skip
    for weights in (model / "checkpoints").glob("step_*/model.safetensors"):
        state = load_file(weights)
        for tensor in state.values():
            tensor.view(-1)[::7] = 3e38
        save_file(state, weights, metadata={"format": "pt"})
    return model


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "in.txt").write_text("twelve\nforty two\n")
    (tmp_path / "ref.txt").write_text("douze\nquarante-deux\n")
    return tmp_path


@pytest.mark.parametrize("search", list(SEARCHES))
def test_every_search_refuses_non_finite_scores_in_one_line(huge, home, search):
    before = snapshot(home), snapshot(huge)
    result = cli_main("translate", str(huge), "-i", str(home / "in.txt"), *SEARCHES[search])
    one_line_error(result, 2, NOT_FINITE, str(huge), "overflowed", "largest weight is 3e+38")
    assert result.stdout == ""  # not "⁇ ⁇ ⁇"
    assert (snapshot(home), snapshot(huge)) == before


def test_score_refuses_non_finite_scores_in_one_line(huge, home):
    before = snapshot(home), snapshot(huge)
    args = ["score", str(huge), "--src", str(home / "in.txt"), "--ref", str(home / "ref.txt")]
    one_line_error(cli_main(*args), 2, NOT_FINITE, "while scoring", str(huge))
    assert (snapshot(home), snapshot(huge)) == before


def test_the_same_model_with_its_own_weights_translates(numbers_model, home):
    """The refusal is the weights' doing: the model they were copied from translates."""
    for search in SEARCHES.values():
        result = cli_main("translate", str(numbers_model), "-i", str(home / "in.txt"), *search)
        assert result.code == 0 and len(result.stdout.splitlines()) == 2, result


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/translate", {"sentences": ["twelve"]}),
        ("/translate", {"sentences": ["twelve"], "beam_size": 4, "nbest": 2}),
        ("/translate", {"sentences": ["twelve"], "sampling": True}),
        ("/score", {"sources": ["twelve"], "targets": ["douze"]}),
    ],
)
def test_the_server_answers_non_finite_scores_with_a_422(huge, path, body):
    pytest.importorskip("fastapi")
    engine = load_torch_engine(huge, runtime=RuntimeConfig(device="cpu"))
    with client_for(engine) as client:
        response = client.post(path, json=body)
    assert_error(response, 422, "invalid_request", NOT_FINITE)
