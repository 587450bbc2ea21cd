"""nanochat-bench: nanochat's GPT pretraining as an HPC benchmark (runtimes x nodes x repeats)."""

__version__ = "0.1.0"
