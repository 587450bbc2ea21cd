#!/usr/bin/env bash
# Builds a local stand-in for the NGC PyTorch base image, for machines that cannot pull nvcr.io (CI):
# Debian bookworm from debootstrap + python3/pip, imported into Podman, then CPU torch added by
# containers/standin-base.Containerfile. Prints the image name on stdout; progress goes to stderr.
#   containers/standin-base.sh            -> localhost/nanochat-bench-standin:bookworm-torch2.13
# The debootstrap root file system is cached as a tarball in $NANOCHAT_BENCH_CACHE (default
# ~/.cache/nanochat-bench), and Podman's layer cache keeps reruns to seconds. Needs root (debootstrap).
# Environment: TORCH_WHEEL (CPU torch wheel for Python 3.11), DEBIAN_MIRROR, STANDIN_IMAGE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" "" "$@"
# shellcheck source=containers/podman-local.sh
source "$here/podman-local.sh"

cache=${NANOCHAT_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nanochat-bench}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
wheel=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}
rootfs_image=localhost/nanochat-bench-standin-rootfs:bookworm
image=${STANDIN_IMAGE:-localhost/nanochat-bench-standin:bookworm-torch2.13}
packages=python3,python3-pip,ca-certificates
rootfs_tar=$cache/bookworm-minbase-$(tr , - <<<"$packages").tar

log() { echo "standin-base: $*" >&2; }

if [[ ! -f $wheel ]]; then
    log "no torch wheel at $wheel; set TORCH_WHEEL to a CPU torch wheel for Python 3.11 (cp311, x86_64)"
    exit 2
fi

# 1. Root file system, cached: debootstrap into a temporary directory, tar it, rename into place.
if [[ ! -f $rootfs_tar ]]; then
    command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 2; }
    mkdir -p "$cache"
    work=$(mktemp -d "$cache/rootfs.XXXXXX")
    log "debootstrap bookworm ($packages) from $mirror"
    debootstrap --variant=minbase --include="$packages" bookworm "$work/root" "$mirror" >&2
    tar -C "$work/root" --numeric-owner -cf "$work/rootfs.tar" .
    mv "$work/rootfs.tar" "$rootfs_tar"
    rm -rf "$work"
fi

# 2. Import it as an image once.
if ! podman image exists "$rootfs_image"; then
    log "podman import $rootfs_tar"
    podman import --change 'CMD ["/bin/bash"]' "$rootfs_tar" "$rootfs_image" >&2
fi

# 3. Add torch, numpy and NGC's pip constraint file; the build context is a temporary directory.
context=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-standin.XXXXXX")
trap 'rm -rf "$context" "$_podman_local_dir"' EXIT
mkdir "$context/ca"
cp /usr/local/share/ca-certificates/*.crt "$context/ca/" 2>/dev/null || true
ln "$wheel" "$context/" 2>/dev/null || cp "$wheel" "$context/"
log "podman build $image"
podman_local build --quiet -f "$here/standin-base.Containerfile" \
    --build-arg ROOTFS_IMAGE="$rootfs_image" --build-arg TORCH_WHEEL="$(basename "$wheel")" \
    -t "$image" "$context" >&2
echo "$image"
