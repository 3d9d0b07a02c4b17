"""The tree stays readable as the architecture: no import cycles, no file over ~400 lines, every
subpackage names its public API, and the README's Python examples run."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "transformer"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path) -> set[str]:
    """The package's own modules that ``name`` imports anywhere (lazy imports included), with the
    packages whose ``__init__`` an import runs first (not the module's own packages)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names = (
                [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            )
            found |= {n for n in names if n and n in MODULES}
    edges = set()
    for target in found:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in MODULES and not name.startswith(prefix) and prefix != "transformer":
                edges.add(prefix)
    return edges


def test_there_are_no_import_cycles():
    graph = {name: imports_of(name, path) for name, path in MODULES.items()}
    assert graph["transformer.cli.main"]  # the walk finds imports at all
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_a_cycle_would_be_found(tmp_path, monkeypatch):
    # The walk sees lazy imports inside functions too: decoding.py once imported beam.py
    # inside a function while beam.py imported decoding.py at the top.
    source = "def f():\n    from .beam import beam_search\n"
    path = tmp_path / "search.py"
    path.write_text(source)
    monkeypatch.setitem(MODULES, "transformer.inference.search_copy", path)
    edges = imports_of("transformer.inference.search_copy", path)
    assert "transformer.inference.beam" in edges


def test_no_source_file_is_over_400_lines():
    sizes = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


@pytest.mark.parametrize(
    "package",
    [
        "config",
        "model",
        "data",
        "training",
        "inference",
        "inspect",
        "serve",
        "export",
        "hub",
        "cli",
    ],
)
def test_each_subpackage_names_its_public_api(package):
    module = importlib.import_module(f"transformer.{package}")
    assert module.__doc__ and module.__all__
    for name in module.__all__:
        assert getattr(module, name) is not None, name


SERVER = ("transformer.serve.app", "transformer.serve.server", "transformer.serve.batcher",
          "transformer.serve.middleware", "transformer.serve.schema")  # fmt: skip


@pytest.mark.slow
def test_only_the_command_line_imports_the_server():
    # The serve extra (fastapi, uvicorn) stays optional: no other module needs it, and the
    # service's config (serve/config.py, which the command line reads) needs neither.
    importers = {
        name
        for name, path in MODULES.items()
        if not name.startswith("transformer.serve")
        and any(edge.startswith(SERVER) for edge in imports_of(name, path))
    }
    assert importers == {"transformer.cli.translating"}
    script = (
        "import sys; import transformer.serve.config; import transformer.cli.main; "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_top_level_keeps_its_names():
    from transformer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig, Transformer

    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert Transformer(ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=10))
