#!/usr/bin/env bash
# On the development machine: build the release CLI and collector and copy
# them into .gpu-bin/ (git-ignored), the folder the device runs carry.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
cargo build --release -p gmem-prof -p gmem-prof-collector
mkdir -p .gpu-bin
cp target/release/gmem-prof target/release/libgmem_prof_collector.so .gpu-bin/
ls -la .gpu-bin
