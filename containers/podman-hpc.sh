#!/usr/bin/env bash
# Builds the image with NERSC's podman-hpc and migrates (squashes) it to the shared store so that
# compute nodes can run it: `srun podman-hpc run --rm --gpu --nccl -v $SCRATCH:$SCRATCH IMAGE ...`.
#   containers/podman-hpc.sh                  build + migrate nanochat-bench:latest
#   containers/podman-hpc.sh --migrate-only   migrate an image built before
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" --migrate-only "$@"
image=${IMAGE:-nanochat-bench:latest}

command -v podman-hpc >/dev/null || { echo "podman-hpc.sh: podman-hpc is not installed" >&2; exit 2; }
if [[ ${1:-} != --migrate-only ]]; then
    CONTAINER_ENGINE=podman-hpc "$here/build.sh" --tag "$image"
fi
podman-hpc migrate "$image"
podman-hpc images
