"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["logits"].shape == (1, 3, 37000)
    assert namespace["step_logits"].shape == (1, 1, 37000)
    assert len(namespace["best"]) == 1 and 1 <= len(namespace["best"][0]) <= 2


def test_readme_model_directory_example_runs(numbers_model, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    code = blocks[1].replace('"runs/numbers-en-fr"', repr(str(numbers_model)))
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102
    printed = capsys.readouterr().out
    assert printed.startswith("[") and printed.count("\n") == 1
