#!/usr/bin/env bash
# Installs everything the build and tests need, idempotently: the pinned nightly toolchain with
# rust-src (for -Zbuild-std), ptxas (PyPI nvidia-cuda-nvcc 13.0.x, the CUDA 13.0 release, so
# that a CUDA 13.0 driver loads its cubins) and nvdisasm (for the SASS test, tests/sass.rs) under
# .tools/. Source it (`. scripts/setup.sh`) to get FUSED_GEMM_PTXAS and FUSED_GEMM_NVDISASM
# exported.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$root/rust-toolchain.toml")"

if ! command -v rustup >/dev/null; then
    echo "setup: rustup not found; installing it (https://rustup.rs)" >&2
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none >&2
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1 \
    || ! rustup component list --toolchain "$toolchain" --installed 2>/dev/null | grep -q '^rust-src'; then
    echo "setup: installing Rust $toolchain" >&2
    rustup toolchain install "$toolchain" --profile minimal --component rust-src,llvm-tools,clippy,rustfmt >&2
fi

# cuda_tool NAME DIR WHEEL: the CUDA tool NAME from the PyPI wheel WHEEL, installed under
# .tools/DIR on first use; prints its path.
cuda_tool() {
    local path="$root/.tools/$2/nvidia/cu13/bin/$1"
    if [ ! -x "$path" ]; then
        echo "setup: installing $1 (pip $3) into .tools/" >&2
        python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
            --target "$root/.tools/$2" "$3" >&2 || return 1
    fi
    echo "$path"
}

FUSED_GEMM_PTXAS="$(cuda_tool ptxas cuda-nvcc nvidia-cuda-nvcc==13.0.88)"
export FUSED_GEMM_PTXAS
# 13.2.51 is the oldest CUDA 13 nvdisasm on PyPI; it reads the sm_90a cubins of ptxas 13.0.
FUSED_GEMM_NVDISASM="$(cuda_tool nvdisasm cuda-nvdisasm nvidia-cuda-nvdisasm==13.2.51)"
export FUSED_GEMM_NVDISASM
