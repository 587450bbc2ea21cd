#!/usr/bin/env bash
# Loads the built image into Sarus (classic) from a `docker save` archive, for `srun sarus run`.
# With a registry, `sarus pull REGISTRY/nanochat-bench:TAG` on a compute node does the same.
#   containers/sarus-load.sh                  nanochat-bench:latest
# Then: srun sarus run --mount=type=bind,source=$SCRATCH,destination=$SCRATCH load/library/nanochat-bench:latest \
#     nanochat-bench ...   (`sarus load` names the image load/library/NAME:TAG, the runtime's default)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" IMAGE "$@"
image=${1:-nanochat-bench:latest}
work=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-sarus.XXXXXX")
trap 'rm -rf "$work"' EXIT

command -v sarus >/dev/null || { echo "sarus-load.sh: sarus is not installed" >&2; exit 2; }
engine=${CONTAINER_ENGINE:-podman}
command -v "${engine%% *}" >/dev/null ||
    { echo "sarus-load.sh: ${engine%% *} is not installed (CONTAINER_ENGINE: podman or docker)" >&2; exit 2; }
case ${CONTAINER_ENGINE:-podman} in
    docker | */docker) "$CONTAINER_ENGINE" save -o "$work/image.tar" "$image" ;;  # no --format: a docker archive
    *) ${CONTAINER_ENGINE:-podman} save --format docker-archive -o "$work/image.tar" "$image" ;;
esac
sarus load "$work/image.tar" "$image"
sarus images --digests
