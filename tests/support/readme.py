"""The command lines README.md shows, as a reader would type them (tests/e2e/test_readme_commands.py).

A command is a line of an indented (4-space) or fenced code block whose first word is a command of this
project (`nanochat-bench`, `python`, `torchrun`, `reframe`, a script path, or VAR=value before one); a
trailing backslash continues it on the next line, and a `  # comment` after it is dropped.
"""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
_COMMAND = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:(?:nanochat-bench|python|torchrun|reframe|pip)\b"
                      r"|(?:containers|tests|bench)/[\w./-]*\w(?:\s|$))")  # a script path, not a folder name
_COMMENT = re.compile(r"\s{2,}#.*$")


def _code_lines(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            lines.append(line)
        elif line.startswith("    "):
            lines.append(line[4:])
        else:
            lines.append("")  # a paragraph ends a continued command
    return lines


def commands(text: str | None = None) -> list[str]:
    """Every command line of the README, continuations joined, comments dropped, in order."""
    out: list[str] = []
    pending = None
    for line in _code_lines(README.read_text() if text is None else text):
        line = _COMMENT.sub("", line).rstrip()
        if pending is not None:
            pending += " " + line.strip()
        elif _COMMAND.match(line.strip()):
            pending = line.strip()
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(re.sub(r"\s+", " ", pending))
        pending = None
    return out
