#!/usr/bin/env bash
# Records the CUDA test programs (and PyTorch/CuPy programs) on the GPU machine
# with the real CLI and checks every expected figure from the traces.
#
#   tests/gpu/run.sh [PHASE...]     PHASE: programs killed torch steps framework fixtures jax
#                                   deviceview ums pools remedies snapshot pytest roles inputs
#                                   ipc privatepools
#                                   multigpu (two GPUs: skipped on one)
#                                   cupti (the programs through every CUPTI at hand;
#                                   CUPTIS="13.4.92 toolkit" picks some)
#                                   overhead, or one of overhead's: events resnet gpt2 marks alloc
#                                   allocnative launch (default: programs killed torch framework)
#
# Needs: nvcc, python3 with torch and cupy, and the built CLI + collector in
# $GMEM_BIN (default .gpu-bin/, filled by `tests/gpu/stage.sh` on the dev machine).
# Results: logs and small traces under $OUT (default /tmp/gmem-gpu/out).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${GMEM_BIN:-$ROOT/.gpu-bin}
GMEM=$BIN/gmem-prof
WORK=${WORK:-/tmp/gmem-gpu}
OUT=${OUT:-$WORK/out}
PHASES=${*:-programs killed torch framework}
mkdir -p "$WORK/bin" "$WORK/traces" "$WORK/logs" "$WORK/reports" "$OUT"
export PYTHONUNBUFFERED=1
FAILED=0
note() { echo "### $*"; }

note "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nvcc --version | tail -1
"$GMEM" --version

