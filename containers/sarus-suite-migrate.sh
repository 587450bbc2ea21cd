#!/usr/bin/env bash
# Builds the image with Podman on an Alps node with Sarus Suite and migrates it into Sarus Suite's Parallax
# store (read-only SquashFS on the parallel filesystem), from which every node of a job reads it:
#   containers/sarus-suite-migrate.sh                  build + migrate localhost/nanochat-bench:latest
#   containers/sarus-suite-migrate.sh --migrate-only   migrate an image built on this node before
# Then: nanochat-bench submit --runtimes sarus-suite ... (each sweep checks once that the image is there).
# Sarus Suite is early access: `sarusctl migrate IMAGE` as its guide names the subcommand, not run here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=containers/script-args.sh
source "$here/script-args.sh"
script_args "$0" --migrate-only "$@"
image=${IMAGE:-localhost/nanochat-bench:latest}

command -v sarusctl >/dev/null || { echo "sarus-suite-migrate.sh: sarusctl is not installed" >&2; exit 2; }
if [[ ${1:-} != --migrate-only ]]; then
    "$here/build.sh" --tag "$image"
fi
sarusctl migrate "$image"
sarusctl images
