#!/usr/bin/env bash
# What the collector costs the program, without a GPU: the stand-in CUPTI and
# driver of this folder, runs alternated between collector builds.
#
#   tests/fake_cupti/bench.sh ROUNDS COLLECTOR.so [COLLECTOR.so ...]
#
# Per run: ns per kernel launch (fake_app `launch_bench`, names 300
# characters long), ns per tensor allocated and freed through the stand-in
# caching allocator from 30 Python frames (bench_torch.py) and from a thread
# without Python (native stacks, 12 paths 30 frames deep in turn), and the
# collector's own timing of each from the trace. Plain runs (no collector)
# come first. SWEEP_KIB=N writes N KiB between tensors and between
# launches, as a framework's own work would, so the collector's data leaves
# the CPU's caches (on this machine, 2048 took the collector from 0.12 to
# 0.18 µs per event); then set LAUNCHES lower (default 300000). KINDS: how
# many kernels take turns (default 8; a resnet50 step launches ~150 kinds). Build a collector to compare with `cargo build --release -p
# gmem-prof-collector` and copy target/release/libgmem_prof_collector.so
# aside. These are the stand-in's figures, cache-hot on an idle machine:
# compare builds with them; the H200's are tests/gpu/overhead.sh's.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=$1
shift
GMEM=$ROOT/target/release/gmem-prof
[ -x "$GMEM" ] || { echo "build the CLI first: cargo build --release -p gmem-prof" >&2; exit 2; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
SRC=$ROOT/tests/fake_cupti
${CC:-cc} -O2 -shared -fPIC -Wl,-soname,libcupti.so.13 -o "$DIR/libcupti.so.13" "$SRC/fake_cupti.c" -ldl -lpthread
${CC:-cc} -O2 -o "$DIR/fake_app" "$SRC/fake_app.c" "$DIR/libcupti.so.13" -Wl,-rpath,'$ORIGIN' -lpthread
mkdir -p "$DIR/torch/lib"
echo "__version__ = '2.11.0+fake'" >"$DIR/torch/version.py"
${CXX:-c++} -O1 -shared -fPIC -o "$DIR/torch/lib/libc10_cuda.so" "$SRC/fake_torch.cpp" "$DIR/libcupti.so.13"
cd "$DIR"
launches() { ./fake_app launch_bench "${LAUNCHES:-300000}" "${SWEEP_KIB:-0}" "${KINDS:-8}"; }
tensors() { python3 "$SRC/bench_torch.py" ./libcupti.so.13 torch/lib/libc10_cuda.so "${SWEEP_KIB:-0}" "$@"; }
echo "plain: $(launches | grep -o '[0-9.]* ns'), $(tensors | grep -o '[0-9.]* ns'), $(tensors native | grep -o '[0-9.]* ns')"
for r in $(seq 1 "$ROUNDS"); do
    for so in "$@"; do
        rec() { "$GMEM" record --collector "$so" --cupti ./libcupti.so.13 -f -o "$DIR/t.bin" -- "$@" 2>/dev/null; }
        l=$(rec ./fake_app launch_bench "${LAUNCHES:-300000}" "${SWEEP_KIB:-0}" "${KINDS:-8}" | grep -o '[0-9.]* ns')
        ls=$("$GMEM" dump "$DIR/t.bin" | grep -o "[0-9.]* µs per launch.*" | sed "s/(one in.*included); parts (another one in 16)//" | tr -d '"' || true)
        t=$(rec python3 "$SRC/bench_torch.py" ./libcupti.so.13 torch/lib/libc10_cuda.so "${SWEEP_KIB:-0}" | grep -o '[0-9.]* ns')
        ts=$("$GMEM" dump "$DIR/t.bin" | grep -o "[0-9.]* µs per event.*" | sed "s/ (one event in.*random); parts (another one in 16)//" | tr -d '"' || true)
        n=$(rec python3 "$SRC/bench_torch.py" ./libcupti.so.13 torch/lib/libc10_cuda.so 0 native | grep -o '[0-9.]* ns')
        ns=$("$GMEM" dump "$DIR/t.bin" | grep -oE "[0-9.]* µs per (event|walk).*" | sed "s/ (one event in.*random); parts (another one in 16)//; s/; per walk.*//" | tr -d '"' | tr '\n' ' ' || true)
        echo "round $r $so: launch $l ($ls), tensor $t ($ts), tensor without Python $n ($ns)"
    done
done
