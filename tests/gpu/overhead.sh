#!/usr/bin/env bash
# Overhead of `gmem-prof record`: plain and recorded runs of the same workload,
# alternated, ROUNDS of each; per run the median step time; reported as the
# ratio of the medians of those, with the spread (min..max of the runs).
# Run on the GPU machine by tests/gpu/run.sh overhead.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${GMEM_BIN:-$ROOT/.gpu-bin}
WORK=${WORK:-/tmp/gmem-gpu}
OUT=${OUT:-$WORK/out}
ROUNDS=${ROUNDS:-5}
mkdir -p "$WORK/overhead"
RES="$WORK/overhead/results.jsonl"
: >"$RES"

one() {  # one BENCH VARIANT ROUND
    local bench=$1 variant=$2 round=$3 line
    local script="$ROOT/tests/gpu/bench_$bench.py"
    local trace="$WORK/overhead/$bench-$variant-$round.bin"
    rm -f "$trace"
    case $variant in
        plain) line=$(python3 "$script" 2>/dev/null | tail -1) ;;
        full) line=$("$BIN/gmem-prof" record -o "$trace" -- python3 "$script" 2>"$trace.log" | tail -1) ;;
        nokernels) line=$("$BIN/gmem-prof" record --no-kernels -o "$trace" -- python3 "$script" 2>"$trace.log" | tail -1) ;;
        nostacks) line=$("$BIN/gmem-prof" record --stack-depth 0 -o "$trace" -- python3 "$script" 2>"$trace.log" | tail -1) ;;
    esac
    echo "{\"variant\": \"$variant\", \"round\": $round, \"result\": $line}" >>"$RES"
    echo "  $bench $variant round $round: $line"
}

echo "### overhead: resnet50 (default caching allocator)"
for r in $(seq 1 "$ROUNDS"); do
    one resnet plain "$r"
    one resnet full "$r"
done
echo "### overhead: allocation-heavy loop (backend:cudaMallocAsync)"
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
for r in $(seq 1 "$ROUNDS"); do
    one alloc plain "$r"
    one alloc full "$r"
    one alloc nostacks "$r"
done
unset PYTORCH_CUDA_ALLOC_CONF
# Allocation events per step, from one recorded run's trace.
"$BIN/gmem-prof" dump "$WORK/overhead/alloc-full-1.bin" | awk '
    / api / {api++} / memory alloc / {alloc++} / memory free / {free++}
    END {printf "{\"api_calls\": %d, \"allocs\": %d, \"frees\": %d}\n", api, alloc, free}' >"$WORK/overhead/alloc-events.json"
tail -n 3 "$WORK/overhead/alloc-full-1.bin.log"
python3 - "$RES" "$WORK/overhead/alloc-events.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
events = json.load(open(sys.argv[2]))
by = {}
for r in rows:
    by.setdefault((r["result"]["bench"], r["variant"]), []).append(r["result"]["median_ms"])
print("### overhead summary (ratio of medians of per-run median step times)")
for bench in ("resnet50", "alloc"):
    plain = by.get((bench, "plain"))
    if not plain:
        continue
    mp = statistics.median(plain)
    print(f"  {bench} plain: median {mp:.3f} ms  runs {min(plain):.3f}..{max(plain):.3f}")
    for variant in ("full", "nokernels", "nostacks"):
        v = by.get((bench, variant))
        if not v:
            continue
        mv = statistics.median(v)
        line = (f"  {bench} {variant}: median {mv:.3f} ms  runs {min(v):.3f}..{max(v):.3f}  "
                f"ratio {mv / mp:.3f} (spread {min(v) / max(plain):.3f}..{max(v) / min(plain):.3f})")
        if bench == "alloc":
            steps = rows[0]["result"].get("steps", 500)
            per_step = (events["allocs"] + events["frees"]) / steps
            line += f"  ~{per_step:.0f} alloc+free events/step, {(mv - mp) * 1e3 / per_step:.2f} us/event"
        print(line)
PY
