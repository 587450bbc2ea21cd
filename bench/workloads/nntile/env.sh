#!/usr/bin/env bash
# The NNTile environment: a Python 3.12 virtual environment holding torch-nntile and what it links to.
#
#   bench/workloads/nntile/env.sh [VENV_DIR]
#
# VENV_DIR defaults to $NANOCHAT_BENCH_NNTILE_VENV, else ~/.cache/nanochat-bench/nntile-venv. The last
# line printed is the environment's interpreter, the value `nanochat-bench train --workload nntile`
# takes from NANOCHAT_BENCH_NNTILE_PYTHON (it finds the default location by itself).
#
# Why these pins: torch-nntile 0.1.0 is a cp312-only wheel that bundles libnntile, libstarpu (built with
# CUDA), OpenBLAS and hwloc and links against libtorch_cuda, cuBLAS and cuDNN, so it needs the CUDA build
# of torch 2.9.1 even on a CPU-only machine; it is installed without dependencies because its metadata
# asks for more than it uses. Its GPT-2 module imports GPT2Config from transformers, whose later
# releases moved it.
#
# Idempotent: a stamp file holding the requirements marks a finished environment; with the same
# requirements a second call only prints the interpreter. A half-built one (interrupted) is rebuilt.
# The base interpreter: $NANOCHAT_BENCH_NNTILE_BASE_PYTHON, else python3.12 on PATH, else pyenv's 3.12.
set -euo pipefail

REQUIREMENTS=("torch==2.9.1" "transformers>=4.40,<4.53" "numpy")
NO_DEPS_REQUIREMENTS=("torch-nntile==0.1.0")

venv=${1:-${NANOCHAT_BENCH_NNTILE_VENV:-$HOME/.cache/nanochat-bench/nntile-venv}}
stamp="$venv/.nanochat-bench-nntile"
want="${REQUIREMENTS[*]} --no-deps ${NO_DEPS_REQUIREMENTS[*]}"

if [[ -f $stamp && $(cat "$stamp") == "$want" && -x $venv/bin/python ]]; then
    echo "$venv/bin/python"
    exit 0
fi

is_312() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; }

find_base_python() {
    if [[ -n ${NANOCHAT_BENCH_NNTILE_BASE_PYTHON:-} ]]; then
        is_312 "$NANOCHAT_BENCH_NNTILE_BASE_PYTHON" && echo "$NANOCHAT_BENCH_NNTILE_BASE_PYTHON"
        return
    fi
    # pyenv's own interpreters before PATH: its python3.12 shim fails unless 3.12 is a selected version
    local candidate
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 "$(command -v python3.12)"; do
        [[ -n $candidate ]] && is_312 "$candidate" && { echo "$candidate"; return; }
    done
    return 1
}

if ! base=$(find_base_python); then
    echo "nntile-env: error: no Python 3.12 found (torch-nntile 0.1.0 ships cp312 wheels only; tried" \
         "\$NANOCHAT_BENCH_NNTILE_BASE_PYTHON, pyenv's versions, python3.12 on PATH); install one" \
         "(e.g. pyenv install 3.12) or set NANOCHAT_BENCH_NNTILE_BASE_PYTHON to its interpreter" >&2
    exit 2
fi

start=$SECONDS
echo "nntile-env: building $venv from $base (several minutes and about 7 GB the first time)" >&2
rm -f "$stamp"
"$base" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "${REQUIREMENTS[@]}"
"$venv/bin/python" -m pip install -q --no-deps "${NO_DEPS_REQUIREMENTS[@]}"
# the import is the test that the native libraries resolve (libtorch_cuda, StarPU, OpenBLAS)
"$venv/bin/python" -c 'import torch_nntile' >&2
printf '%s' "$want" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "nntile-env: ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$venv/bin/python"
