#!/usr/bin/env bash
# Builds the image with NERSC's podman-hpc and migrates (squashes) it to the shared store so that
# compute nodes can run it: `srun podman-hpc run --rm --gpu --nccl -v $SCRATCH:$SCRATCH IMAGE ...`.
#   containers/podman-hpc.sh                  build + migrate nanochat-bench:latest
#   containers/podman-hpc.sh --migrate-only   migrate an image built before
set -euo pipefail
case ${1:-} in
    "" | --migrate-only) ;;
    -h | --help) sed -n '2,/^set -/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "podman-hpc.sh: unknown argument '$1' (valid: --migrate-only, --help)" >&2; exit 2 ;;
esac
(($# <= 1)) || { echo "podman-hpc.sh: one argument at most, not $# (see --help)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image=${IMAGE:-nanochat-bench:latest}

command -v podman-hpc >/dev/null || { echo "podman-hpc.sh: podman-hpc is not installed" >&2; exit 2; }
if [[ ${1:-} != --migrate-only ]]; then
    CONTAINER_ENGINE=podman-hpc "$here/build.sh" --tag "$image"
fi
podman-hpc migrate "$image"
podman-hpc images