build() {
    note "building test programs"
    local pids=()
    local cuda=/usr/local/cuda
    for src in "$ROOT"/tests/programs/*.cu; do
        name=$(basename "$src" .cu)
        extra=()
        if [ "$name" = cupti_client ]; then
            extra=(-I"$cuda/extras/CUPTI/include" -L"$cuda/extras/CUPTI/lib64" -L"$cuda/targets/x86_64-linux/lib" -lcupti)
        fi
        nvcc -O2 -g -arch=sm_90 -o "$WORK/bin/$name" "$src" -lcuda "${extra[@]}" &
        pids+=($!)
    done
    nvcc -O2 -g -arch=sm_90 -cudart shared -o "$WORK/bin/kinds_shared" "$ROOT/tests/programs/kinds.cu" &
    pids+=($!)
    for p in "${pids[@]}"; do wait "$p" || { echo "build failed"; FAILED=1; }; done
}

record() {  # record NAME PROGRAM ARGS... ; sets CODE
    local name=$1; shift
    rm -f "$WORK/traces/$name.bin"
    local t0=$(date +%s%N)
    # shellcheck disable=SC2086 # RECORD_FLAGS: several words on purpose
    (cd "$WORK" && "$GMEM" record ${RECORD_FLAGS:-} -o "traces/$name.bin" -- "$@" >"logs/$name.out" 2>&1)
    CODE=$?
    local t1=$(date +%s%N)
    echo "--- $name: exit $CODE, $(( (t1 - t0) / 1000000 )) ms"
    tail -n 6 "$WORK/logs/$name.out" | sed 's/^/    | /'
}

programs() {
    build
    # A program's `// record: FLAGS` line gives its record options; NAME_timed
    # records NAME with kernels timed (its expectations hold both ways).
    for name in kinds kinds_shared kinds_timed streams streams_timed pools two_pools vmm graph oom threads children cupti_client; do
        src="$ROOT/tests/programs/${name%_*}.cu"
        [ -f "$src" ] || src="$ROOT/tests/programs/$name.cu"
        flags=$(sed -n 's|^// record: ||p' "$src")
        [ "${name%_timed}" != "$name" ] && flags="--kernels timed"
        RECORD_FLAGS=$flags record "$name" "bin/${name%_timed}"
        python3 "$ROOT/tests/gpu/check.py" "$GMEM" "$WORK/traces/$name.bin" "$src" "$CODE" || FAILED=1
    done
    note "environment variables only (no CLI), then symbolize"
    rm -rf "$WORK/envonly"
    (cd "$WORK" && CUDA_INJECTION64_PATH="$BIN/libgmem_prof_collector.so" GMEM_PROF_DIR="$WORK/envonly" bin/kinds >logs/envonly.out 2>&1)
    CODE=$?
    ls "$WORK/envonly"
    "$GMEM" symbolize "$WORK/envonly" -o "$WORK/traces/kinds_envonly.bin" --force
    python3 "$ROOT/tests/gpu/check.py" "$GMEM" "$WORK/traces/kinds_envonly.bin" "$ROOT/tests/programs/kinds.cu" "$CODE" || FAILED=1
}

killed() {
    note "SIGKILL"
    rm -f "$WORK/traces/killed.bin" "$WORK/killed.log"
    (cd "$WORK" && exec "$GMEM" record -o traces/killed.bin -- bin/killed "$WORK/killed.log" >"logs/killed.out" 2>&1) &
    local rec=$!
    sleep 4
    local app=$(pgrep -P "$rec" | head -1)
    local kill_ns=$(date +%s%N)
    kill -9 "$app"
    wait "$rec"
    echo "--- killed: record exit $? (expect 137)"
    tail -n 4 "$WORK/logs/killed.out" | sed 's/^/    | /'
    python3 "$ROOT/tests/gpu/check_killed.py" "$GMEM" "$WORK/traces/killed.bin" "$WORK/killed.log" "$kill_ns" || FAILED=1
}

torch_phase() {
    note "PyTorch and CuPy"
    for mode in native expandable async; do
        case $mode in
            native) conf="" ;;
            expandable) conf="expandable_segments:True" ;;
            async) conf="backend:cudaMallocAsync" ;;
        esac
        PYTORCH_CUDA_ALLOC_CONF=$conf record "torch_$mode" python3 "$ROOT/tests/gpu/torch_train.py" "$WORK/torch_$mode.json" 50
        (cd "$ROOT/tests/gpu" && python3 torch_check.py "$GMEM" "$WORK/traces/torch_$mode.bin" "$WORK/torch_$mode.json") || FAILED=1
    done
    record torch_spawn python3 "$ROOT/tests/gpu/torch_spawn.py"
    echo "    processes: $("$GMEM" dump "$WORK/traces/torch_spawn.bin" | grep -c ' process pid=') (expect 6)"
    "$GMEM" dump "$WORK/traces/torch_spawn.bin" | grep ' process pid=' | sed 's/^/    /' | cut -c1-200
    record torch_profiler python3 "$ROOT/tests/gpu/torch_profiler.py"
    "$GMEM" dump "$WORK/traces/torch_profiler.bin" | grep -E " message | process_end" | cut -c1-300 | sed 's/^/    /'
    record cupy python3 "$ROOT/tests/gpu/cupy_arrays.py"
    "$GMEM" dump "$WORK/traces/cupy.bin" | awk '{print $2, $4}' | sort | uniq -c | sort -rn | head -12 | sed 's/^/    /'
}

# Steps and NVTX ranges of real PyTorch programs, against PyTorch's own
# figures (torch_steps.py, torch_ranges.py), and what a torch.cuda.nvtx
# push+pop pair costs recorded, recorded with --no-nvtx, and plain.
steps_phase() {
    note "steps and ranges"
    record torch_steps python3 "$ROOT/tests/gpu/torch_steps.py" "$WORK/torch_steps.json"
    "$GMEM" export -q --format json -o "$WORK/torch_steps.analysis.json" "$WORK/traces/torch_steps.bin"
    (cd "$ROOT/tests/gpu" && python3 steps_check.py "$WORK/torch_steps.analysis.json" "$WORK/torch_steps.json") || FAILED=1
    # Steps 10 to 15 alone (record --steps): the same truth for them.
    RECORD_FLAGS="--steps 10-15" record torch_steps_window python3 "$ROOT/tests/gpu/torch_steps.py" "$WORK/torch_steps_window.json"
    "$GMEM" export -q --format json -o "$WORK/torch_steps_window.analysis.json" "$WORK/traces/torch_steps_window.bin"
    (cd "$ROOT/tests/gpu" && python3 steps_check.py "$WORK/torch_steps_window.analysis.json" "$WORK/torch_steps_window.json" 10-15) || FAILED=1
    echo "    whole: $(stat -c %s "$WORK/traces/torch_steps.bin") bytes, window 10-15: $(stat -c %s "$WORK/traces/torch_steps_window.bin") bytes"
    record torch_ranges python3 "$ROOT/tests/gpu/torch_ranges.py" "$WORK/torch_ranges.json"
    "$GMEM" export -q --format json -o "$WORK/torch_ranges.analysis.json" "$WORK/traces/torch_ranges.bin"
    "$GMEM" export -q --format json --step-range iteration -o "$WORK/torch_ranges.steps.json" "$WORK/traces/torch_ranges.bin"
    (cd "$ROOT/tests/gpu" && python3 ranges_check.py "$WORK/torch_ranges.analysis.json" "$WORK/torch_ranges.json" "$WORK/torch_ranges.steps.json") || FAILED=1
    "$GMEM" report "$WORK/traces/torch_ranges.bin" -o "$WORK/reports/torch_ranges" 2>&1 | sed -n '/^ranges of/,/^$/p' | sed 's/^/    /'
    # Lightning's and Hugging Face's trainers: 12 steps and 12 of each
    # phase, with no code change.
    for loop in lightning hf; do
        record "trainer_$loop" python3 "$ROOT/tests/gpu/trainer_steps.py" "$loop" "$WORK/trainer_$loop"
        "$GMEM" export -q --format json -o "$WORK/trainer_$loop.analysis.json" "$WORK/traces/trainer_$loop.bin"
        python3 - "$WORK/trainer_$loop.analysis.json" "$loop" <<'PY' || FAILED=1
import json, sys
a = json.load(open(sys.argv[1]))
steps = [s for s in a.get("steps", []) if s["count"]]
ranges = {(r["domain"], r["name"]): r["instances"] for p in a.get("ranges", []) for r in p["ranges"]}
got = (steps[0]["count"] if steps else 0, ranges.get(("PyTorch", "backward")), ranges.get(("PyTorch", "optimizer step")))
ok = got == (12, 12, 12)
print(("ok   " if ok else "FAIL ") + f"{sys.argv[2]}: steps, backward and optimizer step phases {got} == (12, 12, 12)")
if sys.argv[2] == "lightning":
    # Lightning steps with a closure: each backward lies inside a step.
    p = a["ranges"][0]
    ids = {r["name"]: i for i, r in enumerate(p["ranges"]) if r["domain"] == "PyTorch"}
    span = lambda n: [(i["start_ns"], i.get("end_ns") or 2**64) for i in p["instances"] if i["range"] == ids.get(n)]
    inside = all(s[0] <= b[0] and b[1] <= s[1] for s, b in zip(span("optimizer step"), span("backward")))
    print(("ok   " if inside else "FAIL ") + "lightning: each backward inside its optimizer step (a closure)")
    ok = ok and inside
sys.exit(0 if ok else 1)
PY
    done
    for i in 1 2 3; do
        RECORD_FLAGS=--no-nvtx record torch_ranges_nonvtx python3 "$ROOT/tests/gpu/torch_ranges.py" "$WORK/torch_ranges_nonvtx.json"
        (cd "$ROOT/tests/gpu" && python3 torch_ranges.py "$WORK/torch_ranges_plain.json" | sed 's/^/    plain: /')
        record torch_ranges_again python3 "$ROOT/tests/gpu/torch_ranges.py" "$WORK/torch_ranges_again.json"
    done
}

pytest_phase() {
    # The wheel's pytest plugin on real CUDA: pytest and the wheel are
    # installed by the caller into the venv $VENV.
    note "pytest --gmem-prof"
    local dir="$WORK/pytest" g="$ROOT/tests/gpu"
    mkdir -p "$dir"
    (cd "$dir" && "$VENV/bin/python" -m pytest --gmem-prof -q -p no:cacheprovider "$g/test_torch_limits.py" >"$WORK/logs/pytest.out" 2>&1)
    echo "--- pytest: exit $? (1: two tests over their limits)"
    sed 's/^/    | /' "$WORK/logs/pytest.out" | tail -30
    python3 - "$WORK/logs/pytest.out" "$g/test_torch_limits.py" <<'PY' || FAILED=1
import re, sys
out = open(sys.argv[1]).read()
lines = {m.group(1): i + 1 for i, l in enumerate(open(sys.argv[2])) for m in [re.search(r"# line:(\w+)", l)] if m}
checks = [
    ("2 failed, 2 passed" in out, "2 failed, 2 passed"),
    ("test_over_its_limit took 256.00 MiB" in out, "the test over its limit took 256 MiB"),
    (f"test_torch_limits.py:{lines['over']}" in out, f"its line {lines['over']} named"),
    ("test_leaks left live 8.00 MiB" in out, "the leaking test left 8 MiB live"),
    (f"test_torch_limits.py:{lines['leak']}" in out, f"its line {lines['leak']} named"),
]
for ok, what in checks:
    print(("ok   " if ok else "FAIL ") + what)
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
}

framework() {
    note "framework view: PyTorch's caching allocator from the inside, Python frames"
    local g="$ROOT/tests/gpu"
    record torch_leak python3 "$g/torch_leak.py" "$WORK/torch_leak.json"
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True record torch_leak_expandable python3 "$g/torch_leak.py" "$WORK/torch_leak_expandable.json"
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record torch_leak_async python3 "$g/torch_leak.py" "$WORK/torch_leak_async.json"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 record torch_leak_uncached python3 "$g/torch_leak.py" "$WORK/torch_leak_uncached.json"
    record torch_fragment python3 "$g/torch_fragment.py" "$WORK/torch_fragment.json"
    record torch_fraction_oom python3 "$g/torch_fraction_oom.py" "$WORK/torch_fraction_oom.json"
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record torch_fraction_oom_async python3 "$g/torch_fraction_oom.py" "$WORK/torch_fraction_oom_async.json"
    record torch_oom python3 "$g/torch_oom.py" "$WORK/torch_oom.json"
    record torch_spawn python3 "$g/torch_spawn.py" "$WORK/torch_spawn.json"
    # The four workers' truths in one file, as the sample keeps it.
    python3 - "$WORK/torch_spawn.json" >"$WORK/torch_spawn.truth.json" <<'PY'
import json, sys
ws = [json.load(open(f"{sys.argv[1]}.{k}")) for k in ("0", "1", "fork0", "fork1")]
json.dump({"file": ws[0]["file"], "lines": ws[0]["lines"],
           "workers": [{k: w[k] for k in ("pid", "marker", "allocated", "max_allocated")} for w in ws]},
          sys.stdout, indent=1, sort_keys=True)
PY
    record ctypes_cuda python3 "$g/ctypes_cuda.py" "$WORK/ctypes_cuda.json"
    record cupy python3 "$g/cupy_arrays.py" "$WORK/cupy.json"
    for name in torch_leak torch_leak_expandable torch_leak_async torch_leak_uncached torch_fragment torch_fraction_oom \
        torch_fraction_oom_async torch_oom torch_spawn ctypes_cuda cupy; do
        echo "    $name: $("$GMEM" dump "$WORK/traces/$name.bin" | awk '{print $2}' | sort | uniq -c | tr -s ' ' | tr '\n' ',')"
        "$GMEM" dump "$WORK/traces/$name.bin" | grep -E " (allocator|message) " | cut -c1-300 | sed 's/^/      /'
        if [ -f "$g/framework_check.py" ]; then
            python3 "$g/framework_check.py" "$GMEM" "$name" "$WORK/traces/$name.bin" "$WORK/$name.json" || FAILED=1
        fi
    done
}

fixtures() {
    note "report fixtures: PyTorch OOM recovery, growth with and without a leak"
    record torch_oom python3 "$ROOT/tests/gpu/torch_oom.py" "$WORK/torch_oom.json"
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record torch_growth_leak python3 "$ROOT/tests/gpu/torch_growth.py" "$WORK/torch_growth_leak.json" 200 --leak
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record torch_growth python3 "$ROOT/tests/gpu/torch_growth.py" "$WORK/torch_growth.json" 200
    for name in torch_oom torch_growth_leak torch_growth; do
        echo "    $name: $(cat "$WORK/$name.json" 2>/dev/null), $(stat -c %s "$WORK/traces/$name.bin" 2>/dev/null) bytes"
    done
    "$GMEM" dump "$WORK/traces/torch_oom.bin" | grep -E " api .*result=[1-9]" | cut -c1-200 | sed 's/^/    /'
}

device_view_phase() {
    note "device view: NVML's samples against nvidia-smi read in the same run"
    record device_view python3 "$ROOT/tests/gpu/device_view.py" "$WORK/device_view.json"
    python3 "$ROOT/tests/gpu/device_view_check.py" "$GMEM" "$WORK/traces/device_view.bin" "$WORK/device_view.json" || FAILED=1
    "$GMEM" report "$WORK/traces/device_view.bin" -o "$WORK/logs/device-view-report" | grep -E "nvidia-smi" | sed 's/^/    /'
}

# NVIDIA's UnifiedMemoryStreams sample (cuda-samples, not in this repo: put
# Samples/0_Introduction/UnifiedMemoryStreams and Common/ under
# $CUDA_SAMPLES, default .gpu-extra/cuda-samples): managed memory filled by
# tasks and freed at the end, which an earlier growth rule called growth.
ums_phase() {
    note "UnifiedMemoryStreams: fill then free is a peak, not growth"
    local src=${CUDA_SAMPLES:-$ROOT/.gpu-extra/cuda-samples}
    nvcc -O2 -arch=sm_90 -I"$src/Common" -o "$WORK/bin/UnifiedMemoryStreams" \
        "$src/Samples/0_Introduction/UnifiedMemoryStreams/UnifiedMemoryStreams.cu" -lcublas -Xcompiler -fopenmp \
        || { echo "    UnifiedMemoryStreams did not build"; FAILED=1; return; }
    record unified_memory_streams "$WORK/bin/UnifiedMemoryStreams"
    "$GMEM" check "$WORK/traces/unified_memory_streams.bin" --max-growth 64MiB | sed 's/^/    /'
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "    FAIL: check --max-growth 64MiB"; FAILED=1; }
    "$GMEM" report "$WORK/traces/unified_memory_streams.bin" -o "$WORK/logs/ums-report" | grep -E "growth|peak|leak" | sed 's/^/    /'
}

jax_phase() {
    note "JAX: XLA's BFC allocator preallocates most of the GPU and sub-allocates inside"
    record jax python3 "$ROOT/tests/gpu/jax_train.py" "$WORK/jax.json"
    echo "    stats: $(cat "$WORK/jax.json" 2>/dev/null), $(stat -c %s "$WORK/traces/jax.bin" 2>/dev/null) bytes"
    "$GMEM" report "$WORK/traces/jax.bin" -o "$WORK/logs/jax-report" | head -40 | sed 's/^/    /'
}

# One program, built alone (the programs phase builds them all).
build_one() {
    nvcc -O2 -g -arch=sm_90 -o "$WORK/bin/$1" "$ROOT/tests/programs/$1.cu" -lcuda || { echo "build of $1 failed"; FAILED=1; return 1; }
}

ipc_phase() {
    note "CUDA IPC: a buffer shared with a child process counts once"
    build_one ipc || return
    record ipc "bin/ipc"
    python3 "$ROOT/tests/gpu/check.py" "$GMEM" "$WORK/traces/ipc.bin" "$ROOT/tests/programs/ipc.cu" "$CODE" || FAILED=1
    "$GMEM" dump "$WORK/traces/ipc.bin" | grep -E " (api|memory) " | cut -c1-220 | sed 's/^/      /'
    "$GMEM" report "$WORK/traces/ipc.bin" -o "$WORK/logs/ipc-report" | head -12 | sed 's/^/    /'
}

# Needs a machine with two GPUs (kind nvidia-h200-x2); on one GPU the
# program says so and the phase is skipped.
multigpu_phase() {
    note "two GPUs: per-device figures, a failure charged to its device, one process per GPU"
    build_one two_gpus || return
    record two_gpus "bin/two_gpus"
    if [ "$CODE" = 77 ]; then
        echo "    skipped: fewer than two GPUs here"
        return
    fi
    python3 "$ROOT/tests/gpu/check.py" "$GMEM" "$WORK/traces/two_gpus.bin" "$ROOT/tests/programs/two_gpus.cu" "$CODE" || FAILED=1
    "$GMEM" report "$WORK/traces/two_gpus.bin" -o "$WORK/logs/two-gpus-report" | grep -E "^device|out of memory|peak" | sed 's/^/    /'
}

pools_phase() {
    note "pools: JAX's and CuPy's own figures, read inside the program"
    local g="$ROOT/tests/gpu"
    record jax python3 "$g/jax_train.py" "$WORK/jax.json"
    record cupy_pool python3 "$g/cupy_pool.py" "$WORK/cupy_pool.json"
    for name in jax cupy_pool; do
        echo "    $name: $(stat -c %s "$WORK/traces/$name.bin" 2>/dev/null) bytes; truth: $(cat "$WORK/$name.json" 2>/dev/null | head -c 600)"
        "$GMEM" dump "$WORK/traces/$name.bin" | grep -E " pool_usage " | head -20 | cut -c1-200 | sed 's/^/      /'
        "$GMEM" report "$WORK/traces/$name.bin" -o "$WORK/logs/$name-report" | grep -E -A1 "JAX|CuPy" | head -12 | sed 's/^/    /'
    done
}

remedies_phase() {
    note "remedies: empty_cache at a reserved peak, activations at the allocated peak"
    local g="$ROOT/tests/gpu"
    record torch_cache python3 "$g/torch_cache.py" "$WORK/torch_cache.json"
    record torch_activations python3 "$g/torch_activations.py" "$WORK/torch_activations.json"
    record torch_fragmented_oom python3 "$g/torch_fragmented_oom.py" "$WORK/torch_fragmented_oom.json"
    # The remedy applied: the same program with expandable segments.
    (cd "$g" && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 torch_fragmented_oom.py "$WORK/torch_fragmented_oom_expandable.json")
    echo "    with expandable_segments:True: exit $?"
    for name in torch_cache torch_activations torch_fragmented_oom; do
        echo "    $name: $(stat -c %s "$WORK/traces/$name.bin" 2>/dev/null) bytes"
        "$GMEM" report "$WORK/traces/$name.bin" -o "$WORK/logs/$name-report" | head -40 | sed 's/^/    /'
    done
    python3 "$g/framework_check.py" "$GMEM" torch_activations "$WORK/traces/torch_activations.bin" "$WORK/torch_activations.json" || FAILED=1
}

private_pools_phase() {
    note "private pools (MemPool, a CUDA graph's pool); the cudaMallocAsync backend with its truth"
    local g="$ROOT/tests/gpu"
    record torch_private_pools python3 "$g/torch_private_pools.py" "$WORK/torch_private_pools.json"
    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync record torch_leak_async python3 "$g/torch_leak.py" "$WORK/torch_leak_async.json"
    for name in torch_private_pools torch_leak_async; do
        echo "    $name: $(stat -c %s "$WORK/traces/$name.bin" 2>/dev/null) bytes"
        "$GMEM" dump "$WORK/traces/$name.bin" | grep -E " (allocator|message) " | cut -c1-300 | sed 's/^/      /'
        python3 "$g/framework_check.py" "$GMEM" "$name" "$WORK/traces/$name.bin" "$WORK/$name.json" || FAILED=1
    done
    "$GMEM" dump "$WORK/traces/torch_private_pools.bin" | grep " allocator_event " | awk '{for(i=1;i<=NF;i++) if ($i ~ /^pool=/) print $i}' | sort | uniq -c | sed 's/^/    /'
}

# shellcheck source=tests/gpu/cupti_copies.sh
. "$ROOT/tests/gpu/cupti_copies.sh"

# Issue 36, first run: the same programs through each CUPTI, each trace
# checked against its program's `expect:` lines, and what each recorded
# (API version, allocations, frees, failures, launches) in one table.
cupti_phase() {
    note "the programs through every CUPTI at hand"
    build
    local table="$OUT/cupti-table.txt" tags
    tags=$(cupti_tags)
    printf '%-12s %-8s %-10s %7s %7s %7s %8s %s\n' cupti api program allocs frees failed launches check >"$table"
    for tag in $tags; do
        local lib
        lib=$(cupti_lib "$tag")
        for name in kinds oom threads children; do
            RECORD_FLAGS="--cupti $lib" record "cupti-$tag-$name" "bin/$name"
            local trace="$WORK/traces/cupti-$tag-$name.bin"
            local ok=pass
            python3 "$ROOT/tests/gpu/check.py" "$GMEM" "$trace" "$ROOT/tests/programs/$name.cu" "$CODE" >"$WORK/logs/cupti-$tag-$name.check" 2>&1 || { ok=FAIL; FAILED=1; }
            "$GMEM" dump --json "$trace" 2>/dev/null | python3 -c '
import json, sys
n = {"alloc": 0, "free": 0, "failed": 0, "launch": 0}
api = "-"
for line in sys.stdin:
    r = json.loads(line)
    t = r["type"]
    if t == "Process": api = r["cupti_api_version"]
    elif t == "Memory": n["alloc" if r["alloc"] else "free"] += 1
    elif t == "Api" and r["result"] != 0: n["failed"] += 1
    elif t == "KernelLaunch": n["launch"] += 1
print(api, n["alloc"], n["free"], n["failed"], n["launch"])
' | { read -r api a f x l; printf '%-12s %-8s %-10s %7s %7s %7s %8s %s\n' "$tag" "$api" "$name" "$a" "$f" "$x" "$l" "$ok" >>"$table"; }
            grep -h "not profiling\|refused\|CUPTI" "$WORK/logs/cupti-$tag-$name.out" | head -2 | sed 's/^/    | /'
        done
    done
    # A PyTorch training loop (default caching allocator) checked against
    # its own memory_stats, and torch.profiler with profile_memory=True
    # beside the collector (what each of the two saw), through each CUPTI.
    for tag in $tags; do
        local lib
        lib=$(cupti_lib "$tag")
        RECORD_FLAGS="--cupti $lib" record "cupti-$tag-torch" python3 "$ROOT/tests/gpu/torch_train.py" "$WORK/cupti-$tag-torch.json" 20
        (cd "$ROOT/tests/gpu" && python3 torch_check.py "$GMEM" "$WORK/traces/cupti-$tag-torch.bin" "$WORK/cupti-$tag-torch.json") >"$WORK/logs/cupti-$tag-torch.check" 2>&1 \
            && echo "    torch_check: pass" || { echo "    torch_check: FAIL"; tail -5 "$WORK/logs/cupti-$tag-torch.check"; FAILED=1; }
        RECORD_FLAGS="--cupti $lib" record "cupti-$tag-profiler" python3 "$ROOT/tests/gpu/torch_profiler.py"
        grep -h '"torch_profiler"' "$WORK/logs/cupti-$tag-profiler.out" | sed 's/^/    profiler saw: /'
        "$GMEM" dump "$WORK/traces/cupti-$tag-profiler.bin" | grep -E " message " | cut -c1-300 | sed 's/^/    /'
        "$GMEM" report -q -o "$WORK/reports/cupti-$tag-profiler" "$WORK/traces/cupti-$tag-profiler.bin" \
            && grep -o 'CUPTI[^<]*' "$WORK/reports/cupti-$tag-profiler/cupti-$tag-profiler.html" | sort -u | head -4 | sed 's/^/    report: /'
    done
    # compute-sanitizer's leak report of the same programs, against ours
    # from each CUPTI's trace.
    for name in kinds threads; do
        (cd "$WORK" && compute-sanitizer --leak-check full --print-limit 10000 "bin/$name" >"logs/sanitizer-$name.txt" 2>&1)
        grep -h "LEAK SUMMARY\|ERROR SUMMARY" "$WORK/logs/sanitizer-$name.txt" | sed 's/^/    /'
        local args=()
        for t in "$WORK"/traces/cupti-*-"$name".bin; do
            args+=("$(basename "$t" "-$name.bin" | sed 's/^cupti-//')=$t")
        done
        python3 "$ROOT/tests/gpu/sanitizer_compare.py" "$GMEM" "$WORK/logs/sanitizer-$name.txt" "${args[@]}" | tee -a "$OUT/sanitizer-table.txt" || FAILED=1
    done
    cat "$table"
    cp "$WORK"/traces/cupti-*-kinds.bin "$WORK"/logs/cupti-*.check "$OUT/" 2>/dev/null
}

# PyTorch memory snapshot pickles written by PyTorch itself (torch_snapshot.py)
# with torch's figures: the whole history, a ring that lost its start, and the
# same program recorded by gmem-prof; the pickles come back in snapshots.tar.xz.
roles_phase() {
    # What the memory is: each program recorded, then run under
    # torch.profiler (one CUPTI subscriber at a time), the two compared.
    note "roles against torch.profiler's memory categories"
    local g="$ROOT/tests/gpu" dir="$WORK/roles"
    mkdir -p "$dir"
    for p in ${ROLE_PROGRAMS:-resnet50 gpt2 gpt2_ckpt generate}; do
        record "roles_$p" python3 "$g/torch_roles.py" "$p" "$dir/$p.recorded.json"
        (cd "$g" && python3 torch_roles.py "$p" "$dir/$p.profiled.json" --profile >/dev/null) || FAILED=1
        "$GMEM" export -q --format json -o "$dir/$p.analysis.json" "$WORK/traces/roles_$p.bin"
        (cd "$g" && python3 roles_check.py "$dir/$p.analysis.json" "$dir/$p.recorded.json" "$dir/$p.profiled.json") || FAILED=1
        "$GMEM" report "$WORK/traces/roles_$p.bin" -o "$WORK/reports/roles_$p" 2>&1 | grep -A1 "by role" | sed 's/^/    /'
        cp "$WORK/traces/roles_$p.bin" "$dir/"
    done
    tar -C "$WORK" -cJf "$OUT/roles.tar.xz" roles
}

inputs_phase() {
    # Inputs moved with a plain .to("cuda"): the copy into each tensor.
    note "inputs moved with .to(\"cuda\")"
    record torch_inputs python3 "$ROOT/tests/gpu/torch_inputs.py" "$WORK/torch_inputs.json"
    "$GMEM" export -q --format json -o "$WORK/torch_inputs.analysis.json" "$WORK/traces/torch_inputs.bin"
    (cd "$ROOT/tests/gpu" && python3 inputs_check.py "$WORK/torch_inputs.analysis.json" "$WORK/torch_inputs.json") || FAILED=1
    echo "    copies recorded, by call:"
    "$GMEM" dump "$WORK/traces/torch_inputs.bin" | grep -o 'cuMemcpy[A-Za-z]*' | sort | uniq -c | sed 's/^/    /'
}

snapshot_phase() {
    note "PyTorch snapshot pickles"
    local g="$ROOT/tests/gpu" dir="$WORK/snapshots"
    mkdir -p "$dir"
    (cd "$g" && python3 torch_snapshot.py "$dir/torch_snapshot.pickle" "$dir/torch_snapshot.truth.json") || FAILED=1
    (cd "$g" && python3 torch_snapshot.py "$dir/torch_snapshot_ring.pickle" "$dir/torch_snapshot_ring.truth.json" 400) || FAILED=1
    record torch_snapshot_recorded python3 "$g/torch_snapshot.py" "$dir/torch_snapshot_recorded.pickle" "$dir/torch_snapshot_recorded.truth.json"
    cp "$WORK/traces/torch_snapshot_recorded.bin" "$dir/"
    python3 -m torch.cuda._memory_viz stats "$dir/torch_snapshot.pickle" | tail -5 | sed 's/^/    /'
    if "$GMEM" export --help | grep -q torch-snapshot; then
        "$GMEM" report "$dir/torch_snapshot.pickle" -o "$WORK/reports/torch_snapshot" 2>&1 | head -24 | sed 's/^/    /'
        "$GMEM" report "$dir/torch_snapshot_ring.pickle" -o "$WORK/reports/torch_snapshot_ring" 2>&1 | head -12 | sed 's/^/    /'
        # Our export read by PyTorch's own _memory_viz (its segsum asserts
        # that each segment's blocks add up).
        "$GMEM" export --format torch-snapshot -o "$dir/exported.pickle" "$WORK/traces/torch_snapshot_recorded.bin"
        for what in stats trace; do
            python3 -m torch.cuda._memory_viz $what "$dir/exported.pickle" >"$dir/exported.$what.txt" 2>&1
            echo "    _memory_viz $what of our export: exit $?"; tail -4 "$dir/exported.$what.txt" | sed 's/^/    | /'
        done
        python3 -m torch.cuda._memory_viz trace_plot "$dir/exported.pickle" -o "$dir/exported.html" && echo "    trace_plot: $(stat -c %s "$dir/exported.html") bytes"
    fi
    ls -la "$dir" | sed 's/^/    /'
    tar -C "$WORK" -cJf "$OUT/snapshots.tar.xz" snapshots
}

for phase in $PHASES; do
    case $phase in
        programs) programs ;;
        killed) killed ;;
        torch) torch_phase ;;
        steps) steps_phase ;;
        pytest) pytest_phase ;;
        snapshot) snapshot_phase ;;
        roles) roles_phase ;;
        inputs) inputs_phase ;;
        framework) framework ;;
        fixtures) fixtures ;;
        jax) jax_phase ;;
        deviceview) device_view_phase ;;
        ums) ums_phase ;;
        pools) pools_phase ;;
        ipc) ipc_phase ;;
        privatepools) private_pools_phase ;;
        multigpu) multigpu_phase ;;
        cupti) cupti_phase ;;
        remedies) remedies_phase ;;
        overhead) bash "$ROOT/tests/gpu/overhead.sh" ;;
        events|resnet|gpt2|marks|alloc|allocnative|launch) bash "$ROOT/tests/gpu/overhead.sh" "$phase" ;;
        *) echo "unknown phase $phase"; FAILED=1 ;;
    esac
done

# Bring back traces small enough to keep, and the logs.
tar -C "$WORK" --exclude='*.parts-*' --exclude='overhead/*.bin' -czf "$OUT/gpu-results.tar.gz" logs traces overhead $(cd "$WORK" && ls *.json *.json.* 2>/dev/null) 2>/dev/null
ls -la "$OUT"
note "result: $([ $FAILED = 0 ] && echo ALL PASSED || echo SOME FAILED)"
exit $FAILED
