"""Every runtime's rendering of a site's network set-up (bench/sites): what the Alps profile asks for appears
in each runtime's own syntax, --env still wins, and a CPU run gets none of it."""

import tomllib
from dataclasses import replace

import pytest

from bench import netgate, runtimes, sites
from bench.runtimes.base import LaunchSpec, Mount, shell_join

ALPS = sites.load("alps")
NETSTACK = "/capstor/store/cscs/cscs/public/containers/netstack/aarch64/latest/default"


def spec_for(runtime: str, tmp_path, **kw) -> LaunchSpec:
    image = {"ce": "/s/img.sqsh", "pyxis": "/s/img.sqsh", "apptainer": "/s/img.sif"}.get(
        runtime, runtimes.get(runtime).default_image)
    base = LaunchSpec(command=("torchrun", "-m", "bench.nanochat.train"), image=image,
                      mounts=(Mount("/scratch/me"),), env={"NANOCHAT_BASE_DIR": "/scratch/me/cache"},
                      run_dir=str(tmp_path), gpus=True, **kw)
    return sites.apply(ALPS, runtime, base)


def rendered(runtime: str, spec: LaunchSpec) -> str:
    rt = runtimes.get(runtime)
    text = shell_join(rt.srun_options(spec)) + " " + shell_join(rt.wrap(spec))
    if hasattr(rt, "edf_text"):
        text += "\n" + rt.edf_text(spec)
    if runtime == "apptainer":
        rt.write_files(spec)
        text += "\n" + rt.env_file(spec).read_text()
    return text


@pytest.mark.parametrize("runtime", runtimes.names())
def test_every_runtime_learns_the_network_to_expect(runtime, tmp_path):
    spec = spec_for(runtime, tmp_path)
    assert spec.env[netgate.ENV_EXPECT] == "AWS Libfabric"
    assert spec.env["NCCL_NET"] == "AWS Libfabric"
    assert runtime in spec.env[netgate.ENV_SETUP]
    assert spec.env["NANOCHAT_BASE_DIR"] == "/scratch/me/cache"  # the run's own variables kept


def test_ce_carries_the_hooks(tmp_path):
    edf = tomllib.loads(runtimes.get("ce").edf_text(spec_for("ce", tmp_path)))
    hooks = edf["annotations"]["com"]["hooks"]
    assert hooks["aws_ofi_nccl"] == {"enabled": "true", "variant": "cuda-dl"}
    assert hooks["cxi"]["enabled"] == "true"
    assert edf["env"]["NCCL_NET"] == "AWS Libfabric" and "FI_CXI_RX_MATCH_MODE" not in edf["env"]


def test_ce_without_the_hook_is_the_env_only_set(tmp_path):
    edf = tomllib.loads(runtimes.get("ce").edf_text(spec_for("ce", tmp_path, ofi_hook="off")))
    hooks = edf["annotations"]["com"]["hooks"]
    assert hooks["aws_ofi_nccl"]["enabled"] == "false" and hooks["cxi"]["enabled"] == "true"
    assert edf["env"]["FI_CXI_RX_MATCH_MODE"] == "software" and edf["env"]["NCCL_PROTO"] == "^LL128"


def test_sarus_suite_enables_cxi_and_gdrcopy(tmp_path):
    edf = tomllib.loads(runtimes.get("sarus-suite").edf_text(spec_for("sarus-suite", tmp_path)))
    assert edf["annotations"]["com"]["hooks"]["cxi"]["enabled"] == "true"
    assert "/dev/gdrdrv" in edf["devices"]


@pytest.mark.parametrize("runtime", ["ce", "sarus-suite"])
def test_ofi_hook_on_keeps_the_sites_cxi_hook_and_records_what_was_rendered(runtime, tmp_path):
    """Regression: `--ofi-hook on` dropped the site's annotations, so Sarus Suite (which enables nothing by
    itself) got the aws_ofi_nccl hook without CXI, while run.json's site record still named the CXI hook."""
    spec = spec_for(runtime, tmp_path, ofi_hook="on")
    hooks = tomllib.loads(runtimes.get(runtime).edf_text(spec))["annotations"]["com"]["hooks"]
    assert hooks["aws_ofi_nccl"] == {"enabled": "true", "variant": "cuda-dl"} and hooks["cxi"]["enabled"] == "true"
    assert sites.record(ALPS, runtime, spec)["applied"]["annotations"] == dict(spec.annotations)


def test_the_site_record_holds_the_values_the_run_got(tmp_path):
    base = LaunchSpec(command=("true",), env={"NCCL_PROTO": "Simple"}, gpus=True, run_dir=str(tmp_path))
    applied = sites.record(ALPS, "bare", sites.apply(ALPS, "bare", base))["applied"]
    assert applied["env"]["NCCL_PROTO"] == "Simple" and applied["env"]["NCCL_NET"] == "AWS Libfabric"
    assert sites.record(ALPS, "bare", replace(base, gpus=False))["applied"] is None


