"""A site's network set-up applied to one run's launch spec: the one place a profile meets a runtime.

The site's variables go under the run's own (so `--env NAME=VALUE` wins), its binds after the run's mounts,
its annotations, devices and switches into the fields each runtime renders in its own syntax
(bench/runtimes/*). GPU runs also learn which network NCCL must choose (bench/netgate.py).
"""

from dataclasses import replace

from bench import netgate, runtimes
from bench.runtimes import edf
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
    annotations = hook_annotations(setup, spec.ofi_hook) if runtimes.get(runtime).ofi_hook else None
    return replace(spec, env=env, mounts=mounts, annotations=annotations, devices=setup.devices, flags=setup.flags)


def hook_annotations(setup: NetworkSetup, ofi_hook: str) -> dict[str, str]:
    """The annotations a runtime with hooks (CE, Sarus Suite) renders: the site's, with `--ofi-hook on|off` over
    them (its other hooks, CXI's, kept: Sarus Suite enables nothing by itself), or `--ofi-hook`'s alone."""
    annotations = {**edf.ofi_hook_annotations(ofi_hook), **setup.annotations}
    if ofi_hook in ("on", "off"):
        annotations[edf.OFI_HOOK_ENABLED] = "true" if ofi_hook == "on" else "false"
    return annotations


def record(site: Site, runtime: str, spec: LaunchSpec) -> dict:
    """run.json's `site`: the profile, and for a GPU run what the run got of it, from the applied `spec`
    (the site's variables with any `--env` value over them, the annotations after `--ofi-hook`)."""
    record = {"name": site.name, "network": site.network, "nccl_net": site.nccl_net, "setup": None, "applied": None}
    if not spec.gpus:
        return record
    setup = site.network_setup(runtime, spec.ofi_hook)
    record["setup"] = setup.setup
    record["applied"] = {**setup.record(), "env": {k: spec.env[k] for k in setup.env if k in spec.env},
                         "annotations": dict(spec.annotations or {})}
    return record
