"""Site profiles: the shipped ones load, every runtime of a Slingshot site gets a set-up, bad files say where."""

import pytest

from bench import runtimes, sites
from bench.errors import ConfigError


def test_shipped_profiles_load():
    assert {"alps", "infiniband", "test-cluster"} <= set(sites.names())
    for name in sites.names():
        site = sites.load(name)
        assert site.name == name and site.network in sites.NETWORKS and site.partitions


def test_alps_sets_up_every_runtime_for_slingshot():
    alps = sites.load("alps")
    assert alps.network == "slingshot" and alps.nccl_net == "AWS Libfabric" and alps.gpu == "GH200"
    assert set(alps.runtimes) == set(runtimes.names())
    for name in runtimes.names():
        setup = alps.network_setup(name)
        assert setup.setup, name
        assert setup.env["NCCL_NET"] == "AWS Libfabric", name  # a missing plugin fails, never falls back
    ce = alps.network_setup("ce")
    assert ce.annotations["com.hooks.aws_ofi_nccl.enabled"] == "true"
    assert ce.annotations["com.hooks.cxi.enabled"] == "true"
    assert "FI_CXI_RX_MATCH_MODE" not in ce.env  # the hook sets its own tuned values
    off = alps.network_setup("ce", ofi_hook="off")
    assert off.annotations["com.hooks.aws_ofi_nccl.enabled"] == "false"
    assert off.env["FI_CXI_RX_MATCH_MODE"] == "software"  # the seed's env-only set
    suite = alps.network_setup("sarus-suite")
    assert suite.annotations["com.hooks.cxi.enabled"] == "true" and "/dev/gdrdrv" in suite.devices
    assert alps.network_setup("bare").env["FI_CXI_DISABLE_HOST_REGISTER"] == "1"
    assert alps.partition("debug").max_time_s == 30 * 60


def test_a_site_file_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nnetwork = "infiniband"\nnccl_net = "IB"\ndescription = """two\nlines"""\n'
                    '[partitions.gpu]\nmax_time = "2-00:00:00"\nmax_nodes = 8\n'
                    '[runtimes.podman]\ndevices = ["/dev/infiniband"]\nmounts = ["/opt/a,b:/opt/a,b:ro"]\n')
    site = sites.load(str(path))
    assert site.partition("gpu").max_time_s == 2 * 86400 and site.partition("gpu").max_nodes == 8
    assert site.network_setup("podman").devices == ("/dev/infiniband",)
    assert site.network_setup("bare").env == {}


