"""Training: data preparation, the loss, the optimizer and learning-rate schedule, validation,
and the resumable loop itself. (The run's folder, its checkpoints and their averaging are the
model directory's, ``model_dir/``, which reading a model needs without the training code.)"""

from .loop import TrainResult, train
from .loss import label_smoothed_nll
from .optimizer import make_optimizer
from .schedule import inverse_sqrt_lr

__all__ = ["TrainResult", "inverse_sqrt_lr", "label_smoothed_nll", "make_optimizer", "train"]
