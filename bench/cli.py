"""`nanochat-bench <command>`: the command line. Thin by design: it parses and calls the library.

Each group of commands lives in `bench/commands/<group>.py` with a `register(subparsers)` function;
this file only builds the parser and turns expected failures (BenchError) into one line on stderr.
"""

import argparse
import importlib
import sys

from bench import __version__
from bench.errors import BenchError

# Command groups in the order `--help` lists them: the workflow from data to report.
COMMAND_GROUPS = ["data", "tokenizer", "workload", "capacity", "launch", "analysis", "containers"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nanochat-bench",
        description=(
            "LLM-training benchmark for HPC: nanochat's d20 GPT pretraining, measured under each "
            "container runtime from one GPU to many nodes.\n\n"
            "Typical flow: data generate|download -> tokenizer train -> smoke|train -> "
            "plan -> submit -> status -> collect -> report -> check"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of expected errors too")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    for group in COMMAND_GROUPS:
        try:
            module = importlib.import_module(f"bench.commands.{group}")
        except ModuleNotFoundError as e:
            if e.name == f"bench.commands.{group}":
                continue  # a group not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except BenchError as e:
        if args.verbose:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
