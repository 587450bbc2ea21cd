"""A capacity sweep: for each memory strategy, the largest model that trains, then its speed at its best batch.

Per strategy, in the order given:
1. points: the depths a user lists (a memory-vs-size curve), at device batch 1; cheap, and a strategy
   that fails or hangs there (not out of memory) is not searched at that point's aspect ratio, nor probed at
   its larger points there;
2. capacity: per aspect ratio, the search of search.py at device batch 1, started where the memory
   model (bench/nanochat/memory.py) puts the border.
Then, for every model that trained at batch 1, the largest power-of-two batch the memory model
(corrected by the measured batch-1 peak) says fits, halved once if it does not: tok/s at the batch that
maximises it. A time budget stops the sweep between probes (and cuts a running one).
Every probe's run directory is `<out>/runs/<strategy>/<shape>-b<batch>/`; done ones are read back, so
running the same command again resumes (a `failed` one runs again, its attempt moved to `<out>/failed/`;
one measured with other settings runs again too, moved to `<out>/earlier/` first, as is a summary of them).
`<out>/summary.json` and `<out>/probes.csv` hold the results, and the --depths points not probed, with why.
"""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.capacity import data as capdata, lifetime
from bench.capacity.cpuhost import check_cpu_host
from bench.capacity.probe import OUTCOMES, ProbeResult, ProbeSpec, host_memory, read_probe, recorded_spec, run_probe
from bench.capacity.search import CapacitySearch, Shape, family, params_text, shapes
from bench.errors import ConfigError, os_reason
from bench.nanochat import memory
from bench.nanochat.tokenizer import SPECIAL_TOKENS
from bench.contract import RUN_JSON, RunJsonError, atomic_target, read_run_json, update_run_json, write_json_atomic

SUMMARY_JSON = "summary.json"
PROBES_CSV = "probes.csv"
NOT_PROBED = "not probed"  # the outcome of a --depths point skipped after a smaller one of its width failed or hung
FAILED_DIR = "failed"  # <out>/failed/<strategy>/<probe>-<n>: the earlier attempts of a failed probe run again
EARLIER_DIR = "earlier"  # <out>/earlier/<strategy>/<probe>-<n>: probes of other settings, run again since
REFERENCE = "fsdp"  # capacities are compared with FSDP's (NNTile's own comparison)
PROBE_SETTINGS = ("nproc", "max_seq_len", "steps", "vocab_size", "memory_limit")  # the sweep's, in each ProbeSpec
MACHINE_KEYS = ("device_type", "gpu_name", "device_bytes", "host_bytes")  # recorded with each probe
SMI_TIMEOUT_S = 30  # nvidia-smi answers in well under a second; a wedged driver may never answer
# torch's import and CUDA's start-up, from a shared file system on a node of 8 GPUs, take tens of seconds
TORCH_GPU_TIMEOUT_S = 120
DEVICE_KEYS = MACHINE_KEYS[:3]  # a probe measured on another device (an --out on a shared file system) runs again
# The deepest shape the search lists: d1024 at aspect ratio 64 has 5.3e13 parameters, beyond any node's memory, while
# listing and predicting every even depth up to --max-depth grows with its square (100000 took minutes, no probe ran)
SEARCH_MAX_DEPTH = 1024  # not config.MAX_DEPTH, the deepest GPT any command takes


