"""What machine a benchmark ran on, for its report's header.

The same model name can hide CPU generations that differ in how their vector units run the
matrix products (an "AMD EPYC" of family 25, Zen 4, or of family 26, Zen 5), and the ratios
between engines move with them: so the family and model numbers are written too.
"""

from __future__ import annotations

import platform
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
