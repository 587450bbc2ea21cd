"""A site's network set-up applied to one run's launch spec: the one place a profile meets a runtime.

The site's variables go under the run's own (so `--env NAME=VALUE` wins), its binds after the run's mounts,
its annotations, devices and switches into the fields each runtime renders in its own syntax
(bench/runtimes/*). GPU runs also learn which network NCCL must choose (bench/netgate.py).
"""

from dataclasses import replace

from bench import netgate
from bench.runtimes.base import LaunchSpec, Mount
from bench.sites.profile import NetworkSetup, Site


def apply(site: Site, runtime: str, spec: LaunchSpec) -> LaunchSpec:
    """`spec` with the site's network set-up for `runtime` (a CPU run gets none: gloo uses TCP)."""
    if not spec.gpus:
        return spec
    setup = site.network_setup(runtime, spec.ofi_hook)
    env = {**setup.env, **spec.env}
    if site.nccl_net:
        env.setdefault(netgate.ENV_EXPECT, site.nccl_net)
        env.setdefault(netgate.ENV_SETUP, f"{site.name}/{runtime}: {setup.setup}")
    mounts = spec.mounts + tuple(m for m in (Mount.parse(text) for text in setup.mounts) if m not in spec.mounts)
    # `--ofi-hook on` on a site whose set-up has no hook annotations still asks for the hook (bench/runtimes/ce.py).
    annotations = dict(setup.annotations) if setup.annotations and spec.ofi_hook != "on" else None
    return replace(spec, env=env, mounts=mounts, annotations=annotations, devices=setup.devices, flags=setup.flags)


def record(site: Site, runtime: str, spec: LaunchSpec) -> dict:
    """run.json's `site`: the profile, and for a GPU run the set-up its runtime got (as apply() applied it)."""
    setup: NetworkSetup | None = site.network_setup(runtime, spec.ofi_hook) if spec.gpus else None
    return {"name": site.name, "network": site.network, "nccl_net": site.nccl_net,
            "setup": setup.setup if setup else None, "applied": setup.record() if setup else None}
