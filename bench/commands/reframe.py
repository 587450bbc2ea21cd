"""`nanochat-bench reframe`: run (or print) the ReFrame command for the checks shipped with the package.

The checks and the example site configurations are package data (bench/reframe_checks/), so an
installed nanochat-bench knows their paths; this command only puts them on ReFrame's command line.
"""

import argparse
import functools
import shlex
import shutil
import subprocess
from pathlib import Path

from bench.commands.workload import trainer_flags_hint
from bench.errors import ConfigError
from bench.reframe_checks import CHECKS, CONFIG_DIR

CONFIGS = {"test-cluster": "test_cluster.py", "alps-example": "alps_example.py"}


def config_path(name: str) -> Path:
    """A shipped configuration by name, or a site's own file."""
    if name in CONFIGS:
        return CONFIG_DIR / CONFIGS[name]
    if not name.strip():  # Path('') is the current directory, which was then named as the configuration given
        raise ConfigError(f"--config {name!r}: an empty value (an unset shell variable?); give a shipped "
                          f"configuration ({', '.join(CONFIGS)}) or a file")
    path = Path(name)
    if not path.is_file():
        what = "a directory, not a ReFrame configuration file" if path.is_dir() else "no such file"
        raise ConfigError(f"--config {name!r}: {what}; shipped configurations: {', '.join(CONFIGS)}")
    return path.absolute()


def reframe_command(config: str, reframe_args: list[str]) -> list[str]:
    args = reframe_args[1:] if reframe_args[:1] == ["--"] else reframe_args
    # ReFrame empties a case's output directory when the case sets up, so a rerun with the same -o would replace
    # the run directories the last run kept: each run gets its own time-stamped output and stage directories
    stamp = [] if any(a.split("=")[0] == "--timestamp" for a in args) else ["--timestamp"]
    return ["reframe", "-C", str(config_path(config)), "-c", str(CHECKS), *stamp, *args]


def cmd_reframe(args) -> int:
    command = reframe_command(args.config, args.reframe_args)
    if args.print_command:
        print(shlex.join(command))
        return 0
    if shutil.which("reframe") is None:
        raise ConfigError("reframe is not installed here: pip install 'nanochat-bench[reframe]' (reframe-hpc)")
    return subprocess.call(command)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "reframe", help="run nanochat-bench's ReFrame checks (reframe -C CONFIG -c <checks> ...)",
        description="Run ReFrame with the checks shipped in bench/reframe_checks/checks.py and a site "
                    "configuration; the arguments after -- go to reframe unchanged.",
        epilog="examples:\n"
               "  nanochat-bench reframe --config alps-example --print-command -- --system alps-example -r\n"
               "  nanochat-bench reframe --config site.py -- -P num_nodes=1,2,4 -S depth=20 -r",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, metavar="NAME_OR_FILE",
                   help=f"a ReFrame site configuration: {', '.join(CONFIGS)} (shipped) or a file")
    p.add_argument("--print-command", action="store_true", help="print the reframe command instead of running it")
    p.add_argument("reframe_args", nargs=argparse.REMAINDER, help="arguments for reframe, after --")
    p.set_defaults(func=cmd_reframe,
                   unrecognized_hint=functools.partial(trainer_flags_hint, p, whose="ReFrame's flags"))
