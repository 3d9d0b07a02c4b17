"""Where a RunConfig comes from: YAML files, the configs shipped with the package, overrides.

Precedence, lowest first: the dataclass defaults, the ``model.preset``, the YAML file, the
overrides (the command line's ``--section.key value``), saved JSON; ``build_config`` checks the
result: an unknown section or key is an error that names it. A file of one section's keys
(``--decode FILE``, ``--runtime FILE``, ...) gets the same checks (``read_section``), and a
section that is not a mapping is an error naming the section and the file.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from .. import reading
from ..errors import BadValue, UserError
from .model import ModelConfig
from .run import SECTIONS, RunConfig

DEFAULT_PRESET = "base"


def _section_values(values: dict, origin: str) -> dict[str, dict[str, object]]:
    """{section: {key: value}} checked against the dataclasses' fields (``model.preset`` too)."""
    sections: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
    for section, body in (values or {}).items():
        if section not in SECTIONS:
            raise BadValue(f"{origin}: unknown config section {section!r}; use {list(SECTIONS)}")
        if not isinstance(body, dict):
            raise BadValue(f"{origin}: section {section!r} must be a mapping of key: value")
        names = {f.name for f in fields(SECTIONS[section])} | (
            {"preset"} if section == "model" else set()
        )
        for key, value in body.items():
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f"; did you mean {section}.{close[0]}?" if close else ""
                raise BadValue(f"{origin}: unknown config key {section}.{key}{hint}")
            sections[section][key] = value
    return sections


def build_config(values: dict, origin: str = "config", given: dict | None = None) -> RunConfig:
    """A RunConfig from {section: {key: value}}; ``model.preset`` (default ``base``) picks the
    ModelConfig the model keys change. Unknown sections and keys are errors that name them.
    ``given``: the {section: {key: value}} among ``values`` that the command line gave; a bad
    value is named by the option it came from, not by ``origin`` (the file it was not in)."""
    sections = _section_values(values, origin)
    preset = sections["model"].pop("preset", DEFAULT_PRESET)
    try:
        built = {
            name: replace(
                ModelConfig.preset(str(preset)) if name == "model" else cls(), **sections[name]
            )
            for name, cls in SECTIONS.items()
        }
    except BadValue as error:
        raise BadValue(f"{_options_named(str(error), given or {}) or origin}: {error}") from None
    return RunConfig(**built)


def _options_named(message: str, given: dict) -> str:
    """The command-line options among the fields a check's message names ("ModelConfig.d_model
    (128) must be divisible by ModelConfig.n_heads (3)": ``--model.n_heads 3`` if given)."""
    return ", ".join(
        f"--{name}.{key} {value}"
        for name, cls in SECTIONS.items()
        for key, value in (given.get(name) or {}).items()
        if re.search(rf"\b{cls.__name__}\.{key}\b", message)
    )


def sectioned(keys: dict[str, object]) -> dict[str, dict[str, object]]:
    """{section: {key: value}} from keys named as on the command line: ``train.max_steps``, or
    without the section (``max_steps``, ``preset``), every key being unique across sections.

    ``load_config(None, sectioned({"preset": "tiny", "max_steps": 20}))`` is the config of
    ``transformer train --preset tiny --max_steps 20``. An unknown key is an error naming it."""
    sections = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}
    sections["preset"] = "model"
    values: dict[str, dict[str, object]] = {}
    for key, value in keys.items():
        section, dot, name = key.rpartition(".")
        if not dot:
            if key not in sections:
                close = difflib.get_close_matches(key, sections, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise BadValue(f"unknown config key {key}{hint}")
            section = sections[key]
        values.setdefault(section, {})[name] = value
    return values


def merge(values: dict, overrides: dict) -> dict:
    """``values`` with the {section: {key: value}} of ``overrides`` on top."""
    merged = {section: dict(body or {}) for section, body in (values or {}).items()}
    for section, body in overrides.items():
        merged.setdefault(section, {}).update(body)
    return merged


CONFIGS_DIR = Path(__file__).parent / "builtin"  # the built-in configs (package data)


def builtin_configs() -> list[str]:
    """The names of the configs shipped with the package (``configs/NAME.yaml``)."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def read_yaml(path: str) -> dict:
    """The {section: {key: value}} of a YAML file, or of a built-in config given by name."""
    file = Path(path)
    if not file.exists() and (CONFIGS_DIR / f"{path}.yaml").exists():
        file = CONFIGS_DIR / f"{path}.yaml"
    values = _load_yaml(file, path)
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a mapping of sections {list(SECTIONS)}")
    for section, body in values.items():
        if body is not None and not isinstance(body, dict):
            raise BadValue(f"{path}: section {section!r} must be a mapping of key: value, got "
                           f"{type(body).__name__} {body!r}")  # fmt: skip
    return values


def read_section(path: str, section: str, cls: type) -> dict[str, Any]:
    """The {key: value} of a YAML file holding one section's keys (``--decode FILE``), checked
    as ``--config`` is: a mapping, known keys, values the section accepts.

    Args:
        section: its name, for messages; ``model`` also takes ``preset``.
        cls: its dataclass, built once here to check the values.
    """
    values = _load_yaml(Path(path), path) or {}
    if not isinstance(values, dict):
        raise BadValue(f"{path}: expected a mapping of {section} keys (key: value), got "
                       f"{type(values).__name__} {values!r}")  # fmt: skip
    names = {f.name for f in fields(cls)} | ({"preset"} if section == "model" else set())
    for key in values:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise BadValue(f"{path}: unknown {section} key {key!r}{hint}")
    rest = {k: v for k, v in values.items() if k != "preset"}
    try:
        if section == "model":
            replace(ModelConfig.preset(str(values.get("preset", DEFAULT_PRESET))), **rest)
        else:
            cls(**rest)
    except BadValue as error:
        raise BadValue(f"{path}: {error}") from None
    return values


def _load_yaml(file: Path, name: str) -> Any:
    """A YAML file's content (``reading.read_yaml``: bounded in size and depth); a missing,
    unreadable or invalid file is a one-line error."""
    if not file.exists():
        raise UserError(
            f"config file not found: {name} (built-in configs: {', '.join(builtin_configs())})"
        )
    return reading.read_yaml(file, name) or {}


def load_config(path: str | None = None, overrides: dict | None = None) -> RunConfig:
    """A RunConfig from a YAML file (or built-in name) with {section: {key: value}} overrides.

    Args:
        path: a YAML file ({section: {key: value}}, all optional), a built-in config's name, or
            None for the defaults.
        overrides: applied on top, e.g. ``{"train": {"max_steps": 10}}``.
    """
    values = read_yaml(path) if path is not None else {}
    return build_config(merge(values, overrides or {}), path or "config", overrides)
