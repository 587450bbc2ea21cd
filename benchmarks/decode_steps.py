"""Where a decode step's time goes as the sequence grows: our engine against upstream nanochat's, step by step.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat python benchmarks/decode_steps.py --depth 20 \\
        [-m 512] [--samples 1] [--calls 3] [--gc-off] [--cprofile]

The models and prompt are compare_decode.py's (same random weights in both, greedy, bf16 autocast on CUDA).
Each step is timed from one yield of `Engine.generate` to the next (a step ends in a host sync: its sampled ids
are read back), the median over `--calls` calls per step, engines taking turns; the figure per bucket of 64
steps shows whether a gap between the engines grows with the cache position. `--gc-off` runs with Python's
garbage collector off (its pauses land on single steps); `--cprofile` then prints each engine's host-side
functions over one call (cProfile's own cost included), to say which Python code a host-bound step spends on.
"""

import argparse
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's bench, installed or not
import compare_decode  # noqa: E402

BUCKET = 64


def step_times(engine, prompt, samples, max_new_tokens, autocast, sync) -> list[float]:
    """Seconds of each step of one call (the first includes the prefill)."""
    times = []
    with autocast():
        sync()
        t = time.perf_counter()
        for _ in engine.generate(prompt, num_samples=samples, max_tokens=max_new_tokens, temperature=0.0):
            now = time.perf_counter()
            times.append(now - t)
            t = now
    sync()
    return times


def by_bucket(calls: list[list[float]]) -> list[float]:
    """ms a step, the median over calls of each step, averaged over each bucket of steps."""
    steps = min(map(len, calls))
    per_step = [1e3 * statistics.median(call[i] for call in calls) for i in range(steps)]
    return [statistics.mean(per_step[i:i + BUCKET]) for i in range(0, steps, BUCKET)]


def host_profile(engine, prompt, samples, max_new_tokens, autocast, lines=12) -> str:
    profiler = cProfile.Profile()
    with autocast():
        profiler.enable()
        for _ in engine.generate(prompt, num_samples=samples, max_tokens=max_new_tokens, temperature=0.0):
            pass
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(lines)
    return out.getvalue().split("ncalls", 1)[-1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--prompt-tokens", type=int, default=256, help="prompt length (default 256)")
    p.add_argument("-m", "--max-new-tokens", type=int, default=512, help="tokens per sample (default 512)")
    p.add_argument("--samples", type=int, default=1, help="num_samples (default 1)")
    p.add_argument("--calls", type=int, default=3, help="timed calls per engine after one warm-up (default 3)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where torch sees a GPU)")
    p.add_argument("--gc-off", action="store_true", help="Python's garbage collector off while timing")
    p.add_argument("--cprofile", action="store_true", help="then one call of each engine under cProfile")
    args = p.parse_args(argv)
    upstream = compare_decode.upstream_checkout()
    if upstream is None:
        return 2
    import torch

    from bench.nanochat.tokenizer import SPECIAL_TOKENS

    engines, _, autocast, sync = compare_decode.build_engines(upstream, args.depth, args.device)
    vocab = compare_decode.VOCAB - len(SPECIAL_TOKENS)
    prompt = torch.randint(0, vocab, (args.prompt_tokens,), generator=torch.Generator().manual_seed(1)).tolist()
    run = (args.samples, args.max_new_tokens, autocast, sync)

    calls = {name: [] for name in engines}
    if args.gc_off:
        gc.disable()
    for call in range(args.calls + 1):  # the first call of each warms up
        for name, engine in sorted(engines.items(), reverse=call % 2 == 1):  # who goes first alternates
            times = step_times(engine, prompt, *run)
            if call:
                calls[name].append(times)
    gc.enable()
    print(f"ms a step, median of {args.calls} calls, mean of each {BUCKET} steps "
          f"(samples {args.samples}, gc {'off' if args.gc_off else 'on'}):")
    for name, timed in calls.items():
        total = sum(statistics.median(c[i] for c in timed) for i in range(min(map(len, timed))))
        print(f"{name:9s} {1e3 * total:9.1f} ms in all | " + " ".join(f"{b:6.2f}" for b in by_bucket(timed)))
    if args.cprofile:
        for name, engine in engines.items():
            print(f"----- {name}: host functions over one call, by own time\n   ncalls"
                  + host_profile(engine, prompt, *run[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
