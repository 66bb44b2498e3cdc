#!/usr/bin/env bash
# Packs CODA and quack for a GPU host without network: downloads the pinned wheels for CPython
# 3.12 on x86-64 (coda-kernels 0.2, which pins quack-kernels 0.6.1, which pins
# nvidia-cutlass-dsl 4.6.0 with its CUDA 13 libraries), unpacks them into one site folder and
# archives it with a large xz dictionary (about 60 MB; wheels are zip files, xz packs their
# shared libraries a third smaller).
#
#   bench/compare/coda-site.sh OUT.tar.xz [PART_BYTES]
#
# With PART_BYTES, the archive is also split into OUT.tar.xz.part-aa, -ab, … of at most that
# size (for transfers with a size limit). On the GPU host:
#   mkdir -p /tmp/site && cat OUT.tar.xz.part-* | xz -d | tar -x -C /tmp/site   (or the whole OUT.tar.xz)
#   bench/compare/run.sh --coda-site /tmp/site
# torch, triton and numpy are the host's own (CODA and quack use what is installed there).
set -euo pipefail
out="${1:?usage: coda-site.sh OUT.tar.xz [PART_BYTES]}"
part="${2:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
platform=(--only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64 --platform any)
python3 -m pip download --quiet --no-deps "${platform[@]}" -d "$tmp/wheels" \
    coda-kernels==0.2 quack-kernels==0.6.1 nvidia-cutlass-dsl==4.6.0 \
    nvidia-cutlass-dsl-libs-core==4.6.0 nvidia-cutlass-dsl-libs-base==4.6.0 \
    nvidia-cutlass-dsl-libs-cu13==4.6.0 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5 \
    nvidia-cuda-nvdisasm==13.5.37
mkdir -p "$tmp/site"
for w in "$tmp"/wheels/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/site"
done
# The .pth file that puts the DSL's packages on the path is read only from site folders;
# run.sh's torch_rows.py adds the folder with site.addsitedir, which reads it.
tar -C "$tmp/site" -cf - . | xz -9 -T2 --lzma2=preset=9,dict=256MiB > "$out"
echo "coda-site: $out ($(du -h "$out" | cut -f1))" >&2
if [ -n "$part" ]; then
    split -b "$part" "$out" "$out.part-"
    ls -l "$out".part-* >&2
fi
