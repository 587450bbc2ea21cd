"""`nanochat-bench <command>`: the command line. Thin by design: it parses and calls the library.

Each group of commands lives in `bench/commands/<group>.py` with a `register(subparsers)` function;
this file only builds the parser and turns expected failures (BenchError, and a run.json that is not a run's record:
bench.contract.RunJsonError) into one line on stderr.
"""

import argparse
import importlib
import os
import sys

from bench import __version__
from bench.contract import RunJsonError, SchemaError
from bench.errors import BenchError

# Command groups in the order `--help` lists them: the workflow from data to report.
COMMAND_GROUPS = ["data", "tokenizer", "workload", "capacity", "launch", "analysis", "containers", "reframe"]


class _WholeFlags(argparse.ArgumentParser):
    """A command's flags by their whole names only: an abbreviation could stand for another flag than meant (nanochat's
    --run d20, a run's name, read as --runtimes d20 or --run-dir d20).

    `flags=add` (a function of the parser) adds a command's flags the first time they are needed, to parse it or show
    its help: flags that show a heavy module's settings then cost only that command its import, not every command."""

    def __init__(self, *args, flags=None, **kwargs):
        self._flags_to_add = flags
        super().__init__(*args, **{"allow_abbrev": False, **kwargs})

    def _add_flags(self) -> None:
        add, self._flags_to_add = self._flags_to_add, None
        if add is not None:
            add(self)

    def parse_known_args(self, args=None, namespace=None):
        self._add_flags()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self._add_flags()
        return super().format_usage()

    def format_help(self) -> str:
        self._add_flags()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = _WholeFlags(
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
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", required=True, parser_class=_WholeFlags)
    for group in COMMAND_GROUPS:
        importlib.import_module(f"bench.commands.{group}").register(subparsers)
    describe_commands(parser)
    return parser


def describe_commands(parser: argparse.ArgumentParser) -> None:
    """A command's one-line help (shown in its group's list) is also its --help description, unless it
    has a longer one of its own."""
    for action in parser._actions:  # argparse keeps sub-commands here; no public accessor exists
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and helps.get(name):
                    sub.description = helps[name][0].upper() + helps[name][1:] + "."
                describe_commands(sub)


def main(argv: list[str] | None = None) -> int:
    args = None
    try:
        parser = build_parser()  # seconds of imports (torch): a Ctrl-C there is one line too
        args, extra = parser.parse_known_args(argv)
        given = list(sys.argv[1:] if argv is None else argv)
        if extra:  # as parse_args refuses them, with the command's hint where it has one (train's: after --)
            hint = getattr(args, "unrecognized_hint", None)
            parser.error(f"unrecognized arguments: {' '.join(extra)}"
                         + (f"; {hint(given, extra, args)}" if hint else ""))
        args.argv = given  # as given (a dry run records its submit command)
        result = args.func(args)
    except (BenchError, RunJsonError, SchemaError) as e:  # the last two name the file
        if args is not None and args.verbose:  # None: refused while parsing (a flag's type=), one line too
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a Unix tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the final flush cannot fail again
        return 141
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
