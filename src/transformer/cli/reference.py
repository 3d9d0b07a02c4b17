"""docs/configuration.md, generated from the typed config: every key with its type, default and
help text, section by section, exactly as ``--help`` shows them.

    python -m transformer.cli.reference docs/configuration.md

``tests/test_docs.py`` fails when the committed page differs from what this writes.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import typing
from dataclasses import MISSING, fields
from pathlib import Path

from ..files import write_text
from .options import COMMAND_SECTIONS

INTRO = """\
# Configuration

Every key of the typed config, generated from the dataclasses themselves
(`python -m transformer.cli.reference docs/configuration.md`; a test fails when this page is
stale). A key is `section.key` in every place it can be given:

- in a YAML file, `train: {max_steps: 2000}` (`transformer train --config FILE`);
- on the command line, `--train.max_steps 2000`, or `--max_steps 2000` (a key unique across
  sections may drop its section; `-` may stand for `_`; a true/false key alone means true);
- in Python, `TrainConfig(max_steps=2000)` (`transformer.config`).

Precedence, lowest first: the defaults below, the `model.preset`, the `--config` file, the
options; `--resume` starts from the run's saved config instead of `--config`. Every value is
checked where it is set (type, finiteness, range) and an unknown key is an error that names it.
The `model`, `data`, `train`, `decode` and `runtime` sections are saved in a model directory's
`config.json` and with every checkpoint; `translate`, `evaluate`, `attention` and `serve` take
`decode` (on top of the model's own) and `runtime` from the command line. A model's own `decode`
is its directory's `config.json`'s (edit it to change the search a model runs by default; a
checkpoint folder named on its own uses its copy), and its `model` section is the checkpoint's,
whose weights have those sizes: an edited size in the directory's is not used, with one line
saying so. `serve` is the service's own section, never saved.
A command offers only the keys it has a use for and refuses the others by name
(`transformer COMMAND --help` lists its own): `runtime.loss_chunk` and
`runtime.timeout_minutes` are training's; `score` searches for nothing, so it takes no search
option (`decode.length_penalty`, the batch limits and `decode.target_language` only);
`evaluate`, `compare` and `attention` use one translation's text, so no `decode.nbest` or
alignments; `attention` and `explain` translate one sentence, so no batch options.
"""

SECTION_NOTES = {
    "model": "The network's sizes and switches. `model.preset` (tiny, small, base, big) picks the "
    "starting point; the defaults below are the `base` preset's (Vaswani et al. 2017, Table 3).",
    "data": "Where the parallel text comes from and how it becomes token ids.",
    "train": "Optimisation and bookkeeping (Vaswani et al. §5.3-5.4).",
    "decode": "How translations are searched for (§6.1).",
    "runtime": "Where and how the computation runs; not part of the model.",
    "serve": "The HTTP service of `transformer serve`.",
}


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (the string literal after its line)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:], strict=False):
        is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_doc:
            docs[node.target.id] = " ".join(str(after.value.value).split())
    return docs


def type_name(annotation: object) -> str:
    """``int``, ``float``, ``str | None``, ... as the type reads in the source."""
    args = typing.get_args(annotation)
    if args:
        return " | ".join("None" if a is type(None) else a.__name__ for a in args)
    return getattr(annotation, "__name__", str(annotation))


def configuration_markdown() -> str:
    """The whole page."""
    out = [INTRO]
    for section, cls in COMMAND_SECTIONS.items():
        hints, docs = typing.get_type_hints(cls), attribute_docs(cls)
        out += [f"## `{section}`", "", SECTION_NOTES[section], ""]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"]
        if section == "model":
            out.append("| `model.preset` | str | `base` | tiny, small, base or big: the sizes the "
                       "other model keys change |")  # fmt: skip
        for f in fields(cls):
            default = f.default if f.default is not MISSING else "(required)"
            meaning = docs.get(f.name, "").replace("|", "\\|")
            out.append(f"| `{section}.{f.name}` | {type_name(hints[f.name])} | "
                       f"`{default!r}` | {meaning} |")  # fmt: skip
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m transformer.cli.reference docs/configuration.md")
    write_text(Path(sys.argv[1]), configuration_markdown())
