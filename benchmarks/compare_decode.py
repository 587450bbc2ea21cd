"""How fast chat evaluation decodes: our KV-cache engine against upstream nanochat's, same weights, same device.

    NANOCHAT_UPSTREAM_DIR=/tmp/upstream-nanochat python benchmarks/compare_decode.py --depth 20 \\
        [--prompt-tokens 256] [--max-new-tokens 512] [--samples 1,4] [--calls 3] [--out decode.json]

Both models are built at `--depth` with the speedrun's vocabulary (65,536) and hold the same random weights (a
decode step costs the same whatever the weights; greedy decoding, so both generate the same ids where the kernels
agree). Each engine generates from the same random prompt, bf16 autocast on CUDA as chat_eval runs, the engines
taking turns call by call (which one goes first alternates too); the figure is generated tokens over wall
seconds, prefill included, median of `--calls`. The rate of one sample is what `--assume-decode-tok-s` assumes
for chat_eval's estimate.
With `--new-shapes` every call's prompt is longer than any sequence before it, so no attention shape repeats (as
in the first problems of an evaluation, where each prompt has its own length); by default every call decodes the
same shapes (as once an evaluation has seen its lengths).
Upstream's tokenizer module needs its Rust extension (`rustbpe`); neither engine uses it, so a stand-in is
registered when it is missing. Needs a checkout of upstream at 5c93a56 (never vendored here).
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time
import types
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's bench, installed or not
VOCAB = 65536


class SpecialIds:
    """The engines' view of a tokenizer: special-token ids (the vocabulary's last ids, as ours are laid out)."""

    def __init__(self, names, vocab=VOCAB):
        self.ids = {name: vocab - len(names) + i for i, name in enumerate(names)}

    def encode_special(self, name):
        return self.ids[name]

    def get_bos_token_id(self):
        return self.ids["<|bos|>"]


def upstream_model(upstream: Path, depth: int, state, device):
    sys.path.insert(0, str(upstream))
    try:
        import rustbpe  # noqa: F401
    except ImportError:
        sys.modules["rustbpe"] = types.ModuleType("rustbpe")
    import torch
    from nanochat.engine import Engine
    from nanochat.gpt import GPT, GPTConfig

    dim = depth * 64
    config = GPTConfig(sequence_len=2048, vocab_size=VOCAB, n_layer=depth, n_head=(dim + 127) // 128,
                       n_kv_head=(dim + 127) // 128, n_embd=dim)
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=device)
    model.init_weights()
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval(), Engine


def upstream_checkout() -> Path | None:
    """$NANOCHAT_UPSTREAM_DIR (default /tmp/upstream-nanochat) when it holds upstream's engine, else None (said)."""
    upstream = Path(os.environ.get("NANOCHAT_UPSTREAM_DIR", "/tmp/upstream-nanochat"))
    if not (upstream / "nanochat" / "engine.py").is_file():
        print(f"error: no upstream nanochat checkout at {upstream} (set NANOCHAT_UPSTREAM_DIR)")
        return None
    return upstream


def build_engines(upstream: Path, depth: int, device_name: str | None):
    """Our engine and upstream's over the same random d`depth` weights, the device, and how to time a call
    there: ({"ours", "upstream"} engines, device, autocast context factory, sync)."""
    import torch

    from bench.nanochat.engine import Engine
    from bench.nanochat.gpt import GPTConfig, build_model
    from bench.nanochat.tokenizer import SPECIAL_TOKENS

    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    ours = build_model(GPTConfig.from_depth(depth, VOCAB), device).eval()
    theirs, UpEngine = upstream_model(upstream, depth, {k: v.clone() for k, v in ours.state_dict().items()}, device)
    tokenizer = SpecialIds(SPECIAL_TOKENS)
    engines = {"ours": Engine(ours, tokenizer, calculator=lambda expr: None), "upstream": UpEngine(theirs, tokenizer)}
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else nullcontext
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return engines, device, autocast, sync


