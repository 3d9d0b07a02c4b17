"""The tree stays readable as the architecture: no import cycles, each part imports only the
floors below it, no file over ~400 lines, every subpackage names its public API, and every write
goes through the write gate."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import textwrap
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
    assert graph["transformer.cli.entry"]  # the walk finds imports at all
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


def test_no_package_name_hides_a_module_of_its_own():
    """``import transformer.inference.translate as m`` gave the function ``translate``, not the
    module, while the package exported a function of its module's name: a name a package
    exports is never the name of one of its modules (unless it is that module)."""
    hidden = []
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            continue
        package = importlib.import_module(name)
        for sub in sorted(p.stem for p in path.parent.glob("*.py") if not p.stem.startswith("__")):
            module = importlib.import_module(f"{name}.{sub}")
            if getattr(package, sub, module) is not module:
                hidden.append(f"{name}.{sub}")
    assert hidden == [], "rename the module or the name the package exports"


# Which part of the package may import which: the floors of the house, lowest first. Reading a
# model belongs to no phase (model_dir/): what reads one (inference, inspect, export, hub,
# serve) never imports training, which only the command line and the demo (which trains) run.
BASE = {"errors", "reading", "vocab", "temporaries"}
MAY_IMPORT = {
    "config": BASE,
    "device": BASE | {"config"},
    "files": BASE | {"model_dir"},  # the gate reads model_dir/layout.py: what a folder is
    "model": BASE | {"config", "device"},
    "model_dir": BASE | {"config", "files", "model"},
    "data": BASE | {"config", "device", "files", "model_dir"},
    "export": BASE | {"config", "data", "files", "model", "model_dir"},
    "inference": BASE | {"config", "data", "device", "export", "files", "model", "model_dir"},
    "inspect": BASE | {"config", "data", "files", "inference", "model", "model_dir"},
    "hub": BASE | {"config", "data", "export", "files", "model", "model_dir"},
    "serve": BASE | {"config", "inference", "inspect"},
    "training": BASE | {"config", "data", "device", "files", "inference", "model", "model_dir"},
}


def part_of(module: str) -> str:
    """``transformer.model_dir.runs`` -> ``model_dir``; ``transformer.files`` -> ``files``."""
    return module.split(".")[1] if module != "transformer" else module


def test_each_part_imports_only_the_floors_below_it():
    found = {}
    for name, path in MODULES.items():
        part = part_of(name)
        if part in MAY_IMPORT:
            for edge in imports_of(name, path):
                if part_of(edge) not in MAY_IMPORT[part] | {part}:
                    found.setdefault(name, set()).add(edge)
    assert found == {}


def test_only_the_command_line_and_the_demo_import_training():
    importers = {
        part_of(name)
        for name, path in MODULES.items()
        if part_of(name) != "training"
        and any(part_of(edge) == "training" for edge in imports_of(name, path))
    }
    assert importers == {"cli", "demo"}


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
        "import sys; import transformer.serve.config; import transformer.cli.entry; "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_top_level_keeps_its_names():
    from transformer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, ModelConfig, Transformer

    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert Transformer(ModelConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=10))
    # importing the package alone imports nothing more (the command pauses Python's cycle
    # collector while it imports torch: __main__.py), and its subpackages and names still
    # come as attributes, imported then
    script = (
        "import sys; import transformer; print('torch' in sys.modules, "
        "transformer.model.Transformer is transformer.Transformer, "
        "transformer.config.ModelConfig is transformer.ModelConfig, "
        "hasattr(transformer, 'nothing'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True", "True", "False"], done.stderr


# ---------------------------------------------------------- every write goes through the gate
# The write gate (files.py, what it puts aside, temporaries.py, and the run lock,
# model_dir/locks.py) is the only code that may write, rename or delete on disk: there the rule
# that keeps a user's files is applied (docs/reliability.md). Anywhere else these are direct
# writes. Not listed: making an empty folder (mkdir: it replaces nothing, and what is written
# into it goes through the gate), and
# libraries that write on their own into a folder the gate made for them (CTranslate2's
# spec.save into an export being built, TensorBoard's event files in a run's tensorboard/).
# Path.replace cannot be told from str.replace by its name: the package writes os.replace.
GATE = {"transformer.files", "transformer.temporaries", "transformer.model_dir.locks"}
WRITING_CALLS = {
    "os.replace", "os.rename", "os.renames", "os.remove", "os.unlink", "os.rmdir",
    "os.removedirs", "os.truncate", "os.ftruncate", "os.link", "os.symlink", "os.mkfifo",
    "os.mknod", "shutil.rmtree", "shutil.move", "shutil.copy", "shutil.copy2", "shutil.copyfile",
    "shutil.copytree", "tempfile.mkstemp", "tempfile.mkdtemp", "tempfile.TemporaryDirectory",
    "tempfile.NamedTemporaryFile", "torch.save", "numpy.save", "numpy.savez",
    "numpy.savez_compressed", "numpy.savetxt", "safetensors.torch.save_file",
    "safetensors.numpy.save_file", "urllib.request.urlretrieve",
}  # fmt: skip
WRITING_METHODS = {"write_text", "write_bytes", "unlink", "rmdir", "rename", "touch",
                   "symlink_to", "hardlink_to", "savefig", "tofile", "export_chrome_trace",
                   "save_file"}  # fmt: skip
OPENERS = {"open": 1, "io.open": 1, "os.fdopen": 1, "gzip.open": 1, "bz2.open": 1,
           "lzma.open": 1}  # the position of their mode argument  # fmt: skip
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
IN_MEMORY = {"io.BytesIO", "io.StringIO"}
# (module, call): why it writes outside the gate. Keep this short and every reason true.
OUTSIDE_THE_GATE = {
    ("transformer.inference.ctranslate2", "tempfile.TemporaryDirectory"):
        "converts a model for CTranslate2 in a private folder of the system's temporary "
        "directory, deleted when the block ends: no path a user named or owns",
    ("transformer.cli.entry", "os.open"):
        "opens /dev/null for standard output once its reader has gone (a broken pipe): no file",
}  # fmt: skip


def _dotted_names(tree: ast.AST):
    """A function giving a call's name as the module's imports spell it (``import numpy as
    np``: ``np.save`` is ``numpy.save``), or None."""
    names: dict[str, str] = {}  # local name -> what it was imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                      for a in node.names}  # fmt: skip
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}

    def dotted(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return names.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    return dotted


def direct_writes(source: str, module: str) -> list[tuple[int, str]]:
    """(line, call) of every write, rename or deletion on disk in ``source``, the calls named by
    the module's own import names (``import numpy as np``: ``np.save`` is ``numpy.save``).
    Writes into an in-memory buffer (``io.BytesIO()``, or a name bound to one) are not."""
    tree = ast.parse(source)
    dotted = _dotted_names(tree)
    buffers = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and isinstance(node.value, ast.Call) and dotted(node.value.func) in IN_MEMORY
               for target in node.targets if isinstance(target, ast.Name)}  # fmt: skip

    def in_memory(call: ast.Call) -> bool:
        values = [*call.args, *(k.value for k in call.keywords)]
        return any(
            (isinstance(v, ast.Name) and v.id in buffers)
            or (isinstance(v, ast.Call) and dotted(v.func) in IN_MEMORY)
            for v in values
        )

    def mode_writes(call: ast.Call, position: int) -> bool:
        mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
        if mode is None and len(call.args) > position:
            mode = call.args[position]
        if mode is None:
            return False  # the default: read
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            return any(c in mode.value for c in "wax+")
        return position == 1  # a mode computed at run time may write (not ``X.open(path)``)

    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or in_memory(node):
            continue
        name = dotted(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        flags = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None)
                 for arg in node.args[1:2] for n in ast.walk(arg)}  # fmt: skip
        if (
            name in WRITING_CALLS
            or (name in OPENERS and mode_writes(node, OPENERS[name]))
            or (name == "os.open" and flags & WRITE_FLAGS)
            or (name not in WRITING_CALLS | set(OPENERS) and method in WRITING_METHODS)
            or (name not in OPENERS and method == "open" and mode_writes(node, 0))
        ):
            known = name in WRITING_CALLS | set(OPENERS) | {"os.open"}
            found.append((node.lineno, node.col_offset, name if known else f".{method}"))
    return [(line, call) for line, _, call in sorted(found)]


def test_every_write_goes_through_the_gate():
    outside = {}
    for module, path in MODULES.items():
        if module not in GATE:
            for line, call in direct_writes(path.read_text(encoding="utf-8"), module):
                outside.setdefault((module, call), []).append(line)
    assert {key: lines for key, lines in outside.items() if key not in OUTSIDE_THE_GATE} == {}
    assert set(OUTSIDE_THE_GATE) <= set(outside), "an exception that no longer applies"
    assert all(len(reason) > 20 for reason in OUTSIDE_THE_GATE.values())


def test_a_direct_write_would_be_found():
    source = textwrap.dedent("""
        import io, os, shutil as sh, tempfile
        import numpy as np
        from pathlib import Path
        from safetensors.torch import save_file
        import torch

        def f(path, fig, tensors, mode):
            open(path, "w").write("x")
            open(path, mode)
            Path(path).open("ab")
            os.fdopen(3, "wb")
            Path(path).write_text("x")
            Path(path).write_bytes(b"x")
            Path(path).unlink()
            sh.rmtree(path)
            os.replace(path, path)
            os.rename(path, path)
            os.open(path, os.O_WRONLY | os.O_CREAT)
            tempfile.mkdtemp()
            save_file(tensors, path)
            torch.save(tensors, path)
            np.save(path, tensors)
            fig.savefig(path)
    """)
    calls = [call for _, call in direct_writes(source, "transformer.example")]
    assert calls == ["open", "open", ".open", "os.fdopen", ".write_text", ".write_bytes",
                     ".unlink", "shutil.rmtree", "os.replace", "os.rename", "os.open",
                     "tempfile.mkdtemp", "safetensors.torch.save_file", "torch.save",
                     "numpy.save", ".savefig"]  # fmt: skip
    harmless = textwrap.dedent("""
        import io, os
        import torch

        def g(path, fig, state, dataset):
            open(path).read()
            open(path, "rb").read()
            os.open(path, os.O_RDONLY)
            buffer = io.BytesIO()
            torch.save(state, buffer)
            fig.savefig(io.BytesIO(), format="png")
            dataset.open(path)
            "a-b".replace("-", "+")
    """)
    assert direct_writes(harmless, "transformer.example") == []


# ------------------------------------------------------- every JSON parse goes through the reader
# reading.py parses JSON for the whole package: bounded, its nesting and numbers checked, a
# damaged file one UserError naming it. Anywhere else a parse is a way around those rules.
READER = "transformer.reading"
PARSING_CALLS = {"json.loads", "json.load"}
OUTSIDE_THE_READER = {
    "transformer.serve.middleware":
        "looks for a key given twice in a request body the app then parses with its own "
        "bounded validation; anything it cannot parse is left to the app",
}  # fmt: skip


def json_parses(source: str) -> list[int]:
    """The lines of every ``json.loads`` / ``json.load`` call in ``source``."""
    tree = ast.parse(source)
    dotted = _dotted_names(tree)
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and dotted(node.func) in PARSING_CALLS]  # fmt: skip


def test_every_json_parse_goes_through_the_reader():
    outside = {module: lines for module, path in MODULES.items() if module != READER
               and (lines := json_parses(path.read_text(encoding="utf-8")))}  # fmt: skip
    assert {m: lines for m, lines in outside.items() if m not in OUTSIDE_THE_READER} == {}
    assert set(OUTSIDE_THE_READER) <= set(outside), "an exception that no longer applies"


def test_a_json_parse_would_be_found():
    source = "import json as j\nfrom json import load\nj.loads(b)\nload(f)\nx.loads(y)\n"
    assert json_parses(source) == [3, 4]


def checkpoint_defaults(source: str) -> dict[str, str]:
    """Each function of ``source`` that takes a ``checkpoint`` (a model directory's best or
    last): its name and that parameter's default, as written ("" where it has none)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            defaults = [None] * (len(node.args.posonlyargs + node.args.args)
                                 - len(node.args.defaults)) + node.args.defaults  # fmt: skip
            defaults += node.args.kw_defaults
            for arg, default in zip(args, defaults, strict=True):
                if arg.arg == "checkpoint":
                    found[node.name] = "" if default is None else ast.unparse(default)
    return found


def test_a_checkpoint_parameter_defaults_to_none():
    # None is "not given": a model directory's best, and the only choice a checkpoint folder or
    # an export takes. A default of "best" cannot tell a given "best" from none, and a library
    # call loading a checkpoint folder with checkpoint="last" got the folder's weights silently.
    found = {}
    for module, path in MODULES.items():
        for function, default in checkpoint_defaults(path.read_text("utf-8")).items():
            found[f"{module}.{function}"] = default
    assert len(found) >= 7, found  # the engines' loaders, the exports, the server, compare
    assert {name: default for name, default in found.items() if default != "None"} == {}
    from transformer.model_dir import checkpoints  # where both call it ``which``

    for function in (checkpoints.resolve_checkpoint, checkpoints.load_checkpoint):
        assert inspect.signature(function).parameters["which"].default is None


def test_a_checkpoint_default_of_best_would_be_found():
    found = checkpoint_defaults('def load(path, checkpoint="best"): ...\n'
                                "def export(path, *, checkpoint): ...\n"
                                "def fine(path, checkpoint=None, other=1): ...\n")  # fmt: skip
    assert found == {"load": "'best'", "export": "", "fine": "None"}