@dataclass
class SweepConfig:
    out: Path
    strategies: list[str]
    nproc: int = 1
    search: bool = True
    depths: list[int] = field(default_factory=list)
    aspect_ratios: list[int] = field(default_factory=lambda: [64])
    max_depth: int = 128
    max_seq_len: int = 2048
    steps: int = 3
    time_per_point: float = 600.0
    budget_s: float | None = None
    batch_search: bool = True
    max_batch: int = 64
    vocab_size: int = 65536
    memory_limit: int | None = None  # CPU: bytes each rank may add after start-up (bench/capacity/capped.py)
    device_type: str = ""
    min_probe_s: float = 20.0  # do not start a probe with less time than this left in the budget
    host_floor: int | None = None  # stop a probe when the host's available memory falls below this
    # (default: 3% of the host's memory, at least 2 GiB: above what the kernel's OOM killer waits for)

    def __post_init__(self):
        if not self.strategies:
            raise ConfigError("--strategies: name at least one, e.g. zero2,fsdp,fsdp+ac,fsdp+ac+offload")
        if not self.search and not self.depths:
            raise ConfigError("give --search, --depths D1,D2,... or both")
        for name, value in (("--gpus", self.nproc), ("--seq", self.max_seq_len), ("--steps", self.steps),
                            ("--max-batch", self.max_batch), ("--time-per-point", self.time_per_point)):
            if not (value > 0 and math.isfinite(value)):  # nan passed `<= 0` and meant no bound at all
                raise ConfigError(f"{name}={value}: must be positive")
        # true of both callers: leaving it out is no bound in the CLI, 480 s in benchmarks/capacity_bench.py
        if self.budget_s is not None and not (self.budget_s > 0 and math.isfinite(self.budget_s)):
            raise ConfigError(f"--budget={self.budget_s:g}: must be positive seconds")
        if self.budget_s is not None and self.budget_s < self.min_probe_s:  # no probe would start, each said spent
            raise ConfigError(f"--budget={self.budget_s:g}: no probe starts with less than {self.min_probe_s:g} s of "
                              f"the budget left; give at least {self.min_probe_s:g}")
        if self.search and self.max_depth < 2:  # the search's shapes are the even depths 2..--max-depth
            raise ConfigError(f"--max-depth={self.max_depth}: the search needs at least 2 (its shapes are even depths)")
        if self.search and self.max_depth > SEARCH_MAX_DEPTH:
            raise ConfigError(f"--max-depth={self.max_depth}: at most {SEARCH_MAX_DEPTH} (d{SEARCH_MAX_DEPTH} has "
                              "5.3e13 parameters at aspect ratio 64, more than any node holds)")
        from bench.nanochat.config import check_depth_limit

        for depth in self.depths:
            check_depth_limit(depth, "--depths")
        if self.memory_limit is not None and self.memory_limit <= 0:  # 0 would run the probes uncapped
            raise ConfigError(f"--memory-limit={self.memory_limit}: must be positive, e.g. 875M")
        if not 256 + len(SPECIAL_TOKENS) < self.vocab_size <= 2 ** 16:  # bytes + merges + specials; uint16 tokens
            raise ConfigError(f"--vocab-size={self.vocab_size}: the probes' tokenizer holds "
                              f"{257 + len(SPECIAL_TOKENS)}..{2 ** 16} tokens")
        from bench.nanochat.parallel import Strategy  # imports torch: not at the module's import

        given: dict[str, str] = {}  # each strategy once, by its one spelling (its probes' run directories)
        for text in self.strategies:  # an unknown strategy fails now, naming the valid ones
            strategy = Strategy.parse(text, "--strategies")
            s = strategy.name
            if s in given:  # it would be searched twice, every probe recorded twice
                same = f"{s} is given twice" if text == given[s] else f"{given[s]} and {text} are both {s}"
                raise ConfigError(f"--strategies {','.join(self.strategies)}: {same}; name each strategy once")
            given[s] = text
            if problem := strategy.split_problem(self.vocab_size, self.nproc):
                # its first probe would only fail, late, and stop its search as `failed`
                raise ConfigError(f"--strategies {s} with --gpus {self.nproc}: {problem}; give a --vocab-size that "
                                  f"{self.nproc} divides (e.g. {self.vocab_size - self.vocab_size % self.nproc}), "
                                  f"another --gpus, or leave {s} out (fsdp splits unevenly)")
        self.strategies = list(given)
        if twice := sorted({a for a in self.aspect_ratios if self.aspect_ratios.count(a) > 1}):
            # each shape of that width would be probed (or read back) and recorded twice
            raise ConfigError(f"--aspect-ratios {','.join(map(str, self.aspect_ratios))}: "
                              f"{', '.join(map(str, twice))} is given twice; name each aspect ratio once")
        from bench.nanochat.config import shape_problem

        for depth, ar in ((d, a) for d in self.depths for a in self.aspect_ratios):
            if problem := shape_problem(depth, ar):  # its probe would only fail, and stop the search
                raise ConfigError(f"--depths {depth} at --aspect-ratios {ar}: {problem}")
        for ar in self.aspect_ratios if self.search else []:  # else the search stops the sweep, after other probes
            deepest = self.max_depth - self.max_depth % 2
            if all(shape_problem(d, ar) for d in range(2, deepest + 1, 2)):
                raise ConfigError(f"--aspect-ratios {ar} with --max-depth {self.max_depth}: no shape to search; at "
                                  f"depth {deepest}, {shape_problem(deepest, ar)}")


# ------------------------------------------------------------------------------------------------
# the machine


def _gpu() -> tuple[str | None, int | None]:
    """(name, total bytes) of the ranks' first GPU from nvidia-smi, else from a short torch subprocess (so that
    this process never holds a CUDA context of its own while the probes need the memory); ConfigError when neither
    answers in time (a wedged driver)."""
    lines = _smi("name,memory.total", 1)
    if lines and "," in lines[0]:
        name, mib = lines[0].rsplit(",", 1)
        return name.strip(), int(float(mib)) * 2 ** 20
    code = ("import torch; p = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None; "
            "print(f'{p.name}|{p.total_memory}' if p else '')")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=TORCH_GPU_TIMEOUT_S).stdout.strip()
    except subprocess.TimeoutExpired:  # no GPU would answer a probe either: not a CPU sweep on a GPU node
        raise ConfigError(f"the GPU could not be asked: torch.cuda did not answer in {TORCH_GPU_TIMEOUT_S} s (in a "
                          "subprocess, after nvidia-smi --query-gpu gave no answer); a wedged GPU driver hangs both: "
                          "check it, or give --device-type cpu") from None
    if "|" in out:
        name, total = out.rsplit("|", 1)
        return name, int(total)
    return None, None


