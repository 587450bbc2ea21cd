#!/usr/bin/env bash
# Converts the built image into a SIF for Apptainer/Singularity via an OCI archive and
# containers/apptainer.def. Run where the image was built (after containers/build.sh).
#   containers/apptainer-build.sh                       nanochat-bench:latest -> $IMAGE_DIR/nanochat-bench.sif
#   containers/apptainer-build.sh nanochat-bench-deps:latest
# Then: srun apptainer exec --nv --no-home -B $SCRATCH/nanochat-bench/cache --env NANOCHAT_BASE_DIR=$SCRATCH/nanochat-bench/cache $IMAGE_DIR/nanochat-bench.sif nanochat-bench ...
set -euo pipefail
case ${1:-} in
    -h | --help) sed -n '2,/^set -/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) echo "apptainer-build.sh: unknown option '$1' (usage: containers/apptainer-build.sh [IMAGE]; --help)" >&2
        exit 2 ;;
esac
(($# <= 1)) || { echo "apptainer-build.sh: one IMAGE at most, not $# arguments (see --help)" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

image=${1:-nanochat-bench:latest}
image_dir=${IMAGE_DIR:-${SCRATCH:-$PWD}/images}
sif="$image_dir/$(basename "${image%%:*}").sif"
work=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-sif.XXXXXX")
trap 'rm -rf "$work"' EXIT

command -v apptainer >/dev/null || { echo "apptainer-build.sh: apptainer is not installed" >&2; exit 2; }
mkdir -p "$image_dir"
${CONTAINER_ENGINE:-podman} save --format oci-archive -o "$work/nanochat-bench.oci.tar" "$image"
cp "$here/apptainer.def" "$work/"
(cd "$work" && apptainer build --force "$sif" apptainer.def)
echo "$sif"
