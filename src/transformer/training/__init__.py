"""Training: the model directory and its checkpoints, data preparation, the loss, the
optimizer and learning-rate schedule, validation, and the resumable loop itself."""

from .average import average_last
from .checkpoint import load_checkpoint, save_checkpoint
from .loop import TrainResult, train
from .loss import label_smoothed_nll
from .optimizer import make_optimizer
from .rundir import RunDir
from .schedule import inverse_sqrt_lr

__all__ = [
    "RunDir", "TrainResult", "average_last", "inverse_sqrt_lr", "label_smoothed_nll",
    "load_checkpoint", "make_optimizer", "save_checkpoint", "train",
]  # fmt: skip