def profile(name, engine, prompt, samples, max_new_tokens, autocast, sync) -> None:
    """One call under torch.profiler: how many kernels the host launched, their GPU time, the call's wall time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, autocast():
        t0 = time.perf_counter()
        engine.generate_batch(prompt, num_samples=samples, max_tokens=max_new_tokens, temperature=0.0)
        sync()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel"))
    gpu_ms = sum(e.self_device_time_total for e in events) / 1e3
    print(f"{name:9s} samples {samples}, profiled: {launches:,} kernel launches, {gpu_ms:,.1f} ms on the GPU, "
          f"{1e3 * wall:,.1f} ms wall (profiler overhead included)", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=20)
    p.add_argument("--prompt-tokens", type=int, default=256, help="prompt length (default 256)")
    p.add_argument("-m", "--max-new-tokens", type=int, default=512, help="tokens per sample (chat_eval's -m, 512)")
    p.add_argument("--samples", default="1,4", help="num_samples values, comma-separated (default 1,4)")
    p.add_argument("--calls", type=int, default=3, help="timed calls per engine and setting (default 3)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda where torch sees a GPU)")
    p.add_argument("--new-shapes", action="store_true", help="a longer prompt every call: no shape repeats")
    p.add_argument("--profile", action="store_true", help="then profile one call of each engine (torch.profiler): "
                   "kernel launches and GPU time against wall time")
    p.add_argument("--out", help="write the figures as JSON here")
    args = p.parse_args(argv)
    upstream = upstream_checkout()
    if upstream is None:
        return 2
    import torch

    from bench.nanochat.tokenizer import SPECIAL_TOKENS

    engines, device, autocast, sync = build_engines(upstream, args.depth, args.device)
    sample_counts = [int(n) for n in args.samples.split(",")]
    stride = args.max_new_tokens + 1 if args.new_shapes else 0  # each call's prompt past the last call's sequence
    lengths = itertools.count(args.prompt_tokens, stride)  # the prompt length of each call in turn
    longest = args.prompt_tokens + stride * 2 * (args.calls + 1) * len(sample_counts)
    words = torch.randint(0, VOCAB - len(SPECIAL_TOKENS), (longest,), generator=torch.Generator().manual_seed(1))
    rows = []
    for samples in sample_counts:
        times = {name: [] for name in engines}
        generated = {}
        for call in range(args.calls + 1):  # the first call of each warms up
            for name, engine in sorted(engines.items(), reverse=call % 2 == 1):  # who goes first alternates
                prompt = words[:next(lengths)].tolist()
                sync()
                t0 = time.perf_counter()
                with autocast():
                    out, _ = engine.generate_batch(prompt, num_samples=samples, max_tokens=args.max_new_tokens,
                                                   temperature=0.0)
                sync()
                if call:
                    times[name].append(time.perf_counter() - t0)
                generated[name] = [r[len(prompt):] for r in out]
        same = len({len(r) for r in generated.values()}) == 1 if stride else generated["ours"] == generated["upstream"]
        for name in engines:
            tokens = sum(map(len, generated[name]))
            s = statistics.median(times[name])
            rows.append({"engine": name, "samples": samples, "tokens": tokens, "seconds": s, "tok_s": tokens / s,
                         "ms_per_step": 1e3 * s / max(map(len, generated[name]))})
            print(f"{name:9s} samples {samples}: {tokens} tokens in {s:.3f} s (median of {args.calls}): "
                  f"{tokens / s:,.1f} generated tok/s, {rows[-1]['ms_per_step']:.2f} ms per step", flush=True)
        print(f"          samples {samples}: generated {'ids' if not stride else 'lengths'} "
              f"{'equal' if same else 'DIFFERENT'}", flush=True)
    if args.profile:
        for samples in sample_counts:
            for name, engine in engines.items():
                profile(name, engine, words[:args.prompt_tokens].tolist(), samples, args.max_new_tokens, autocast, sync)
    info = {"depth": args.depth, "prompt_tokens": args.prompt_tokens, "max_new_tokens": args.max_new_tokens,
            "new_shapes": args.new_shapes,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
            "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(info, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
