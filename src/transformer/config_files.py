"""Where a RunConfig comes from: YAML files, the configs shipped with the package, overrides.

Precedence, lowest first: the dataclass defaults, the ``model.preset``, the YAML file, the
overrides (the command line's ``--section.key value``). ``config.build_config`` checks the result.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .config import SECTIONS, RunConfig, build_config
from .errors import UserError


def merge(values: dict, overrides: dict) -> dict:
    """``values`` with the {section: {key: value}} of ``overrides`` on top."""
    merged = {section: dict(body or {}) for section, body in (values or {}).items()}
    for section, body in overrides.items():
        merged.setdefault(section, {}).update(body)
    return merged


CONFIGS_DIR = Path(__file__).parent / "configs"  # the built-in configs (package data)


def builtin_configs() -> list[str]:
    """The names of the configs shipped with the package (``configs/NAME.yaml``)."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def read_yaml(path: str) -> dict:
    """The {section: {key: value}} of a YAML file, or of a built-in config given by name."""
    file = Path(path)
    if not file.exists() and (CONFIGS_DIR / f"{path}.yaml").exists():
        file = CONFIGS_DIR / f"{path}.yaml"
    try:
        with open(file, encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise UserError(
            f"config file not found: {path} (built-in configs: {', '.join(builtin_configs())})"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {path}: {error}") from None
    except yaml.YAMLError as error:
        raise UserError(f"{path}: not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a mapping of sections {list(SECTIONS)}")
    return values


def load_config(path: str | None = None, overrides: dict | None = None) -> RunConfig:
    """A RunConfig from a YAML file (or built-in name) with {section: {key: value}} overrides.

    Args:
        path: a YAML file ({section: {key: value}}, all optional), a built-in config's name, or
            None for the defaults.
        overrides: applied on top, e.g. ``{"train": {"max_steps": 10}}``.
    """
    values = read_yaml(path) if path is not None else {}
    return build_config(merge(values, overrides or {}), path or "config")
