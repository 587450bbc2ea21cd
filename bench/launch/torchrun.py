"""Moved to bench/workloads/torchrun.py (torchrun's command belongs with the workloads that use it)."""

from bench.workloads.torchrun import JOIN_TIMEOUT_S, LAUNCHER_MODULE, TRAIN_MODULE, torchrun_command  # noqa: F401
