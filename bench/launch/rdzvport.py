"""The rendezvous port of a run, checked free on the first node before torchrun is started there.

A job's port is a pure function of its job id (bench/launch/job.py), so another process holding it on
the first node would leave every rank waiting for a store it cannot reach until the join timeout, many
minutes without a line. The batch script runs this copy (beside the jobs in <sweep>/.lib, standard
library only) on the first node and uses the port it prints:

    python3 <sweep>/.lib/rdzvport.py PORT NODE  -> the first free port of PORT .. PORT+SPAN-1, exit 0
                                                -> one line naming the ports and NODE, exit 1
"""

from __future__ import annotations  # the hosts' python3 may be older than the annotations

import socket
import sys

SPAN = 10  # ports tried, the planned one first; a run's neighbours in the job's block of 100 (one per run)


def is_free(port: int) -> bool:
    """Whether a listener could bind `port` on every address, as torchrun's TCPStore does. SO_REUSEADDR as
    the store sets it: a connection of an earlier run still in TIME_WAIT does not make the port taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def pick(port: int, span: int = SPAN) -> int | None:
    """The first free port from `port` on, within `span` ports; None when all are taken."""
    return next((p for p in range(port, port + span) if is_free(p)), None)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    port = int(argv[0])
    free = pick(port)
    if free is None:
        print(f"rendezvous ports {port}-{port + SPAN - 1} on {argv[1]} (the job's first node) are all in use by "
              f"other processes, so torchrun's store cannot listen there: free one, or exclude that node")
        return 1
    print(free)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
