"""nanochat-bench: nanochat's GPT training as an HPC benchmark (runtimes x nodes x repeats).

  breakdown.py     a run's start-up phases and steady step split, from its events
  cli.py           `nanochat-bench <command>`: parses and calls the library
  errors.py        expected failures (BenchError): one clear line, never a traceback
  locks.py         one writer at a time into a shared directory (a flock'ed file): downloads, tables
  logline.py       nanochat's step line: formatter and parser side by side
  metrics.py       throughput and MFU maths, the one table of peak FLOPs
  nccl_log.py      which network NCCL really took, from its NCCL_DEBUG=INFO lines
  netgate.py       the network gate: a multi-node run on the wrong network stops as wrong_network
  pairs.py         `NAME=VALUE` items of a repeatable flag (`--env`, `--image`, `--train-arg`) as one dict
  paths.py         NANOCHAT_BASE_DIR, else ~/.cache/nanochat
  processes.py     processes by their parent ids (/proc): a launcher's workers, a rank's launcher; OOM kills (cgroup)
  provenance.py    software versions, GPU, git revision, Slurm job, image, network env
  analysis/        run directories -> table -> scaling maths -> figures -> report
  capacity/        the largest model a node trains, per memory strategy
  commands/        the command line, one module per group
  contract/        the run contract: run.json, events, validation, files, outcome
  launch/          sweep planning, one job assembly, rendering, submitting, status, flows, local runs
  nanochat/        the nanochat-faithful workload
  reframe_checks/  the ReFrame checks and site configurations
  runside/         what a workload's processes record while they run: run record, heartbeat, run claim
  runtimes/        one module per way of running
  schemas/         the JSON Schemas generated from the contract
  sites/           site profiles: network, partitions, per-runtime network set-up
  workloads/       what a run trains, behind one interface: nanochat and its later stages, NNTile
"""

__version__ = "0.1.0"
