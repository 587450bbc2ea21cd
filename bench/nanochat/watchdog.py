"""How long a collective may wait, from the first collective to the last (--watchdog_s).

A stopped rank is found by its silent heartbeat (bench/runside/heartbeat.py) within
--heartbeat_timeout_s; this bound catches the other kind of hang, a rank that is alive but busy
elsewhere (a stuck filesystem read, a different collective), instead of the backend's 10 (NCCL) or
30 (gloo) minutes. A timed-out collective raises, and the run record turns it into `hung` naming the
rank that was waited for.
- before the first step (start-up, pre-flight, the first step's compile): START_S;
- once steps are timed: a margin (AUTO_MARGIN_S by default, --watchdog_s=N to choose it) plus twice the
  slowest step seen, so the first step's time (compilation included) is the floor;
- validation, samples and checkpoints, where one rank may legitimately keep the others waiting (rank 0
  samples and writes alone): at least PERIODIC_S, still bounded.
--watchdog_s=0 leaves the backend's own timeout everywhere.
"""

from contextlib import contextmanager

AUTO = -1.0  # --watchdog_s default: AUTO_MARGIN_S + 2 x the slowest step
AUTO_MARGIN_S = 60.0  # above --heartbeat_timeout_s: a stopped rank is named by its silent beat first
START_S = 300.0
PERIODIC_S = 600.0


def _set(seconds: float | None) -> None:
    from bench.nanochat.compute import set_collective_timeout  # torch.distributed, imported with it

    set_collective_timeout(seconds)


class Watchdog:
    def __init__(self, watchdog_s: float, distributed: bool):
        self.margin = 0.0 if not distributed else AUTO_MARGIN_S if watchdog_s < 0 else watchdog_s
        self.slowest = 0.0
        self.armed: float | None = None

    def start(self) -> None:
        """The bound before the first step, right after the process group exists."""
        if self.margin > 0:
            self.armed = max(START_S, self.margin)
            _set(self.armed)

    def arm(self, step_s: float) -> None:
        """After each step: margin + twice the slowest step so far (set only when it grows)."""
        if self.margin <= 0 or step_s <= self.slowest:
            return
        self.slowest = step_s
        self.armed = self.margin + 2 * self.slowest
        _set(self.armed)

    @contextmanager
    def relaxed(self):
        """Validation, samples, checkpoints: at least PERIODIC_S."""
        if self.armed is None or self.armed >= PERIODIC_S:
            yield
            return
        _set(PERIODIC_S)
        try:
            yield
        finally:
            _set(self.armed)
