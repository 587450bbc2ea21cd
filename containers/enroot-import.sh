#!/usr/bin/env bash
# Imports the built image into a SquashFS file for CSCS Container Engine (EDF `image = "<file>.sqsh"`)
# and Pyxis (`srun --container-image=<file>.sqsh`). Run it on a compute node after containers/build.sh.
#   containers/enroot-import.sh                                  podman://nanochat-bench:latest
#   containers/enroot-import.sh podman://nanochat-bench-deps:latest
#   containers/enroot-import.sh 'docker://nvcr.io#nvidia/pytorch:25.10-py3'
# Writes $IMAGE_DIR/NAME+TAG.sqsh (enroot's naming; IMAGE_DIR default $SCRATCH/ce-images), which is
# what edf/nanochat-bench.toml points at. ENROOT_SQUASH_OPTIONS='-comp zstd' gives faster imports.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" SOURCE "$@"
source=${1:-podman://nanochat-bench:latest}
image_dir=${IMAGE_DIR:-${SCRATCH:?set SCRATCH or IMAGE_DIR}/ce-images}

# NAME:TAG -> NAME+TAG.sqsh, slashes to '+', registry dropped: enroot's own rule for its default names.
ref=${source#*://}
ref=${ref#*#}
[[ $ref == *:* ]] || ref+=":latest"
name=$(tr '/:' '++' <<<"$ref").sqsh

command -v enroot >/dev/null || { echo "enroot-import.sh: enroot is not installed on $(hostname)" >&2; exit 2; }
mkdir -p "$image_dir"
# Lustre: progressive striping keeps large image reads spread over OSTs (CSCS advice); ignore elsewhere.
lfs setstripe -E 4M -c 1 -E 64M -c 4 -E -1 -c -1 -S 4M "$image_dir" 2>/dev/null || true

tmp="$image_dir/.$name.$$"
trap 'rm -f "$tmp"' EXIT
enroot import -o "$tmp" "$source"
mv "$tmp" "$image_dir/$name"
sha256sum "$image_dir/$name" | tee "$image_dir/$name.sha256"
