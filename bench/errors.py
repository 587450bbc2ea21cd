"""Expected failures: a user's mistake or a missing resource, reported as one clear line.

The CLI prints a BenchError as `error: <message>` and exits 1; anything else is a bug and keeps its
traceback. Messages name the file, flag or value at fault and what would be valid.
"""


class BenchError(Exception):
    """Base of every expected failure."""


class ConfigError(BenchError):
    """A flag, option or config value is invalid."""


class DataError(BenchError):
    """Data shards, tokenizer or a data split are missing or unusable."""


class SubmitError(BenchError):
    """Slurm refused or misunderstood a submission, or answered something we cannot parse."""


class RuntimeConfigError(BenchError):
    """A container runtime cannot be used as asked (unknown name, missing image, bad mount)."""


class AnalysisError(BenchError):
    """Run directories or result tables cannot be read as asked."""