def visible_gpus() -> list[str] | None:
    """The GPUs CUDA_VISIBLE_DEVICES shows the ranks (on a shared node, the job's own); None when it is unset (all
    of the node's). CUDA reads it up to the first name that is no GPU's, so set but empty, -1 or Slurm's NoDevFiles
    show none."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    visible = []
    for name in (d.strip() for d in value.split(",") if d.strip()):
        if not (name.isdigit() or name.startswith(("GPU-", "MIG-"))):
            break
        visible.append(name)
    return visible


def gpu_count() -> tuple[int | None, str | None]:
    """(the GPUs the ranks see, why nvidia-smi could not count them): nvidia-smi -L's GPUs of the node, no more than
    CUDA_VISIBLE_DEVICES names (a job's share of a node); where nvidia-smi fails, hangs or is missing, the count
    CUDA_VISIBLE_DEVICES names, else None."""
    visible = visible_gpus()
    if visible == []:
        return 0, None
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
        # with no GPU it says so and exits nonzero (6): an answer, read below
        failed = out.returncode and "No devices were found" not in out.stdout
        why = f"failed (exit status {out.returncode})" if failed else None
    except (OSError, subprocess.TimeoutExpired) as e:  # a GPU torch sees without nvidia-smi, or a wedged driver
        why = f"did not answer in {SMI_TIMEOUT_S} s" if isinstance(e, subprocess.TimeoutExpired) else "could not run"
    if why:
        return (len(visible) if visible else None), why
    # one line per GPU; "No devices were found" is none
    listed = sum(line.startswith("GPU ") for line in out.stdout.splitlines())
    return (min(listed, len(visible)) if visible is not None else listed), None


def _gpu_ids(nproc: int) -> str:
    """The GPUs of a probe's ranks as nvidia-smi's -i takes them: the first `nproc` of CUDA_VISIBLE_DEVICES
    (the ranks' cuda:0, cuda:1, ...), else 0..nproc-1; "" where it shows none."""
    visible = visible_gpus()
    return ",".join(visible[:nproc] if visible is not None else map(str, range(nproc)))


def _smi(fields: str, nproc: int) -> list[str]:
    """nvidia-smi's CSV lines of `fields` for the GPUs of `nproc` ranks; none where it is missing, fails or hangs
    (a wedged driver: the sweep goes on without the figure)."""
    if not shutil.which("nvidia-smi") or not (ids := _gpu_ids(nproc)):  # none: the ranks see no GPU to ask of
        return []
    query = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", ids]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return []
    return out.stdout.strip().splitlines() if out.returncode == 0 else []


def gpu_free(nproc: int) -> int | None:
    """The least free memory, in bytes, among the GPUs a probe of `nproc` ranks uses, now (nvidia-smi: no CUDA
    context here); None where it cannot tell. What is not free as a probe starts, other processes hold."""
    try:
        return min(int(float(mib)) for mib in _smi("memory.free", nproc)) * 2 ** 20
    except ValueError:  # [N/A], or no GPU answered
        return None


def machine(cfg: SweepConfig, gpus_counted: bool = False, gpu: tuple[str | None, int | None] | None = None) -> dict:
    """The machine the probes run on; `gpus_counted`: --gpus is the count of visible GPUs just taken (its default),
    so nvidia-smi -L, up to SMI_TIMEOUT_S on a wedged driver, is not asked again; `gpu`: _gpu()'s answer taken with
    it, for the same reason."""
    total, available = host_memory()
    name, gpu_bytes = (gpu or _gpu()) if cfg.device_type in ("", "cuda") else (None, None)
    device_type = cfg.device_type or ("cuda" if gpu_bytes else "cpu")
    if device_type == "cuda" and not gpu_bytes:
        raise ConfigError("--device-type cuda but no GPU is visible (nvidia-smi, torch.cuda)")
    # on cpu --gpus is the ranks per probe, processes the host's memory check bounds (bench/capacity/cpuhost.py)
    if device_type == "cuda" and cfg.nproc > 1 and not gpus_counted and (count := gpu_count()[0]) and cfg.nproc > count:
        # the ranks past the last GPU would find none of their own: every probe failed, each search stopped there
        raise ConfigError(f"--gpus {cfg.nproc}: only {count} GPU(s) visible here (nvidia-smi -L, "
                          f"CUDA_VISIBLE_DEVICES); give --gpus {count} or fewer")
    if device_type == "cuda" and cfg.memory_limit:  # the cap would bound the CUDA driver's address space too
        raise ConfigError(f"--memory-limit {cfg.memory_limit >> 20}M caps a CPU rank's address space (a CPU stand-in "
                          "for a smaller machine); on cuda it would bound the CUDA driver's address-space "
                          "reservations, not the GPU's memory: leave it out, or give --device-type cpu")
    device_bytes = gpu_bytes if device_type == "cuda" else (cfg.memory_limit or available)
    return {"device_type": device_type, "gpu_name": name, "device_bytes": device_bytes, "host_bytes": total,
            "host_available_bytes": available, "memory_limit": cfg.memory_limit, "nproc": cfg.nproc}


# ------------------------------------------------------------------------------------------------
# predictions


class Sweep:
    def __init__(self, cfg: SweepConfig, log=print, gpus_counted: bool = False,
                 gpu: tuple[str | None, int | None] | None = None):
        self.cfg, self.log = cfg, log
        self.machine = machine(cfg, gpus_counted, gpu)
        self.host_floor = cfg.host_floor or max(2 << 30, int(0.03 * (self.machine["host_bytes"] or 0)))
        check_cpu_host(cfg, self.machine, self.host_floor)
        self.results: list[ProbeResult] = []
        self.searches: dict[tuple[str, int], dict] = {}
        self.not_probed: list[ProbeResult] = []  # --depths points skipped after a smaller one failed or hung
        self.t0 = time.time()
        self.out_of_time = False
        self.interrupted: str | None = None  # the signal (or error) that stopped the sweep

    def estimate(self, strategy: str, shape: Shape, batch: int) -> memory.Estimate:
        c = self.cfg
        return memory.estimate(memory.MemoryPoint(shape.depth, shape.aspect_ratio, c.vocab_size, c.max_seq_len,
                                                  batch, c.nproc, strategy, self.machine["device_type"]))

    def predicted_fit(self, strategy: str, shape: Shape, batch: int = 1, correction: int = 0) -> bool:
        est = self.estimate(strategy, shape, batch)
        est.need_bytes += correction
        return memory.fits(est, self.machine["device_bytes"], self.machine["host_available_bytes"])[0]

    # --------------------------------------------------------------------------------------------
    # probes

    def _spec(self, strategy: str, shape: Shape, batch: int) -> ProbeSpec:
        c = self.cfg
        # the device resolved, not --device-type as given: else a sweep resumed with --device-type cuda, where it
        # was left out, ran every probe again on the same GPU
        return ProbeSpec(strategy, shape.depth, shape.aspect_ratio, batch, c.max_seq_len, c.nproc, c.steps,
                         self.machine["device_type"], c.vocab_size, c.memory_limit)

    def probe(self, strategy: str, shape: Shape, batch: int) -> ProbeResult:
        c = self.cfg
        spec = self._spec(strategy, shape, batch)
        run_dir = c.out / "runs" / strategy / spec.name
        # a --depths point the search reaches again: one probe, recorded once
        if done := next((r for r in self.results if r.spec == spec and r.outcome in OUTCOMES), None):
            return done
        try:
            result = read_probe(spec, run_dir)
        except RunJsonError as e:  # cut short by the kill that ended the sweep: run_probe starts it anew
            print(f"note: {e.problem}; that probe runs again", file=sys.stderr)
            result = None
        except OSError as e:
            print(f"note: {run_dir / RUN_JSON} cannot be read: {os_reason(e)}; that probe runs again", file=sys.stderr)
            result = None
        if result is not None and any(result.extra.get(k) not in (None, self.machine[k]) for k in DEVICE_KEYS):
            result = None  # an H100's oom says nothing of an H200 (and would be recorded under the H200's name)
        if result is not None and result.outcome == "timeout" and (result.time_limit_s or math.inf) < c.time_per_point:
            result = None  # a hang at --time-per-point 60 says nothing of 600 (a limit recorded before: read back)
        # a crash may be the node's (a hiccup, a lost rank), not the size's: stored for good, it stopped the search
        # on every resume until the sweep's directory was deleted; it runs again, the attempt kept, not emptied. So
        # is a probe of other settings (not read back), whatever its outcome: the new attempt would delete it.
        earlier = _recorded_in(run_dir) if result is None or result.outcome == "failed" else None
        if earlier is not None and earlier.get("outcome") == "failed":
            if kept := self._set_aside(run_dir, FAILED_DIR, read_back=result is not None):
                self.log(f"{strategy} {spec.name} failed in an earlier sweep ({earlier.get('message') or 'no message'}"
                         f"): it runs again, that attempt kept in {kept}")
                result = None
        elif earlier is not None and (kept := self._set_aside(run_dir, EARLIER_DIR, read_back=False)):
            self.log(f"{strategy} {spec.name} was measured before ({earlier.get('outcome')}) with other settings "
                     f"({_other_settings(earlier, spec)}): it runs again, that probe kept in {kept}")
        if result is None:
            left = None if c.budget_s is None else c.budget_s - (time.time() - self.t0)
            if left is not None and left < c.min_probe_s:  # counted and shown: the summary says the sweep is cut
                result = ProbeResult(spec, "budget", "not run: the sweep's time budget is spent")
            else:
                timeout = c.time_per_point if left is None else min(c.time_per_point, left)
                free = gpu_free(c.nproc) if self.machine["device_type"] == "cuda" else None
                self.log(f"[{len(self.results) + 1:3d} {time.time() - self.t0:6.0f}s] {strategy:<16} "
                         f"{spec.name:<12} starting (up to {timeout:.0f} s)")
                result = run_probe(spec, run_dir, self.data, timeout, self.host_floor,
                                   deadline_cut=left is not None and left < c.time_per_point)
                result.device_free_bytes = free
            self.out_of_time |= result.outcome == "budget"
        # before the record: a probe that ended before its model was built (an out of memory while building it)
        # reports no count, and a rebuilt summary leaves out the probes recorded without one
        result.num_params = result.num_params or shape.num_params
        if result.outcome != "budget":
            recorded = result.extra.get("sweep_depths")
            # --depths: a summary rebuilt after a kill recomputes from it the points a failure here left not probed
            result.extra.update(self._prediction(strategy, shape, batch), sweep_depths=c.depths)
            # read back under other --depths: recorded anew, so that summary takes this sweep's points, not the
            # earlier sweep's, and is rebuilt (this probe newer than that sweep's summary)
            if not result.reused or recorded != c.depths:
                update_run_json(run_dir, capacity=result.record())
        self.results.append(result)
        self._progress(result)
        return result

    def _set_aside(self, run_dir: Path, into: str, read_back: bool = True) -> Path | None:
        """Moves a probe's run directory to <out>/<into>/<strategy>/<probe>-<n> (out of runs/, whose probes a rebuilt
        summary reads), where its new attempt leaves it be; None, if it cannot: the probe is read back, or, not
        `read_back` (of other settings), run again over it."""
        parent = self.cfg.out / into / run_dir.parent.name
        try:
            parent.mkdir(parents=True, exist_ok=True)
            n = 1
            while (kept := parent / f"{run_dir.name}-{n}").exists():
                n += 1
            run_dir.rename(kept)
        except OSError as e:
            then = "its failure is read back" if read_back else "it runs again over that attempt"
            print(f"note: {run_dir} cannot be moved to {parent} to run that probe again: {os_reason(e)}; "
                  f"{then}", file=sys.stderr)
            return None
        return kept

    def _prediction(self, strategy: str, shape: Shape, batch: int) -> dict:
        est = self.estimate(strategy, shape, batch)
        return {**{k: self.machine[k] for k in MACHINE_KEYS}, "predicted_peak_bytes": est.peak_bytes,
                "predicted_need_bytes": est.need_bytes, "predicted_host_bytes": est.host_bytes,
                "predicted_phase": est.phase}

    def _progress(self, r: ProbeResult) -> None:
        s, n = r.spec, len(self.results)
        size = params_text(r.num_params)
        pred = r.extra.get("predicted_need_bytes")
        line = f"[{n:3d} {time.time() - self.t0:6.0f}s] {s.strategy:<16} {s.name:<12} {size:>8}"
        line += f" predicted {pred / 2**30:6.1f} GiB" if pred else ""
        line += f" -> {r.outcome}"
        if r.outcome == "ok":
            peak = f"{r.peak_mem_mib:,.0f} MiB" if r.peak_mem_mib else "n/a"
            line += f", peak {peak}, {r.tok_per_sec:,.0f} tok/s"
        elif r.message:
            line += f": {r.message}"  # whole: a message cut at a width ends mid-sentence
        line += " (read back)" if r.reused else (f" ({r.wall_s:.0f} s)" if r.wall_s else "")
        self.log(line)

    # --------------------------------------------------------------------------------------------
    # passes

    def run(self) -> dict:
        """Every pass; stopped by a signal or an error, it still writes the summary of the probes that
        finished (marked `interrupted`) before the exception goes on."""
        with lifetime.stop_on_signals():
            try:
                self._passes()
            except BaseException as e:
                self.interrupted = e.args[0] if isinstance(e, lifetime.Stopped) else type(e).__name__
                if self.results:
                    self.write_summary()
                raise
        return self.write_summary()

    def _passes(self) -> None:
        c = self.cfg
        try:
            c.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a file in the way, a read-only or missing mount: the flag, not a traceback
            raise ConfigError(f"--out {c.out}: the sweep directory cannot be made: {os_reason(e)}") from None
        self.log(f"capacity: preparing the probes' data ({c.vocab_size:,}-token vocabulary) under {c.out / 'data'}")
        t = time.time()
        self.data = {"base_dir": c.out / "data", "memory_limit": c.memory_limit,
                     "bin_dir": capdata.prepare(c.out / "data", c.vocab_size)}
        m = self.machine
        dev = f"{m['gpu_name']} ({m['device_bytes'] / 2**30:.1f} GiB)" if m["gpu_name"] else \
            f"cpu (cap {m['device_bytes'] / 2**30:.2f} GiB per rank)" if c.memory_limit else "cpu"
        self.log(f"capacity: {c.nproc} rank(s) on {dev}, host {m['host_bytes'] / 2**30:.0f} GiB; strategies "
                 f"{', '.join(c.strategies)}; seq {c.max_seq_len}, {c.steps} steps a probe; data ready in "
                 f"{time.time() - t:.1f} s; run directories under {c.out / 'runs'}")
        for strategy in c.strategies:
            # per width: a point that crashed or hung at one aspect ratio says nothing of another's shapes
            broken: dict[int, ProbeResult] = {}
            for ar in c.aspect_ratios:
                for shape in shapes(c.depths, ar, c.vocab_size) if c.depths else []:
                    if (first := broken.get(ar)) and not self.out_of_time:
                        # a larger point of that width would crash or hang the same way, as its search would
                        skipped = not_probed_after(first, self._spec(strategy, shape, 1), shape.num_params)
                        # kept for the summary: else the report reads the point as never asked for
                        self.not_probed.append(skipped)
                        self.log(f"{strategy} {shape.name}-b1 not probed: {skipped.message}")
                        continue
                    r = None if self.out_of_time else self.probe(strategy, shape, 1)
                    if r and r.outcome in ("failed", "timeout"):
                        broken.setdefault(ar, r)
            for ar in c.aspect_ratios if c.search else []:
                self._search(strategy, ar, broken.get(ar))
        if c.batch_search:
            for strategy in c.strategies:
                self._batches(strategy)

    def _search(self, strategy: str, aspect_ratio: int, broken: ProbeResult | None = None) -> None:
        """The capacity search of one strategy at one aspect ratio; not started when a smaller point of that width
        already failed or hung (its big probes would fail the same way, at a higher price)."""
        c = self.cfg
        candidates = family(c.max_depth, aspect_ratio, c.vocab_size)
        fitting = [i for i, s in enumerate(candidates) if self.predicted_fit(strategy, s)]
        search = CapacitySearch(candidates, start=fitting[-1] if fitting else 0)  # the memory model's border
        state = {"strategy": strategy, "aspect_ratio": aspect_ratio, "stopped": None}
        self.searches[(strategy, aspect_ratio)] = state
        if broken is not None:
            state["stopped"] = broken.stop_record()
        ran = 0  # every probe of the search, the one that failed or hung too (search.probes: those it bisects on)
        try:
            while state["stopped"] is None and not self.out_of_time and (shape := search.next()) is not None:
                r = self.probe(strategy, shape, 1)
                ran += r.outcome != "budget"  # not run: the budget was spent
                if r.outcome in ("ok", "oom"):
                    search.record(shape, r.fits)
                else:
                    state["stopped"] = r.stop_record()
        finally:  # an interrupted search still says what its finished probes found (complete: the border)
            state.update(capacity=_shape_dict(search.capacity), first_failure=_shape_dict(search.first_failure),
                         probes=ran, complete=state["stopped"] is None and search.next() is None)

    def _batches(self, strategy: str) -> None:
        c = self.cfg
        done = {(r.spec.depth, r.spec.aspect_ratio): r for r in self.results
                if r.spec.strategy == strategy and r.spec.device_batch_size == 1 and r.fits}
        for (depth, ar), base in sorted(done.items(), key=lambda kv: kv[1].num_params):
            if self.out_of_time:
                return
            shape = Shape(base.num_params, depth, ar)
            correction = 0
            if base.peak_mem_mib and base.extra.get("predicted_peak_bytes"):  # measured minus predicted at b=1
                correction = int(base.peak_mem_mib * 2 ** 20 - base.extra["predicted_peak_bytes"])
            fitting = (b for b in _powers_of_two(c.max_batch) if self.predicted_fit(strategy, shape, b, correction))
            batch = next(fitting, 1)
            for b in (batch, batch // 2):  # the predicted largest, and half of it if that does not fit
                if b <= 1 or self.out_of_time or self.probe(strategy, shape, b).fits:
                    break

    # --------------------------------------------------------------------------------------------
    # results

    def write_summary(self) -> dict:
        from bench.capacity.rebuild import search_from_probes

        searches = list(self.searches.values())
        for strategy in self.cfg.strategies:  # not searched (only --depths, or stopped before): what its probes say
            for ar in self.cfg.aspect_ratios:
                if (strategy, ar) not in self.searches and any(r.spec.strategy == strategy for r in self.results):
                    searches.append(search_from_probes(strategy, ar, self.results))
        summary = summarize(dict(asdict(self.cfg), out=str(self.cfg.out)), self.machine, self.results, searches,
                            self.not_probed)
        summary["interrupted"] = self.interrupted
        self._keep_earlier_summary(summary)
        save_summary(self.cfg.out, summary)
        for line in format_table(summary):
            self.log(line)
        return summary

    def _keep_earlier_summary(self, summary: dict) -> None:
        """An earlier sweep's summary.json of other probe settings or another machine (and its probes.csv), moved to
        <out>/earlier/summary-<n>.json, not replaced by this sweep's: its probes were moved there too."""
        out = self.cfg.out
        try:
            earlier = json.loads((out / SUMMARY_JSON).read_text())
        except (OSError, ValueError):  # none yet, or one a kill cut short: nothing to keep
            return
        if not isinstance(earlier, dict) or _settings(earlier) == _settings(summary):
            return
        n = 1
        while (out / EARLIER_DIR / f"summary-{n}.json").exists():
            n += 1
        try:
            (out / EARLIER_DIR).mkdir(exist_ok=True)
            for name, stem in ((SUMMARY_JSON, "summary"), (PROBES_CSV, "probes")):
                if (out / name).exists():
                    (out / name).rename(out / EARLIER_DIR / f"{stem}-{n}{Path(name).suffix}")
        except OSError as e:
            print(f"note: the summary of an earlier sweep of other settings cannot be moved to {out / EARLIER_DIR}: "
                  f"{os_reason(e)}; this sweep's replaces it", file=sys.stderr)
            return
        was = _changed(_settings(earlier), _settings(summary))
        self.log(f"the summary of an earlier sweep of other settings ({was}) is kept in "
                 f"{out / EARLIER_DIR / f'summary-{n}.json'}")


def _settings(summary: dict) -> dict:
    """What a sweep's probes were measured with: its probe settings and its machine."""
    config, machine = summary.get("config") or {}, summary.get("machine") or {}
    return {**{k: config.get(k) for k in PROBE_SETTINGS}, **{k: machine.get(k) for k in MACHINE_KEYS}}


def not_probed_after(first: ProbeResult, spec: ProbeSpec, num_params: int) -> ProbeResult:
    """`spec`'s --depths point, not probed since `first`, a smaller one of its strategy and width, failed or hung."""
    why = f"{first.spec.name}, smaller, at this aspect ratio ended {first.outcome} ({first.message or 'no message'})"
    return ProbeResult(spec, NOT_PROBED, why, num_params=num_params, extra={"after": first.stop_record()})


def _recorded_in(run_dir: Path) -> dict | None:
    """The probe recorded in `run_dir` (run.json's `capacity`), whatever its settings and outcome; None where none is,
    or its run.json cannot be read (said already, as the probe was read back)."""
    try:
        cap = read_run_json(run_dir).get("capacity")
    except (RunJsonError, OSError):
        return None
    return cap if isinstance(cap, dict) and cap.get("outcome") else None


def _other_settings(cap: dict, spec: ProbeSpec) -> str:
    """How a probe recorded before differs from `spec`: its settings, or else the machine or time limit."""
    stored = recorded_spec(cap) if isinstance(cap.get("probe"), dict) else {}
    return _changed(stored, asdict(spec)) or "another device or a shorter --time-per-point"


def _changed(was: dict, now: dict) -> str:
    """`nproc=1, max_seq_len=64`: the values `was` recorded where they differ from `now`'s."""
    return ", ".join(f"{k}={was.get(k)}" for k in now if was.get(k) != now[k])


def _powers_of_two(top: int) -> list[int]:
    """The powers of two up to `top`, largest first."""
    return [2 ** i for i in reversed(range(top.bit_length()))]


def _shape_dict(shape: Shape | None) -> dict | None:
    return None if shape is None else {"name": shape.name, "depth": shape.depth, "aspect_ratio": shape.aspect_ratio,
                                       "num_params": shape.num_params}


def ratios_to_fsdp(searches: list[dict]) -> list[float | None]:
    """Each search's capacity over fsdp's, from the searches' rows (the report recomputes it: a summary of an
    older release stored one against an unfinished fsdp search). A ratio only between the node's capacities of
    one shape family: not of an unfinished search (a lower bound), nor of one whose first failure came while
    other processes held the GPU's memory (a capacity of what they left, set beside one that saw other free memory),
    and zero2's widths of 32 x depth are not compared with fsdp's of 64 x depth."""
    node = lambda s: s.get("capacity") and s.get("complete") and not s.get("held_by_others_bytes")  # noqa: E731
    refs = {s["aspect_ratio"]: s["capacity"] for s in searches if s["strategy"] == REFERENCE and node(s)}
    out = []
    for s in searches:
        ref = refs.get(s["aspect_ratio"])
        out.append(s["capacity"]["num_params"] / ref["num_params"] if ref and node(s) else None)
    return out


# Of a GPU, the share other processes may hold as a probe starts before its out of memory is theirs as much as the
# model's (an idle GPU shows a few hundred MiB used at most; the sweep itself holds no CUDA context).
OTHERS_SHARE = 0.05


def held_by_others(probe: ProbeResult) -> int | None:
    """Bytes of its GPU that other processes held as this probe started, when more than OTHERS_SHARE of it."""
    total, free = probe.extra.get("device_bytes"), probe.device_free_bytes
    held = total - free if total and free is not None else 0
    return held if held > OTHERS_SHARE * (total or 0) else None


def _probes_of(results: list[ProbeResult], strategy: str, shape: dict | None) -> list[ProbeResult]:
    """The probes of `strategy` at a search's recorded `shape` (its capacity or first failure; none for None)."""
    return [r for r in results if shape and r.spec.strategy == strategy and r.spec.depth == shape["depth"]
            and r.spec.aspect_ratio == shape["aspect_ratio"]]


def summarize(config: dict, machine_info: dict, results: list[ProbeResult], searches: list[dict],
              not_probed: list[ProbeResult] = ()) -> dict:
    """summary.json: the machine, the settings, per strategy its capacity and best speeds, every probe, and the
    --depths points not probed after a smaller one of their aspect ratio failed or hung (`after`: that one)."""
    probes = [dict(r.record(), run_dir=r.run_dir, reused=r.reused) for r in results if r.outcome != "budget"]
    for s in searches:
        at_cap = [r for r in _probes_of(results, s["strategy"], s.get("capacity")) if r.fits]
        best = max(at_cap, key=lambda r: r.tok_per_sec, default=None)
        s["tok_per_sec_at_capacity"] = best.tok_per_sec if best else None
        s["batch_at_capacity"] = best.spec.device_batch_size if best else None
        # the out of memory that bounds the capacity, on a GPU shared with others: their memory, not the node's
        at_fail = [r for r in _probes_of(results, s["strategy"], s.get("first_failure"))
                   if r.outcome == "oom" and r.spec.device_batch_size == 1]
        s["held_by_others_bytes"] = max(filter(None, map(held_by_others, at_fail)), default=None)
    for s, ratio in zip(searches, ratios_to_fsdp(searches)):  # after held_by_others_bytes, which it reads
        s["ratio_to_fsdp"] = ratio
    skipped = sum(r.outcome == "budget" for r in results)
    return {"machine": machine_info, "config": config, "searches": searches, "probes": probes,
            "not_probed": [r.record() for r in not_probed], "not_run_for_budget": skipped, "written_at": time.time()}


CSV_FIELDS = ["strategy", "depth", "aspect_ratio", "device_batch_size", "num_params", "outcome", "peak_mem_mib",
              "predicted_peak_bytes", "predicted_need_bytes", "predicted_host_bytes", "host_peak_bytes",
              "vm_peak_bytes", "device_bytes", "device_free_bytes", "tok_per_sec", "mfu", "step_ms", "oom_bytes",
              "wall_s", "message", "run_dir"]


def save_summary(out: Path, summary: dict) -> None:
    """summary.json, and its probes as probes.csv, into the sweep directory `out`."""
    write_json_atomic(out / SUMMARY_JSON, summary)
    with atomic_target(out / PROBES_CSV) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for p in summary["probes"] + summary.get("not_probed", []):
            w.writerow({**p, **{k: p["probe"][k] for k in ("strategy", "depth", "aspect_ratio", "device_batch_size")}})


def format_table(summary: dict) -> list[str]:
    lines = ["", f"{'strategy':<18}{'capacity':>10}{'params':>16}{'x fsdp':>8}{'tok/s':>10}  first failure"]
    for s in summary["searches"]:
        cap, fail, stop = s.get("capacity"), s.get("first_failure"), s.get("stopped")
        ratio = f"{s['ratio_to_fsdp']:.2f}" if s.get("ratio_to_fsdp") else "-"
        tps = f"{s['tok_per_sec_at_capacity']:,.0f}" if s.get("tok_per_sec_at_capacity") else "-"
        end = f"{fail['name']} ({fail['num_params']:,})" if fail else \
            f"{stop['outcome']} at {stop['shape']}" if stop else \
            "none (largest candidate fits)" if s.get("complete") else "- (search not finished or not run)"
        if fail and stop:  # stopped between its bounds: the capacity is a lower bound, the border not found
            end += f"; search stopped by {stop['outcome']} at {stop['shape']}"
        if s.get("held_by_others_bytes"):
            end += f", when other processes held {s['held_by_others_bytes'] / 2**30:.1f} GiB of the GPU"
        name = s["strategy"] + ("" if s["aspect_ratio"] == 64 else f" a{s['aspect_ratio']}")
        lines.append(f"{name:<18}{cap['name'] if cap else '-':>10}{format(cap['num_params'], ',') if cap else '-':>16}"
                     f"{ratio:>8}{tps:>10}  {end}")  # last, left-aligned: a long one never runs into tok/s
    if any(s.get("held_by_others_bytes") for s in summary["searches"]):
        lines.append("(a first failure while other processes held the GPU's memory bounds that capacity by what they "
                     f"left, not by the node, and no 'x {REFERENCE}' is taken to or from it: run where the GPUs are "
                     "the sweep's alone, e.g. an exclusive job)")
    if summary.get("interrupted"):
        lines.append(f"(interrupted by {summary['interrupted']} after {len(summary['probes'])} finished probe(s); "
                     "run again to resume)")
    if summary.get("not_run_for_budget"):
        lines.append(f"(time budget spent: {summary['not_run_for_budget']} probe(s) cut or not started, the sweep "
                     "did not finish; run again to resume)")
    return lines


def load_summary(out: str | os.PathLike) -> dict:
    """summary.json of the sweep directory `out`; ConfigError when it is missing or not a summary (cut, edited)."""
    path = Path(out) / SUMMARY_JSON
    if not path.is_file():
        raise ConfigError(f"{path}: no capacity summary there (run `nanochat-bench capacity --out {out}` first)")
    damaged = (f"{path} is not a capacity summary ({{}}); delete it and `nanochat-bench capacity --report --out {out}` "
               "rebuilds it from the finished probes")
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ConfigError(damaged.format(e)) from None
    kinds = {"machine": dict, "searches": list, "probes": list}
    if not isinstance(summary, dict) or not all(isinstance(summary.get(k), t) for k, t in kinds.items()):
        raise ConfigError(damaged.format(f"it needs {', '.join(kinds)}"))
    return summary
