"""The typed configuration: the single source of truth for every size and switch.

Frozen dataclasses, one per concern and one file each: ``ModelConfig`` (model.py), ``DataConfig``
(data.py), ``TrainConfig`` (train.py), ``DecodeConfig`` (decode.py) and ``RuntimeConfig``
(runtime.py), together a ``RunConfig`` (run.py) that is saved inside every checkpoint. Every
field is checked where it is set (checks.py). YAML files and ``--section.key value`` options only
fill them (files.py); modules receive these objects or plain arguments, never dicts. The
service's own config, ``ServeConfig``, lives with the service (``serve/config.py``).
"""

from .data import TOKENIZER_KINDS, DataConfig
from .decode import DecodeConfig
from .files import build_config, builtin_configs, load_config, merge, read_yaml, sectioned
from .model import MODEL_PRESETS, POSITIONAL_KINDS, RNN_KEYS, ModelConfig
from .run import SECTIONS, RunConfig
from .runtime import PRECISIONS, RuntimeConfig
from .train import TrainConfig

__all__ = [
    "MODEL_PRESETS", "POSITIONAL_KINDS", "PRECISIONS", "RNN_KEYS", "SECTIONS", "TOKENIZER_KINDS",
    "DataConfig", "DecodeConfig", "ModelConfig", "RunConfig", "RuntimeConfig", "TrainConfig",
    "build_config", "builtin_configs", "load_config", "merge", "read_yaml", "sectioned",
]  # fmt: skip