@pytest.mark.parametrize("runtime, pieces", [
    ("pyxis", [f"--container-mounts=/scratch/me:/scratch/me,{NETSTACK}:{NETSTACK}:ro", "NCCL_NET_PLUGIN"]),
    ("apptainer", [f"--bind={NETSTACK}:{NETSTACK}:ro", "--bind=/dev/cxi0", "--bind=/dev/cxi3",
                   "FI_CXI_DISABLE_HOST_REGISTER=1"]),
    ("podman", [f"--volume={NETSTACK}:{NETSTACK}:ro", "--device=hpe.com/cxi=all", "--device=/dev/gdrdrv",
                "'--env=NCCL_NET=AWS Libfabric'"]),
    ("podman-hpc", ["--gpu", "--nccl", "--env=FI_MR_CACHE_MONITOR=userfaultfd"]),
    ("sarus", [f"--mount=type=bind,source={NETSTACK},destination={NETSTACK},readonly", "--device=/dev/cxi0",
               "FI_CXI_RX_MATCH_MODE=software"]),
])
def test_runtimes_without_hooks_bind_the_network_stack(runtime, pieces, tmp_path):
    text = rendered(runtime, spec_for(runtime, tmp_path))
    for piece in pieces:
        assert piece in text, (runtime, piece)
    assert runtimes.get(runtime).wrap(spec_for(runtime, tmp_path)).count("--nccl") <= 1


def test_env_overrides_the_site(tmp_path):
    base = LaunchSpec(command=("true",), env={"NCCL_PROTO": "Simple"}, gpus=True, run_dir=str(tmp_path))
    assert sites.apply(ALPS, "bare", base).env["NCCL_PROTO"] == "Simple"


def test_a_cpu_run_gets_no_network_set_up(tmp_path):
    base = LaunchSpec(command=("true",), env={}, gpus=False, run_dir=str(tmp_path))
    assert sites.apply(ALPS, "podman", base) == base


def test_a_site_without_hook_annotations_records_what_ofi_hook_renders(tmp_path):
    """On a site that gives CE no annotations, `--ofi-hook on` still renders the hook: run.json must say so."""
    site = sites.load("infiniband")
    base = LaunchSpec(command=("true",), image="/s/img.sqsh", env={}, gpus=True, run_dir=str(tmp_path), ofi_hook="on")
    spec = sites.apply(site, "ce", base)
    hooks = tomllib.loads(runtimes.get("ce").edf_text(spec))["annotations"]["com"]["hooks"]
    assert hooks["aws_ofi_nccl"]["enabled"] == "true"
    assert sites.record(site, "ce", spec)["applied"]["annotations"] == dict(spec.annotations)
    assert sites.apply(site, "pyxis", replace(base, image="/s/img.sqsh")).annotations is None  # no hooks there


@pytest.mark.parametrize("runtime", ["podman", "podman-hpc"])
def test_podman_passes_the_steps_slingshot_variables(runtime, tmp_path):
    """Regression: podman passes no host variable it is not told to, so the SLINGSHOT_VNIS/SVC_IDS/DEVICES that
    Slurm's switch plugin sets for each step never reached libfabric's cxi provider, which then had no auth key
    for the job's VNI and could not reach the other nodes."""
    wrapped = runtimes.get(runtime).wrap(spec_for(runtime, tmp_path))
    assert "--env=SLINGSHOT_*" in wrapped
    assert wrapped.index("--env=SLINGSHOT_*") < wrapped.index(spec_for(runtime, tmp_path).image)


@pytest.mark.parametrize("ofi_hook", ["default", "off"])
@pytest.mark.parametrize("runtime", [name for name in runtimes.names() if name != "bare"])
def test_every_container_is_held_to_the_cxi_provider(runtime, ofi_hook, tmp_path):
    """Regression: without FI_PROVIDER, aws-ofi-nccl in a container that lacks the CXI devices or the step's
    SLINGSHOT_* took libfabric's tcp provider: NCCL still said "Using network AWS Libfabric", the gate let the run
    through, and it trained over TCP, read as the runtime's overhead. Held to cxi, such a run fails to start."""
    spec = spec_for(runtime, tmp_path, ofi_hook=ofi_hook)
    text = rendered(runtime, spec)
    assert spec.env["FI_PROVIDER"] == "cxi"
    assert any(piece in text for piece in ("FI_PROVIDER=cxi", 'FI_PROVIDER = "cxi"', "FI_PROVIDER,")), runtime


def test_bare_is_held_to_the_cxi_provider(tmp_path):
    assert spec_for("bare", tmp_path).env["FI_PROVIDER"] == "cxi"  # exported by the batch script
