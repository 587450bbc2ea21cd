#!/usr/bin/env bash
# Converts the built image into a SIF for Apptainer/Singularity via an OCI archive and
# containers/apptainer.def. Run where the image was built (after containers/build.sh).
#   containers/apptainer-build.sh                       nanochat-bench:latest -> $IMAGE_DIR/nanochat-bench.sif
#   containers/apptainer-build.sh nanochat-bench-deps:latest
# Then: srun apptainer exec --nv --no-home -B $SCRATCH/nanochat-bench/cache --env NANOCHAT_BASE_DIR=$SCRATCH/nanochat-bench/cache $IMAGE_DIR/nanochat-bench.sif nanochat-bench ...
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" IMAGE "$@"

image=${1:-nanochat-bench:latest}
image_dir=${IMAGE_DIR:-${SCRATCH:-$PWD}/images}
ref=${image%%@*}   # the name is the last path component without its digest or tag: a registry's port keeps
name=${ref##*/}    # its ':' before the path (registry.example:5000/team/nanochat-bench:tag -> nanochat-bench)
work=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-sif.XXXXXX")
trap 'rm -rf "$work"' EXIT

command -v apptainer >/dev/null || { echo "apptainer-build.sh: apptainer is not installed" >&2; exit 2; }
engine=${CONTAINER_ENGINE:-podman}
command -v "${engine%% *}" >/dev/null ||
    { echo "apptainer-build.sh: ${engine%% *} is not installed (CONTAINER_ENGINE: podman or docker)" >&2; exit 2; }
mkdir -p "$image_dir"
image_dir=$(CDPATH="" cd -- "$image_dir" && pwd)  # absolute: apptainer builds from inside $work
sif="$image_dir/${name%%:*}.sif"
case ${CONTAINER_ENGINE:-podman} in
    docker | */docker)  # docker save has no --format and writes a docker archive: bootstrap from that
        "$CONTAINER_ENGINE" save -o "$work/nanochat-bench.docker.tar" "$image"
        sed -e 's/^Bootstrap: oci-archive$/Bootstrap: docker-archive/' \
            -e 's/^From: nanochat-bench\.oci\.tar$/From: nanochat-bench.docker.tar/' \
            "$here/apptainer.def" >"$work/apptainer.def" ;;
    *) ${CONTAINER_ENGINE:-podman} save --format oci-archive -o "$work/nanochat-bench.oci.tar" "$image"
       cp "$here/apptainer.def" "$work/" ;;
esac
(cd "$work" && apptainer build --force "$sif" apptainer.def)
echo "$sif"
