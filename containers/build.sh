#!/usr/bin/env bash
# Builds the nanochat-bench image from the Containerfile, passing the provenance build args (the tag as
# IMAGE_REF, the git revision) that end up in every run.json.
#   containers/build.sh                                   -> nanochat-bench:latest (full image)
#   containers/build.sh --target deps --tag nanochat-bench-deps:latest
#   containers/build.sh --base localhost/my-base:tag -- --build-arg PROJECT_EXTRAS=test
#   containers/build.sh --local ...                       runc, no ulimits, host network (CI, no daemon)
# Environment: CONTAINER_ENGINE (podman, docker or podman-hpc; default podman).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

target=full
tag=
base=
local=0
while (($#)); do
    case $1 in
        --target | --tag | --base)
            (($# >= 2)) || { echo "build.sh: $1 needs a value (--target full|deps, --tag NAME:TAG, --base IMAGE)" >&2
                             exit 2; } ;;&
        --target) target=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --base) base=$2; shift 2 ;;
        --local) local=1; shift ;;
        --) shift; break ;;
        -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument '$1' (valid: --target full|deps, --tag, --base, --local, -- ARGS)" >&2; exit 2 ;;
    esac
done
case $target in
    full) tag=${tag:-nanochat-bench:latest} ;;
    deps) tag=${tag:-nanochat-bench-deps:latest} ;;
    *) echo "build.sh: --target must be full or deps, not '$target'" >&2; exit 2 ;;
esac

args=(-f "$repo/Containerfile" --target "$target" -t "$tag"
      --build-arg IMAGE_REF="$tag"
      --build-arg GIT_REVISION="$(git -C "$repo" describe --always --dirty --abbrev=12 2>/dev/null || true)")
[[ -n $base ]] && args+=(--build-arg BASE_IMAGE="$base")
engine=${CONTAINER_ENGINE:-podman}
if ((local)); then engine=podman; fi  # podman-local.sh runs podman whatever CONTAINER_ENGINE says
command -v "${engine%% *}" >/dev/null ||
    { echo "build.sh: ${engine%% *} is not installed (CONTAINER_ENGINE: podman, docker or podman-hpc)" >&2; exit 2; }

if ((local)); then
    # shellcheck source=containers/podman-local.sh
    source "$here/podman-local.sh"
    podman_local build "${args[@]}" "$@" "$repo"
else
    ${CONTAINER_ENGINE:-podman} build "${args[@]}" "$@" "$repo"
fi
