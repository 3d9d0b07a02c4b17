"""Training: the run's folder and its lock, data preparation, the loss, the optimizer and
learning-rate schedule, validation, resuming and pruning checkpoints, and the resumable loop
itself. (Reading and writing a model directory is ``model_dir.py``'s, outside training.)"""

from .average import average_last
from .loop import TrainResult, train
from .loss import label_smoothed_nll
from .optimizer import make_optimizer
from .rundir import RunDir
from .schedule import inverse_sqrt_lr

__all__ = [
    "RunDir", "TrainResult", "average_last", "inverse_sqrt_lr", "label_smoothed_nll",
    "make_optimizer", "train",
]  # fmt: skip
