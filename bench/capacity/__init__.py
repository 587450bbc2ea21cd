"""`nanochat-bench capacity`: the largest model a node can train, per memory strategy.

- data.py    the probes' workspace: a tokenizer of the asked size and random tokens (.bin), made in seconds
- search.py  the candidates (model shapes sorted by parameters) and the doubling-then-bisection search
- probe.py   one probe = one trainer process tree under a timeout, a memory watch and an optional cap,
             in its own run directory (read back, not rerun, when it is already done)
- sweep.py   every strategy in turn: capacity at batch 1, then throughput at the largest batch that fits
- lifetime.py  the probes end with the sweep (signals become an exception; own session; parent-death signal)
- cpuhost.py   on CPU: a sweep whose ranks could exhaust the host is refused, naming settings that fit
- rebuild.py   a summary from the finished probes, for a sweep that ended without writing one
- capped.py    the trainer under an address-space cap counted from the end of its start-up (CPU probes)
- calibrate.py the memory model against the probes: its error at each point, constants refitted
The report is bench/analysis/capacity.py.
"""
