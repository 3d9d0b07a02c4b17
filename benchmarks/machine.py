"""What machine a benchmark ran on, for its report's header; and a fresh process to measure in.

The same model name can hide CPU generations that differ in how their vector units run the
matrix products (an "AMD EPYC" of family 25, Zen 4, or of family 26, Zen 5), and the ratios
between engines move with them: so the family and model numbers are written too.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name with its family and model numbers (Linux), e.g. "AMD EPYC (family
    26, model 2)", else what ``platform`` knows."""
    info = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in info.read_text().splitlines() if info.exists() else []:
        key, _, value = line.partition(":")
        if not key.strip():
            break  # the first processor's block only
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def child_json(arguments: list[str], src: Path, what: str, env: dict | None = None) -> dict:
    """Runs ``python ARGUMENTS`` in a fresh process whose ``transformer`` is the one under
    ``src`` (a checkout's ``src`` folder), with ``env`` added to this environment, and returns
    the JSON of its output's last line; a failure ends the benchmark with ``what`` and the end
    of the child's stderr."""
    done = subprocess.run(
        [sys.executable, *arguments], capture_output=True, text=True, cwd=Path(__file__).parent,
        env={**os.environ, "PYTHONPATH": str(src), **(env or {})},
    )  # fmt: skip
    if done.returncode:
        sys.exit(f"{what}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def publish(lines: list[str], markdown: Path | None) -> None:
    """Prints a report's lines, and writes them to ``markdown`` where one is given."""
    report = "\n".join(lines) + "\n"
    print(report)
    if markdown:
        markdown.write_text(report, encoding="utf-8")
