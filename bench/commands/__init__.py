"""`nanochat-bench <group>`: one module per group of commands, each a thin layer over the library.

  analysis.py    `nanochat-bench collect|report|check`
  capacity.py    `nanochat-bench capacity`
  containers.py  `nanochat-bench edf`
  data.py        `nanochat-bench data download|generate|info|bin`
  launch.py      `nanochat-bench plan | submit | status | render | speedrun`
  reframe.py     `nanochat-bench reframe`
  tokenizer.py   `nanochat-bench tokenizer train|eval`
  workload.py    `nanochat-bench model | train | preflight | smoke`
"""

from bench.errors import ConfigError


def nonempty(flag: str, what: str, required: bool = False):
    """An argparse type= for a flag whose empty value is no value: `--name "$NAME"` with NAME unset was taken for
    the flag left out, its default used unsaid, and an empty path is the current directory (`report --out ""`
    wrote there). A ConfigError, not argparse's own error: one line, no usage. `required`: no default to offer."""
    def check(value: str) -> str:
        if not value.strip():
            raise ConfigError(f"{flag} {value!r}: an empty value (an unset shell variable?); give {what}"
                              + ("" if required else f", or leave {flag} out for its default"))
        return value
    return check
