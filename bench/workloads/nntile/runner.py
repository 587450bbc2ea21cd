"""NNTile's GPT-2 training on StarPU, leaving the run directory every nanochat-bench run leaves.

Runs in the NNTile interpreter (Python 3.12 with torch-nntile; bench/workloads/nntile/env.sh makes one):
  <nntile python> bench/workloads/nntile/runner.py --config-path=cfg.json --batch=8 --dataset-path=DIR
  python -m bench.workloads.nntile.runner ...      # where nanochat-bench is installed in that Python (the image)
Flags: bench/workloads/nntile/config.py. Run by its path, it imports the `bench` package from beside
itself and nothing else of the Python that installed it (that Python's compiled packages are not ours).

What it does, in the order of NNTile's gpt2_custom_training.py: check the flags and the data (before
StarPU starts); start StarPU (workers: STARPU_NCPU / STARPU_NCUDA, else every core and GPU; --restrict);
build the GPT-2; the timed forward and forward+backward passes on random tokens when asked; then
--nepochs-warmup + --nepochs epochs over train.bin, one optimizer step per --batch sequences. Each step
is recorded as nanochat's trainer records it (step event, nanochat's step line) plus the CPU-seconds the
process spent in it: on a shared or small machine wall time alone misleads. Steps 0..10 and the warm-up
epochs stay out of the total training time; the first steps also calibrate StarPU's performance models
(kept under STARPU_HOME, which the launcher pins, so later runs start calibrated).
"""

import os
import sys
import time

if __package__ in (None, ""):  # run by path: make `bench` importable from beside this file, alone
    import importlib.util
    from pathlib import Path

    _pkg = Path(__file__).resolve().parents[2]
    _spec = importlib.util.spec_from_file_location("bench", _pkg / "__init__.py",
                                                   submodule_search_locations=[str(_pkg)])
    sys.modules["bench"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["bench"])

import math

from bench.errors import ConfigError
from bench.logline import format_step_line
from bench.metrics import WARMUP_STEPS, mfu_percent, peak_flops
from bench.runside.guard import DivergenceGuard
from bench.runside.runrecord import RunRecord, open_record
from bench.workloads.nntile import WORKLOAD_NAME
from bench.workloads.nntile.config import (TILES, as_record, check_dataset, flops_per_token, inner_note, parse_args,
                                           workers)


def log(text: str) -> None:
    print(text, flush=True)


def software_versions(torch_nntile) -> dict:
    """torch-nntile's, StarPU's (from the library bundled in the wheel) and transformers' versions."""
    import ctypes
    import glob
    from importlib import metadata

    info = {"nntile": metadata.version("torch-nntile"), "transformers": metadata.version("transformers"),
            "nntile_built_with_cuda": bool(torch_nntile.built_with_cuda())}
    # torch_nntile*/ covers the package and the wheel's torch_nntile.libs/ (auditwheel's bundled libraries)
    libs = glob.glob(os.path.join(os.path.dirname(torch_nntile.__file__) + "*", "**", "libstarpu-*.so*"),
                     recursive=True)
    for lib in libs:
        try:
            major, minor, release = (ctypes.c_int(), ctypes.c_int(), ctypes.c_int())
            ctypes.CDLL(lib).starpu_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
            info["starpu"] = f"{major.value}.{minor.value}.{release.value}"
            break
        except (OSError, AttributeError):
            continue
    return info


def timed_passes(model, torch, torch_nntile, config, shape, backward: bool, tile) -> dict | None:
    """NNTile's throughput passes on random tokens: warm-up passes, then timed ones (no optimizer step), each
    graph cut by `tile` as the training steps' are (the first compiled graph fixes the weights' tiles)."""
    n, warm = (config.nbackward, config.nbackward_warmup) if backward else (config.nforward, config.nforward_warmup)
    if n <= 0:
        return None
    from torch_nntile.training import cross_entropy

    tokens = torch.randint(shape["vocab_size"], (config.minibatch, shape["n_positions"])).to("nntile")

    def one():
        if backward:
            loss = cross_entropy(model(tokens), tokens)
            loss.backward()
            del loss
            for p in model.parameters():
                p.grad = None
        else:
            with torch.no_grad():
                model(tokens)  # the output is not kept: only the pass is timed
        tile(tokens)
        torch_nntile.compile_graph()
        torch_nntile.run()

    for _ in range(warm):
        one()
    torch_nntile.wait()
    t0 = time.time()
    for _ in range(n):
        one()
    torch_nntile.wait()
    dt = time.time() - t0
    tok = config.minibatch * shape["n_positions"] * n
    kind = "forward+backward" if backward else "forward"
    log(f"NNTile {kind}: {n} passes in {dt:.3f} s, {tok / dt:,.0f} tok/s")
    return {"passes": n, "warmup": warm, "time_s": dt, "tok_per_sec": tok / dt}


