"""Which ``config.json`` a command reads, when a model directory holds several.

A model directory has its own ``config.json`` (the run's settings) and a copy in every
checkpoint (what that checkpoint was saved with). They are the same until someone edits the
directory's, or a resumed training changes its ``decode`` section (which may change on resume:
training/prepare.py). So the two parts are read from where they belong:

- ``model``: the checkpoint's. The weights have its sizes; the directory's may not differ, and
  where it does (an edited ``model.d_model``) one line on stderr says which keys are not used.
- ``decode`` (the search a command runs by default: beam size, lengths, penalties, ...): the
  directory's, so that editing it changes what ``translate``, ``evaluate``, ``serve`` and the
  exports do with any of its checkpoints, as a user who edits it expects.

A checkpoint folder named on its own (``translate M/checkpoints/step_00001000``) uses its own
``config.json`` for both, as does a directory without one of its own.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path

from ..config import RunConfig, build_config
from ..reading import read_json
from .layout import CONFIG

log = logging.getLogger(__name__)


def directory_settings(model_dir: Path, folder: Path, saved: RunConfig) -> RunConfig:
    """The config to use with checkpoint ``folder`` (whose own is ``saved``) reached through
    ``model_dir``: the checkpoint's ``model``, ``model_dir``'s own ``decode`` (where it has that
    section). A damaged ``model_dir/config.json`` is an error that names it, as every file read
    from outside."""
    path = model_dir / CONFIG
    if folder == model_dir or not (path.exists() or path.is_symlink()):
        return saved
    raw = read_json(path)
    own = build_config(raw, str(path))  # every section checked, as the checkpoint's is
    theirs, ours = asdict(own.model), asdict(saved.model)
    differ = [key for key in ours if theirs[key] != ours[key]] if "model" in raw else []
    if differ:
        first, n = differ[0], len(differ) - 1
        more = f" (and {n} more model key{'s' if n > 1 else ''} of it)" if n else ""
        log.warning(
            f"{path}: model.{first} {theirs[first]!r} is not used{more}: the weights of "
            f"{folder} have {ours[first]!r}, from its own {CONFIG}"
        )
    return replace(saved, decode=own.decode) if "decode" in raw else saved
