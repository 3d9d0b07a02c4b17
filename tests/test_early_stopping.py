"""Early stopping (``train.patience``): a run whose validation stops improving stops after
``patience`` validations without a better score, says so in its log and metrics, keeps ``best``
at the best validation, and stays stopped when resumed."""

import json

import pytest

from transformer.config import TrainConfig
from transformer.errors import BadValue
from transformer.model_dir.runs import read_metrics
from transformer.training.loop import train

from helpers import TINY_NUMBERS, train_config

# A learning rate far too high for the tiny model: the validation loss falls for some steps,
# then stalls and wobbles (measured: best at step 35, then two worse validations).
ARGS = [*TINY_NUMBERS, "--max_steps", "300", "--validate_every", "5", "--save_every", "1000",
        "--bleu_sentences", "0", "--best_metric", "loss", "--peak_lr", "0.05",
        "--warmup_steps", "1", "--patience", "2", "--runtime.threads", "1"]  # fmt: skip


@pytest.mark.slow
def test_a_run_that_stops_improving_stops_early_and_keeps_the_best(tmp_path, capsys):
    out = tmp_path / "run"
    result = train(train_config(ARGS), out, progress=False)
    assert result.stopped_early and result.step < 300
    rows = read_metrics(out)
    validations = [row for row in rows if "valid_nll" in row]
    nll = [row["valid_nll"] for row in validations]
    best = min(range(len(nll)), key=lambda i: (nll[i], -i))  # the latest of the best
    # It stopped at the second validation in a row that did not beat the best before it.
    assert len(nll) - 1 - best == 2 and validations[-1]["step"] == result.step
    assert all(nll[i] >= min(nll[:i]) for i in range(len(nll) - 2, len(nll)))
    stop = [row for row in rows if row.get("event") == "early_stop"]
    assert stop == [{**stop[0], "step": result.step, "patience": 2, "best_metric": "loss"}]
    assert "stopping early (train.patience)" in capsys.readouterr().out
    index = json.loads((out / "checkpoints" / "index.json").read_text())
    assert index["best"] == f"step_{validations[best]['step']:08d}"
    assert (out / "checkpoints" / index["best"]).is_dir()
    assert index["last"] == f"step_{result.step:08d}"
    # Resumed, it has nothing left to do.
    again = train(train_config(ARGS), out, resume=True, progress=False)
    assert again.stopped_early and again.step == result.step


def test_patience_must_not_be_negative():
    assert TrainConfig().patience == 0  # off by default
    with pytest.raises(BadValue, match="patience"):
        TrainConfig(patience=-1)
