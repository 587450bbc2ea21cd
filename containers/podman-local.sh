#!/usr/bin/env bash
# Podman on a build machine without a container daemon or cgroup delegation (CI, a login node): runc as
# the OCI runtime, no default ulimits (raising them fails there), host network for build and run. It
# writes its own containers.conf, so host configuration does not matter.
#   containers/podman-local.sh run --rm IMAGE CMD...        run podman with these settings
#   source containers/podman-local.sh; podman_local build ...   the same from another script

_podman_local_dir=$(mktemp -d "${TMPDIR:-/tmp}/nanochat-bench-podman.XXXXXX")
cat >"$_podman_local_dir/containers.conf" <<'CONF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF="$_podman_local_dir/containers.conf"
trap 'rm -rf "$_podman_local_dir"' EXIT

# podman_local SUBCOMMAND ARGS...: podman with the settings above.
podman_local() {
    local sub=$1
    shift
    case $sub in
        build | run) podman --runtime runc "$sub" --network host "$@" ;;
        *) podman --runtime runc "$sub" "$@" ;;
    esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    (($#)) || { sed -n '2,6s/^# \{0,1\}//p' "$0" >&2; exit 2; }
    # its own help, as every container script's; `run --help` and the like still reach podman
    [[ $1 != -h && $1 != --help ]] || { sed -n '2,6s/^# \{0,1\}//p' "$0"; exit 0; }
    podman_local "$@"
fi
