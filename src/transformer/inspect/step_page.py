"""The step-through view as a page: one offline HTML file, or the page ``transformer serve``
shows, from the same template, style and scripts (``page/``).

The file holds everything inline (style, scripts, the data as JSON) and fetches nothing; the
served page links the same style and scripts and fetches the data from POST /step-through.
``step_through_job`` is what ``transformer explain MODEL_DIR SENTENCE --html OUT`` does.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import DecodeConfig
from ..data.batching import encode_source
from ..errors import UserError
from ..files import check_output, write_bytes
from ..inference.engine import TorchEngine
from ..inference.search import Stopped
from ..model_dir.layout import model_dir_of
from .step_view import check_fits, step_view
from .trace import check_sentence, trace_sentence

PAGE = Path(__file__).parent / "page"
STYLE = "step.css"
SCRIPTS = ("step-core.js", "step-panels.js", "step-decoder.js", "step-beam.js", "step-main.js")


def page_html(view: dict | None, assets: str | None = None) -> str:
    """The page: with ``view`` everything inline (the offline file); without, the style and
    scripts linked from the URL prefix ``assets`` and the data fetched from the server."""
    template = (PAGE / "step.html").read_text(encoding="utf-8")
    if view is None:
        style = f'<link rel="stylesheet" href="{assets}{STYLE}">'
        scripts = "\n".join(f'<script src="{assets}{name}" defer></script>' for name in SCRIPTS)
        data = ""
    else:
        style = f"<style>\n{(PAGE / STYLE).read_text(encoding='utf-8')}</style>"
        scripts = "\n".join(
            f"<script>\n{(PAGE / name).read_text(encoding='utf-8')}</script>" for name in SCRIPTS
        )
        # "</" inside the JSON would end the script element early: JSON allows "<\/" instead.
        text = json.dumps(view, ensure_ascii=False, allow_nan=False).replace("</", "<\\/")
        data = f'<script type="application/json" id="step-data">{text}</script>'
    for mark, content in (("STYLE", style), ("DATA", data), ("SCRIPTS", scripts)):
        template = template.replace(f"<!--{mark}-->", content, 1)
    return template


def model_facts(engine: TorchEngine) -> dict:
    """The model's config, its head width and its parameter count, as the page shows them."""
    config = engine.model.config
    return {**asdict(config), "d_head": config.d_head, "parameters": engine.parameters}


def engine_view(
    engine: TorchEngine, sentence: str, decode: DecodeConfig | None = None,
    stopped: Stopped | None = None,
) -> dict:  # fmt: skip
    """The step-through data of ``sentence`` through ``engine``'s model (what serve sends);
    ``stopped(0)``: nobody waits for it any more (the search ends at its next step). A view
    that cannot fit whatever the search finds is refused before the search."""
    facts, decode = model_facts(engine), decode or engine.decode
    ids, positions = encode_source(engine.tokenizers.src.encode(sentence)), facts["max_positions"]
    check_sentence(sentence, ids, positions)  # too long for the model: said as that, first
    check_fits(len(ids), min(decode.min_len, positions - 1), facts, least=True)
    return step_view(trace_sentence(engine, sentence, decode, stopped), facts)


def check_destination(out: Path, force: bool, model_dir: str | Path) -> None:
    """Where the view of a model in ``model_dir`` may be written (the write gate's rule, before
    any work): never a folder or a special file, never inside the model or any project folder,
    and over an existing file only with ``force``, which relaxes nothing else."""
    if out.is_dir():
        raise UserError(f"--html {out} is a folder; give a file name, e.g. {out / 'step.html'}")
    reads = {"MODEL_DIR": model_dir}
    check_output(out, "--html", reads, new_only=None if force else "--force")


@dataclass
class Written:
    """What ``step_through_job`` wrote."""

    path: Path
    bytes: int
    seconds: float  # from the sentence to the file on disk (the model already loaded)
    translation: str
    truncated: list[str]


def step_through_job(
    engine: TorchEngine,
    sentence: str,
    out: str | Path,
    force: bool = False,
    decode: DecodeConfig | None = None,
) -> Written:
    """Writes the step-through view of ``sentence`` to ``out``, one self-contained HTML file,
    through a temporary file renamed into place; an existing file only with ``force``."""
    out = Path(out)
    check_destination(out, force, model_dir_of(engine.path))
    start = time.perf_counter()
    view = engine_view(engine, sentence, decode)
    html = page_html(view).encode("utf-8")
    write_bytes(out, html)
    seconds = time.perf_counter() - start
    return Written(out, len(html), seconds, view["translation"], view["truncated"])