@pytest.mark.parametrize("text, words", [
    ('name = "x"\nnetwork = "myrinet"\n', ["network 'myrinet'", "slingshot"]),
    ('name = "x"\n', ["`network` is required: one of slingshot, infiniband, ethernet"]),
    ('name = "x"\nnetwork = "ethernet"\n[partitions.p]\nmax_time = "90 minutes"\n', ["partitions.p.max_time", "HH:MM:SS"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.docker]\n', ["runtimes.docker", "valid: bare"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.ce]\nenvs = {}\n', ["unknown key(s) envs"]),
    # keys the runtime would not render were dropped unseen: pyxis has no devices, podman no hook annotations
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.pyxis]\ndevices = ["/dev/infiniband"]\n',
     ["runtimes.pyxis: unknown key(s) devices; valid: env, mounts, setup"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.podman]\nannotations = { "com.hooks.x" = "true" }\n',
     ["runtimes.podman: unknown key(s) annotations"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.pyxis.without_hook]\nsetup = "x"\n',
     ["runtimes.pyxis: unknown key(s) without_hook"]),
    ('name = "x"\nnetwork = "ethernet"\n[network_env]\nNCCL_PROTO = 1\n', ["network_env must be a table of strings"]),
    # names the batch script could not export (`export A B=y` would set two other variables)
    ('name = "x"\nnetwork = "ethernet"\n[network_env]\n"A B" = "y"\n', ["network_env: A B = 'y'", "variable name"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.ce.env]\n1BAD = "x"\n', ["runtimes.ce.env: 1BAD", "variable name"]),
    # a bad bind is refused when the profile is read, not at every render without naming the profile
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.pyxis]\nmounts = ["lib:/lib:ro"]\n',
     ["runtimes.pyxis.mounts", "'lib:/lib:ro'", "absolute"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.podman]\nmounts = ["/a:/b:rx"]\n',
     ["runtimes.podman.mounts", "'/a:/b:rx'", "SRC[:DST[:ro|rw]]"]),
    # a ',' pyxis (and apptainer, sarus) reads as a separator was taken, then stopped every render unnamed
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.pyxis]\nmounts = ["/opt/a,b:/opt/a"]\n',
     ["runtimes.pyxis.mounts", "'/opt/a,b'", "',' separates mounts"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.sarus]\nmounts = ["/opt/lib:/opt/a,b:ro"]\n',
     ["runtimes.sarus.mounts", "'/opt/a,b'"]),
    # apptainer binds device files: a CDI name (podman's form) was dropped from its command line unseen
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.apptainer]\ndevices = ["/dev/cxi0", "nvidia.com/gpu=all"]\n',
     ["runtimes.apptainer.devices: 'nvidia.com/gpu=all'", "device files"]),
    # hook annotations that no EDF can hold stopped every ce render with a line that did not name the profile
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.ce]\nannotations = { "com.hooks.cxi" = "true", '
     '"com.hooks.cxi.enabled" = "true" }\n', ["runtimes.ce.annotations", "'com.hooks.cxi' and", "clash"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.sarus-suite.without_hook]\nannotations = { "com..cxi" = "true" }\n',
     ["runtimes.sarus-suite.without_hook.annotations", "'com..cxi'", "dotted words"]),
    ('name = "x"\nnetwork = "ethernet"\ngpus_per_node = -4\n', ["gpus_per_node must be a positive"]),
    ('name = "x"\nnetwork = ', ["not valid TOML"]),
    ('name = "x"\nnetwork = "ethernet"\n[device_batch_limits]\nbig = 16\n', ["device_batch_limits key 'big'"]),
    # a table key given another value ended the load in an AttributeError traceback
    ('name = "x"\nnetwork = "ethernet"\npartitions = ["batch"]\n', ["partitions must be [partitions.NAME] tables"]),
    ('name = "x"\nnetwork = "ethernet"\npartitions = 3\n', ["partitions must be [partitions.NAME] tables, not 3"]),
    ('name = "x"\nnetwork = "ethernet"\nruntimes = ["bare"]\n', ["runtimes must be [runtimes.NAME] tables"]),
    ('name = "x"\nnetwork = "ethernet"\nruntimes = "bare"\n', ["runtimes must be [runtimes.NAME] tables"]),
    # text that the job exports (the expected network, the set-up's line) was stringified or broke over lines
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.bare]\nsetup = 3\n', ["runtimes.bare.setup must be a string"]),
    ('name = "x"\nnetwork = "ethernet"\n[runtimes.bare]\nsetup = """host\nlibs"""\n',
     ["runtimes.bare.setup must be a string of one line"]),
    ('name = "x"\nnetwork = "slingshot"\nnccl_net = """AWS\nLibfabric"""\n', ["nccl_net must be a string of one line"]),
    # a blank one was kept as the expected network, and the gate stopped every multi-node run as wrong_network
    ('name = "x"\nnetwork = "slingshot"\nnccl_net = "  "\n', ["nccl_net '  ' names no network", "leave the key out"]),
    ('name = "x"\nnetwork = "ethernet"\n[description]\ntext = "a"\n', ["description must be a string"]),
    # a GPU without a known peak would leave every estimate out, each run the default time limit
    ('name = "x"\nnetwork = "ethernet"\ngpu = "GH-200"\n', ["gpu 'GH-200' has no peak FLOPs", "GH200, H200"]),
])
def test_bad_profiles_name_the_file_and_key(tmp_path, text, words):
    path = tmp_path / "site.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        sites.load(str(path))
    message = str(e.value)
    assert str(path) in message
    for word in words:
        assert word in message


def test_unknown_site_lists_the_shipped_ones():
    with pytest.raises(ConfigError, match="alps"):
        sites.load("daint-typo")
    with pytest.raises(ConfigError, match="no partition 'gpu'.*debug"):
        sites.load("alps").partition("gpu")


def test_a_bad_site_from_the_environment_names_the_variable_not_the_flag(monkeypatch, capsys):
    from bench import cli

    monkeypatch.setenv("NANOCHAT_BENCH_SITE", "bogus")
    assert cli.main(["plan", "--nodes=1"]) == 1
    err = capsys.readouterr().err
    assert "NANOCHAT_BENCH_SITE='bogus': not a shipped site" in err and "--site" not in err
    assert cli.main(["plan", "--nodes=1", "--site", "nope"]) == 1  # the flag wins over the variable
    assert "--site 'nope': not a shipped site" in capsys.readouterr().err
