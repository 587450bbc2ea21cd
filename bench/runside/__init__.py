"""The run side of the contract, for every workload: what a training process records while it runs, and how
its failures, signals and silences become evidence (bench/contract/ settles the status from it).

  runrecord.py     what a trainer process records, and how failures and signals become evidence
  heartbeat.py     each rank's sign of life; a silent rank ends the run as hung
  runclaim.py      one run per run directory: a lock, a finished run never written over
  parentwatch.py   a rank ends when the torchrun agent that started it is gone
  join.py          a rank that never joins the process group: bounded, and named
  guard.py         a diverged run ends as diverged (non-finite or exploding loss)
  console.py       stdout written by a thread of its own: a reader that stops reading never stops the run

Standard library only at import: NNTile's runner imports this package in its own interpreter.
"""
