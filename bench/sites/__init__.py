"""Site profiles as data: which network a site has and how every runtime reaches it, and where a runtime's
image comes from on the nodes (podman's `podman save` archive).

  profile.py     the profile's shape (Site, Partition, NetworkSetup), loading and validation
  apply.py       a profile applied to one run's launch spec (what each runtime then renders)
  alps.toml      CSCS Alps: GH200 nodes, HPE Slingshot-11, Container Engine
  infiniband.toml  a generic InfiniBand cluster (NCCL's own IB transport, no plugin)
  ethernet.toml    a generic Ethernet cluster without RDMA (NCCL's socket transport)
  test-cluster.toml  the tests' two-node CPU cluster (TCP sockets are its network)

A job rendered for a site gets the site's network set-up for its runtime by default; `--env` overrides
a variable, and what was applied is recorded in run.json. `load("alps")` or `load("my-site.toml")`.
"""

from bench.sites.apply import apply, record
from bench.sites.profile import NETWORKS, NetworkSetup, Partition, Site, load, names

__all__ = ["apply", "record", "NETWORKS", "NetworkSetup", "Partition", "Site", "load", "names"]
