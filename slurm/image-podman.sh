#!/bin/bash
# One node's image step for podman and podman-hpc (bench/runtimes/podman.py), run by the batch script as one
# srun task on every node of a run, before the run:  image-podman.sh PROGRAM IMAGE [ARCHIVE]
# podman's storage is node-local: an image missing here is loaded from ARCHIVE (`podman save`), else the run
# stops with one line naming the node and the image. podman-hpc's nodes see the squash store `migrate` filled.
set -uo pipefail
program=$1 image=$2 archive=${3:-}
node=${SLURMD_NODENAME:-$(hostname)}
if [ "$program" = podman-hpc ]; then
    # podman-hpc adds its squash store to `images` and `run` only (not to `image exists`): look in its listing
    case ${image##*/} in *:*) ;; *) image=$image:latest ;; esac  # the listing names the tag
    # the whole listing first: `| grep -q` ends at the match, and the listing's next line then fails it (pipefail)
    listing=$("$program" images --format '{{.Repository}}:{{.Tag}}')
    if grep -qxF -e "$image" -e "localhost/$image" <<<"$listing"; then
        echo "node $node: image $image is in the squash store"
        exit 0
    fi
    echo "nanochat-bench: node $node: image $image is not in podman-hpc's squash store; migrate it first" \
        "(podman-hpc migrate $image, or containers/podman-hpc.sh --migrate-only)"
    exit 1
fi
if "$program" image exists "$image"; then
    echo "node $node: image $image is present"
    exit 0
fi
if [ -z "$archive" ]; then
    echo "nanochat-bench: node $node: image $image is not in this node's $program storage; load it on every" \
        "node, or name a 'podman save' archive in the site profile ([images.podman] archive = FILE)"
    exit 1
fi
"$program" load -q -i "$archive" || { echo "nanochat-bench: node $node: image $image: $program load -i $archive failed"; exit 1; }
"$program" image exists "$image" || { echo "nanochat-bench: node $node: image $image is not in the archive $archive"; exit 1; }
echo "node $node: image $image loaded from $archive"
