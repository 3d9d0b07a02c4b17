"""The command line: each subcommand parses its arguments and makes one call into the library.

Errors a user can cause (a bad file, a bad value) end with one line on stderr and exit code 2;
set TRANSFORMER_DEBUG=1 to see the traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from .config import MODEL_PRESETS, ModelConfig
from .errors import UserError


def _cmd_info(args: argparse.Namespace) -> None:
    from .info import format_table, parameter_table
    from .model import Transformer

    overrides = {}
    if args.src_vocab is not None:
        overrides["src_vocab_size"] = args.src_vocab
    if args.tgt_vocab is not None:
        overrides["tgt_vocab_size"] = args.tgt_vocab
    if args.share_embeddings:
        overrides["share_embeddings"] = True
    if args.pre_norm:
        overrides["norm_first"] = True
    config = ModelConfig.preset(args.preset, **overrides)
    model = Transformer(config)
    print(format_table(parameter_table(model), config))


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="parameter counts per part of a model preset")
    p.add_argument("--preset", default="base", choices=sorted(MODEL_PRESETS))
    p.add_argument("--src-vocab", type=int, help="source vocabulary size")
    p.add_argument("--tgt-vocab", type=int, help="target vocabulary size")
    p.add_argument(
        "--share-embeddings",
        action="store_true",
        help="one embedding table for source and target (needs equal vocabularies)",
    )
    p.add_argument(
        "--pre-norm", action="store_true", help="pre-norm instead of the paper's post-norm"
    )
    p.set_defaults(func=_cmd_info)


COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_info]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer",
        description="The Transformer of 'Attention Is All You Need': train, translate, explain.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (UserError, ValueError, OSError) as error:
        if os.environ.get("TRANSFORMER_DEBUG"):
            raise
        print(f"transformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"transformer {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
