#!/usr/bin/env bash
# The container scripts' command line, checked one way before any tool runs: -h/--help prints the calling
# script's header comment; an argument it does not take is one line naming it (exit 2).
#   source "$here/script-args.sh"; script_args "$0" IMAGE "$@"            at most one IMAGE, no option
#   source "$here/script-args.sh"; script_args "$0" --migrate-only "$@"   nothing, or that one option
#   source "$here/script-args.sh"; script_args "$0" "" "$@"               no argument

script_args() {
    local script=$1 takes=$2 name
    name=$(basename "$script")
    shift 2
    case ${1:-} in
        -h | --help) sed -n '2,/^set -/s/^# \{0,1\}//p' "$script"; exit 0 ;;
        "") ;;  # as absent
        *) if [[ -z $takes ]]; then
               echo "$name: takes no arguments, not '$1' (settings come from the environment; see --help)" >&2
               exit 2
           elif [[ $takes == -* && $1 != "$takes" ]]; then
               echo "$name: unknown argument '$1' (valid: $takes, --help)" >&2
               exit 2
           elif [[ $takes != -* && $1 == -* ]]; then
               echo "$name: unknown option '$1' (usage: containers/$name [$takes]; --help)" >&2
               exit 2
           fi ;;
    esac
    [[ -z $takes ]] || (($# <= 1)) || {
        if [[ $takes == -* ]]; then
            echo "$name: one argument at most, not $# (see --help)" >&2
        else
            echo "$name: one $takes at most, not $# arguments (see --help)" >&2
        fi
        exit 2
    }
}
