"""The documentation stays true: docs/configuration.md is the typed config's own; every command
line in README.md and docs/*.md parses; every option, YAML key and `section.key` they name
exists; every other `snake_case` name they put in backticks is a name the code knows."""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from transformer.cli.commands import COMMANDS
from transformer.cli.entry import build_parser
from transformer.cli.options import COMMAND_SECTIONS, parse
from transformer.cli.reference import configuration_markdown
from transformer.config import SECTIONS, build_config
from transformer.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Options of other programs that the pages show (torchrun, pip, pytest, curl, the benchmarks).
FOREIGN_OPTIONS = {
    "--standalone", "--nproc_per_node", "--nnodes", "--node_rank", "--rdzv_backend",
    "--rdzv_endpoint", "--serve-model", "--screenshot", "--quiet", "--settings", "--threads",
    "--rounds", "--engines", "--model", "--output", "--minutes", "--data", "--help",
    "--key", "--serve.KEY", "--section.key",  # placeholders: `--key value`, `--serve.KEY`
    "--warmup",  # the example of a misspelt option and its suggestion
    "--print-alignment", "--constraints",  # other toolkits' options, named for comparison
    "--word-scores",
}  # fmt: skip
FILE_SUFFIXES = ("bin", "safetensors", "png", "svg", "json", "jsonl", "md", "py", "yaml", "de",
                 "en", "fr", "hyp", "gz", "zip")  # fmt: skip


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def code_blocks(page: Path, languages: tuple[str, ...]) -> list[str]:
    return [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", text(page), re.S)
            if lang in languages]  # fmt: skip


def command_lines(page: Path) -> list[list[str]]:
    """The arguments after ``transformer`` of every command line in the page's shell blocks."""
    found = []
    for block in code_blocks(page, ("sh", "bash", "")):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line.split(" #")[0], posix=True, punctuation_chars="|<>;&")
            lexer.whitespace_split = True
            try:
                tokens = list(lexer)
            except ValueError:  # an unfinished quote: not a command line
                continue
            for i, token in enumerate(tokens):
                if (
                    token.endswith("bin/transformer")
                    or token == "transformer"
                    and (i == 0 or tokens[i - 1] in ("-m", "|", "&&", ";"))
                ):
                    args = []
                    for arg in tokens[i + 1 :]:
                        if arg in ("|", "<", ">", "<<<", ";", "&&", "&"):
                            break
                        args.append(arg)
                    if args and args[0] in COMMANDS:
                        found.append(args)
                    break
    return found


def test_configuration_page_is_generated_from_the_config():
    page = ROOT / "docs" / "configuration.md"
    assert text(page) == configuration_markdown(), (
        "docs/configuration.md is stale: python -m transformer.cli.reference docs/configuration.md"
    )


def check_command_lines(page: Path) -> None:
    for args in command_lines(page):
        name, rest = args[0], args[1:]
        try:
            _, given = parse(build_parser(name), rest, COMMANDS[name].sections)
            build_config({s: v for s, v in given.items() if s in SECTIONS}, "the command line")
            if "serve" in given:
                COMMAND_SECTIONS["serve"](**given["serve"])
        except UserError as error:
            raise AssertionError(f"{page.name}: transformer {' '.join(args)}: {error}") from None


def known_options() -> set[str]:
    options = set()
    for name in COMMANDS:
        options |= set(re.findall(r"--[\w.-]+", build_parser(name).format_help()))
    flat = {f"--{f.name}" for cls in COMMAND_SECTIONS.values() for f in fields(cls)}
    dashed = {option.replace("_", "-") for option in options | flat}
    benchmarks = {  # the options of the scripts in benchmarks/, which the docs run too
        option
        for script in (ROOT / "benchmarks").glob("*.py")
        for option in re.findall(r"add_argument\(\s*\"(--[\w.-]+)\"", script.read_text())
    }
    return options | flat | dashed | benchmarks | {"--preset", "--model.preset"}


def check_options(page: Path) -> None:
    named = set(re.findall(r"(?<![\w-])--[a-z][\w.-]*\w", text(page)))
    unknown = named - known_options() - FOREIGN_OPTIONS
    assert not unknown, f"{page.name} names options that do not exist: {sorted(unknown)}"


def check_config_keys(page: Path) -> None:
    keys = {f"{s}.{f.name}" for s, cls in COMMAND_SECTIONS.items() for f in fields(cls)}
    sections = "|".join(COMMAND_SECTIONS)
    named = set(re.findall(rf"`((?:{sections})\.[a-z_]+)`", text(page)))
    unknown = {n for n in named if not n.endswith(FILE_SUFFIXES)} - keys - {"model.preset"}
    assert not unknown, f"{page.name} names config keys that do not exist: {sorted(unknown)}"
    for block in code_blocks(page, ("yaml",)):
        values = yaml.safe_load(block)
        try:
            build_config({s: v for s, v in values.items() if s in SECTIONS}, page.name)
        except UserError as error:
            raise AssertionError(f"{page.name}: a YAML example is invalid: {error}") from None


def names_in_the_code() -> set[str]:
    """Every identifier and snake_case word of a string constant in the package, the benchmarks
    and the tests (the docs name tests), and every module's name."""
    names: set[str] = set()
    folders = [ROOT / "src", ROOT / "benchmarks", ROOT / "tests"]
    for path in (p for folder in folders for p in folder.rglob("*.py") if p != Path(__file__)):
        names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names |= set(re.findall(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", node.value))
    return names


# Other toolkits' parameters, named in the docs' comparisons with them.
FOREIGN_NAMES = {"cross_attentions", "decoder_input_ids", "force_words_ids",
                 "compute_transition_scores", "num_return_sequences"}  # fmt: skip
KNOWN_NAMES = names_in_the_code() | FOREIGN_NAMES


def check_names(page: Path) -> None:
    # A key renamed in the code but not in the prose (`cooldown_steps` for train.cooldown) is
    # caught here: every `snake_case` word in backticks must be a name the code uses.
    spans = set(re.findall(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`", text(page)))
    unknown = spans - KNOWN_NAMES
    assert not unknown, f"{page.name} names what the code does not know: {sorted(unknown)}"


CHECKS = [check_command_lines, check_options, check_config_keys, check_names]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_name_only_what_exists(page, check):
    check(page)


STALE = {
    check_names: "Cool down with `cooldown_steps`.\n",
    check_config_keys: "The key is `train.cooldown_steps`.\n\n```yaml\ntrain: {bf16: false}\n```\n",
    check_options: "Use `--bf16` for bf16 autocast.\n",
    check_command_lines: "```sh\n.venv/bin/transformer train --corpus numbers --bf16 true\n```\n",
}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_each_check_catches_what_the_readme_once_got_wrong(check, tmp_path):
    page = tmp_path / "stale.md"
    page.write_text(STALE[check], encoding="utf-8")
    with pytest.raises(AssertionError):
        check(page)