def learning_rate(config, it: int) -> float:
    """NNTile's AdamW warm-up: linear from --start-lr at iteration 1 to --lr at --full-lr-iter."""
    if it < config.full_lr_iter and config.full_lr_iter > 1:
        return config.start_lr + (config.lr - config.start_lr) * (it - 1) / (config.full_lr_iter - 1)
    return config.lr


def train(argv: list[str], record: RunRecord) -> dict:
    record.update(workload=WORKLOAD_NAME)  # before record.start, whose default is nanochat's
    config, shape = parse_args(argv)
    data = check_dataset(config, shape)  # every check before StarPU starts
    if note := inner_note(config.config_path, shape):
        log(note)

    try:
        import numpy as np
        import torch

        import torch_nntile
        from torch_nntile.training import SGD, Adam, AdamW, cross_entropy
    except ModuleNotFoundError as e:  # a --python or NANOCHAT_BENCH_NNTILE_PYTHON that is not the NNTile environment
        raise ConfigError(f"{sys.executable} cannot import {e.name or e}: the nntile workload needs the NNTile "
                          "environment (bench/workloads/nntile/env.sh builds it); pass its interpreter as --python "
                          "or NANOCHAT_BENCH_NNTILE_PYTHON") from None
    except ImportError as e:  # found but not loadable: a library missing on the node, or one a memory cap cannot map
        raise ConfigError(f"{sys.executable} cannot load torch_nntile (or the torch it links): {e}; check the "
                          "node's CUDA libraries and memory limit (ulimit -v), or rebuild the environment with "
                          "bench/workloads/nntile/env.sh") from None

    from bench.workloads.nntile import model as nmodel

    record.emit("imports_done")  # else the report's "process group" phase holds the imports as well as StarPU's start
    # ----------------------------------------------------------------------------------------------
    # StarPU
    # counted only for --restrict=cuda: device_count is 0 without a GPU, where StarPU would fail at the first task
    ncpu, ncuda = workers(config.restrict, gpus=torch.cuda.device_count() if config.restrict == "cuda" else None)
    torch_nntile.init_context(ncpu=ncpu, ncuda=ncuda, cpu_fallback=False)
    if config.restrict == "cuda":
        torch_nntile.restrict_cuda()
    elif config.restrict == "cpu":
        torch_nntile.restrict_cpu()
    gpus = torch.cuda.device_count() if ncuda != 0 and torch.cuda.is_available() else 0
    gpus = min(gpus, ncuda) if ncuda > 0 else gpus
    world_size = max(1, gpus)  # MFU and per-GPU figures count GPUs; a CPU run is one process
    record.emit("dist_init", world_size=world_size, backend="starpu", ncpu=ncpu, ncuda=gpus)
    gpu_name = torch.cuda.get_device_name(0) if gpus else None
    peak = peak_flops(gpu_name)
    record.start(as_record(config, shape), world_size, 1, gpus, peak)
    record.update(software=software_versions(torch_nntile),
                  nntile={"starpu": {"ncpu": ncpu, "ncuda": gpus, "restrict": config.restrict or None,
                                     "home": os.environ.get("STARPU_HOME")}, "dataset": data})
    log(f"StarPU workers: {ncpu} CPU, {gpus} CUDA{f' ({gpu_name})' if gpu_name else ''}; restrict: "
        f"{config.restrict or 'none'}")
    log(f"Peak FLOPs per GPU for MFU: {peak if peak else 'unknown (MFU not computed)'}")

    # ----------------------------------------------------------------------------------------------
    # Model
    T = shape["n_positions"]
    model = nmodel.build_model(shape, config.seed).to("nntile")
    num_params = sum(p.numel() for p in model.parameters())
    fpt = flops_per_token(shape)
    log(f"GPT-2: {shape['n_layer']} layers, n_embd {shape['n_embd']}, {shape['n_head']} heads, inner "
        f"{shape['n_inner']}, vocab {shape['vocab_size']:,}, context {T}")
    log(f"Tiles: batch {config.minibatch_tile}/{config.minibatch}, seq {config.seq_tile}/{T}, embd "
        f"{config.embd_tile}/{shape['n_embd']}, inner {config.inner_tile}/{shape['n_inner']}, heads "
        f"{config.head_tile}/{shape['n_head']}")
    log(f"Number of parameters: {num_params:,}")
    log(f"Estimated FLOPs per token: {fpt:e}")
    record.emit("model_ready", num_params=num_params, flops_per_token=fpt)
    record.update(num_params=num_params, flops_per_token=fpt)
    tiles = {f: getattr(config, f) for f in nmodel.AXIS_OF_TILE}
    axes = {**shape, "minibatch": config.minibatch}
    extents = {flag: axes[field] for flag, field in TILES}
    tiled = any(tiles[f] < extents[f] for f in tiles)

    def tile_graph(tokens) -> None:
        if tiled:
            nmodel.name_axes(model, tokens)
            nmodel.apply_tiling(tiles, extents)
            record_tiling()

    tiling_recorded = False

    def record_tiling() -> None:
        # what NNTile made of the tile flags: axis groups tiled of all in the first graph, which fixes the weights'
        nonlocal tiling_recorded
        if not tiling_recorded:
            record.update(nntile={"tiling": nmodel.tiling_summary()})
            tiling_recorded = True

    passes = {k: v for k, backward in (("forward", False), ("forward_backward", True))
              if (v := timed_passes(model, torch, torch_nntile, config, shape, backward, tile_graph)) is not None}
    if passes:
        record.update(nntile={"passes": passes})

    # ----------------------------------------------------------------------------------------------
    # Data: the file as the example cuts it, batches of batch x (T+1) tokens, minibatches inside them
    tokens = np.memmap(data["path"], dtype=np.uint16, mode="r")
    per_batch = config.batch * (T + 1)
    batches = data["batches_per_epoch"]
    epochs = config.nepochs_warmup + config.nepochs
    num_iterations = batches * epochs
    log(f"Train file: {data['path']} ({data['tokens']:,} tokens, {batches} batches per epoch, "
        f"{epochs} epochs of which {config.nepochs_warmup} warm-up); {config.num_minibatch} minibatch(es) of "
        f"{config.minibatch} per step")
    record.update(num_iterations=num_iterations, grad_accum=config.num_minibatch)

    params = list(model.parameters())
    optimizer_class = {"fusedadamw": AdamW, "fusedadam": Adam, "sgd": SGD}[config.optimizer]
    eps = {} if optimizer_class is SGD else {"eps": config.optimizer_eps}  # SGD takes no eps
    optimizer = optimizer_class(params, lr=config.lr, weight_decay=config.weight_decay, **eps)

    def batch_tensors(b: int):
        window = np.asarray(tokens[b * per_batch:(b + 1) * per_batch], dtype=np.int64)
        window = torch.from_numpy(window).view(config.num_minibatch, config.minibatch, T + 1)
        return [(mb[:, :-1].contiguous(), mb[:, 1:].contiguous()) for mb in window]

    # ----------------------------------------------------------------------------------------------
    # Training loop
    smooth_loss, total_time, timed_tokens, timed_time, timed_cpu = 0.0, 0.0, 0, 0.0, 0.0
    mfu = None
    # nanochat's rule, so a run whose loss runs away ends `diverged`, not `ok`; a uniform guess is the floor
    guard = DivergenceGuard(floor=math.log(shape["vocab_size"]), remedy=f"lower --lr (now {config.lr})")
    for step in range(num_iterations):
        epoch, b = divmod(step, batches)
        warmup_epoch = epoch < config.nepochs_warmup
        lr = learning_rate(config, step + 1)
        lrm = lr / config.lr if config.lr else 0.0
        for group in optimizer.param_groups:
            group["lr"] = lr
        minibatches = batch_tensors(b)
        t0, c0 = time.time(), time.process_time()
        step_loss, grads = None, [None] * len(params)
        weight = 1.0 / config.num_minibatch
        for x_cpu, y_cpu in minibatches:
            x, y = x_cpu.to("nntile"), y_cpu.to("nntile")
            loss = cross_entropy(model(x), y, reduction=config.loss_reduction)
            loss.backward()
            mb_loss = loss.detach()
            step_loss = mb_loss if step_loss is None else nmodel.add(step_loss, mb_loss)
            del loss
            if config.num_minibatch > 1:  # accumulate through NNTile's add (autograd's would be a torch op)
                for i, p in enumerate(params):
                    grads[i] = nmodel.accumulate(grads[i], p.grad, weight)
                    p.grad = None
            if tiled:
                nmodel.name_axes(model, x)
        if config.num_minibatch > 1:
            for p, g in zip(params, grads):
                p.grad = g
        del grads
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if tiled:
            nmodel.apply_tiling(tiles, extents)
            record_tiling()
        torch_nntile.compile_graph()
        torch_nntile.run()
        train_loss = step_loss.to("cpu").item() / config.num_minibatch  # waits for the step to finish
        dt, cpu_s = time.time() - t0, time.process_time() - c0
        guard.check(step, train_loss)  # before the value reaches a line or an event (NaN is not JSON)

        ema_beta = 0.9  # nanochat's debiased EMA of the train loss, so the two logs read alike
        smooth_loss = ema_beta * smooth_loss + (1 - ema_beta) * train_loss
        debiased = smooth_loss / (1 - ema_beta ** (step + 1))
        tok_per_sec = config.batch * T / dt
        mfu = mfu_percent(fpt, tok_per_sec, world_size, peak)
        if step > WARMUP_STEPS and not warmup_epoch:
            total_time += dt
        if not warmup_epoch:
            timed_tokens, timed_time, timed_cpu = timed_tokens + config.batch * T, timed_time + dt, timed_cpu + cpu_s
        log(format_step_line(step, num_iterations, debiased, lrm, dt, tok_per_sec, mfu, total_time))
        if step == 0:
            record.emit("first_step")
        record.emit("step", step=step, loss=debiased, lrm=lrm, dt_ms=dt * 1000, tok_per_sec=tok_per_sec, mfu=mfu,
                    total_time_s=total_time, train_loss=train_loss, cpu_s=cpu_s, epoch=epoch, warmup_epoch=warmup_epoch)

    # ----------------------------------------------------------------------------------------------
    torch_nntile.wait()
    cpu_total = time.process_time()
    training = {"tokens": timed_tokens, "time_s": timed_time, "cpu_s": timed_cpu,
                "tok_per_sec": timed_tokens / timed_time if timed_time else None,
                "tflops": fpt * timed_tokens / timed_time / 1e12 if timed_time else None}
    log(f"Training (timed epochs): {timed_tokens:,} tokens in {timed_time:.2f} s wall, {timed_cpu:.2f} s CPU "
        f"({training['tok_per_sec'] or 0:,.0f} tok/s)")
    log(f"Total training time: {total_time / 60:.2f}m")
    log(f"Process CPU time: {cpu_total:.1f} s")
    record.emit("end", peak_mem_mib=0.0, total_training_time_s=total_time, min_val_bpb=None,
                cpu_time_s=cpu_total)
    record.update(nntile={"training": training})
    return {"total_training_time_s": total_time, "final_mfu": mfu,
            "final_loss": smooth_loss / (1 - 0.9 ** num_iterations) if num_iterations else None,
            "cpu_time_s": cpu_total}


def main(argv: list[str] | None = None) -> int:
    """Records the run's status however it ends; a bad flag is one line, before StarPU starts."""
    record = open_record(0)
    if record is None:
        return 1
    try:
        record.emit("start")
        summary = train(sys.argv[1:] if argv is None else argv, record)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status, then the process ends
        if isinstance(e, SystemExit) and not e.code:
            return 0  # --help
        record.die(e)  # os._exit: StarPU's workers may hold locks a normal exit would wait for
    record.finish("ok", None, result=summary)
    import torch_nntile

    torch_nntile.shutdown_context()
    return 0


if __name__ == "__main__":
    sys.exit(main())
