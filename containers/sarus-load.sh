#!/usr/bin/env bash
# Loads the built image into Sarus (classic) from a `docker save` archive, for `srun sarus run`.
# With a registry, `sarus pull REGISTRY/nanochat-bench:TAG` on a compute node does the same.
#   containers/sarus-load.sh                  nanochat-bench:latest
# Then: srun sarus run --mount=type=bind,source=$SCRATCH,destination=$SCRATCH load/library/nanochat-bench:latest \
#     nanochat-bench ...   (`sarus load` names the image load/library/NAME:TAG, the runtime's default)
set -euo pipefail
case ${1:-} in
    -h | --help) sed -n '2,/^set -/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "sarus-load.sh: unknown option '$1' (usage: containers/sarus-load.sh [IMAGE]; --help)" >&2
        exit 2 ;;
esac
(($# <= 1)) || { echo "sarus-load.sh: one IMAGE at most, not $# arguments (see --help)" >&2; exit 2; }
image=${1:-nanochat-bench:latest}
work=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-sarus.XXXXXX")
trap 'rm -rf "$work"' EXIT

command -v sarus >/dev/null || { echo "sarus-load.sh: sarus is not installed" >&2; exit 2; }
${CONTAINER_ENGINE:-podman} save --format docker-archive -o "$work/image.tar" "$image"
sarus load "$work/image.tar" "$image"
sarus images --digests
