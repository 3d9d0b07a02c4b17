#!/usr/bin/env bash
# Fetches, on a machine with PyPI, the pure-Python packages (and pydantic-core for Python 3.12)
# that the GPU machine's image lacks, into .whl/ (git-ignored), for benchmarks/gpu_one_call.sh.
# The versions are those of this project's .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
mkdir -p .whl
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
NAMES="num2words jsonargparse docstring_parser fastapi starlette pydantic
       pydantic_core uvicorn annotated-types typing-inspection annotated-doc typing_extensions
       opentelemetry-api"
SPECS=$(for n in $NAMES; do echo "$n==$(version "$n")"; done)
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl $SPECS
"$PY" -m pip wheel -q --no-deps -w .whl "docopt==$(version docopt)"  # an sdist only
ls .whl
