"""One run's whole config: the sections, saved as JSON inside every checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .data import DataConfig
from .decode import DecodeConfig
from .model import ModelConfig
from .runtime import RuntimeConfig
from .train import TrainConfig

SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig,
            "runtime": RuntimeConfig}  # fmt: skip


@dataclass(frozen=True)
class RunConfig:
    """Everything about one run; saved as JSON inside every checkpoint."""

    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    decode: DecodeConfig = DecodeConfig()
    runtime: RuntimeConfig = RuntimeConfig()

    def to_dict(self) -> dict[str, dict[str, object]]:
        return {name: asdict(getattr(self, name)) for name in SECTIONS}
