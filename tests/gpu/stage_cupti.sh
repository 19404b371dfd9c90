#!/usr/bin/env bash
# On the development machine: the CUPTI releases the GPU run's `cupti`
# phase records through (tests/gpu/run.sh), taken from the registry's wheels
# and xz-compressed into .gpu-extra/cupti/VERSION/ (git-ignored; carry it),
# about 1.6 MiB each. The GPU machine has its toolkit's CUPTI 13.0 and
# Triton's CUPTI 12 already.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=$(mktemp -d)
trap 'rm -rf "$WHEELS"' EXIT
for spec in nvidia-cuda-cupti-cu12==12.0.146 nvidia-cuda-cupti-cu12==12.4.127 \
            nvidia-cuda-cupti-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.9.79 \
            nvidia-cuda-cupti==13.1.115 nvidia-cuda-cupti==13.4.92 nvidia-cuda-cupti==13.5.25; do
    version=${spec#*==}
    pip download -q --no-deps "$spec" -d "$WHEELS"
    whl=$(ls "$WHEELS"/*-"$version"-*.whl)
    so=$(python3 -c "import sys, zipfile; print(next(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(('lib/libcupti.so.12', 'lib/libcupti.so.13'))))" "$whl")
    mkdir -p "$ROOT/.gpu-extra/cupti/$version"
    unzip -p "$whl" "$so" | xz -9 >"$ROOT/.gpu-extra/cupti/$version/$(basename "$so").xz"
done
du -sh "$ROOT"/.gpu-extra/cupti/*
