#!/usr/bin/env bash
# Overhead of `gmem-prof record`, measured as the issue asks: plain and
# recorded runs of the same workload, alternated, ROUNDS of each; per run the
# median step time; reported as the ratio of the medians of those runs, with
# the spread (min..max over runs).
#
#   tests/gpu/overhead.sh [events] [resnet] [gpt2] [alloc] [launch] [marks]
#                                                   (default: events resnet alloc)
#
# PIN_CPUS=LIST runs every run (plain and recorded alike) under
# `taskset -c LIST`: the host's scheduler otherwise moves the program
# between cores and NUMA nodes from run to run, and plain runs of the same
# loop then differ by up to 30%.
#
# events: bench_events.cu, ns per cudaMallocAsync+cudaFreeAsync pair from 30
#         frames deep (the per-event cost, least noisy); EVENTS_VARIANTS
#         (default "plain full nostacks nokernels").
# resnet: torchvision resnet50 bf16 training (default caching allocator);
#         RESNET_VARIANTS picks the recorded variants (default "plain full";
#         also nokernels, timed = --kernels timed, nostacks,
#         slowflush = --flush-ms 1000,
#         freestacks = --free-stacks, tensornative = --tensor-stacks all,
#         pythonstacks = --tensor-stacks python, and depthN =
#         --stack-depth N, for any bench; torchhistory = no gmem-prof, PyTorch's own
#         `_record_memory_history(stacks="python")`, for resnet and the
#         allocation loops; torchtrace = the same history without stacks,
#         `context=None`; torchtrace1 = that with a history of one entry,
#         little more than what PyTorch does for each event once a trace
#         tracker is attached: a bound on the floor a paused collector
#         leaves).
# gpt2:   a GPT-2-size model (transformers' config, 12 layers of 768) trained
#         with AdamW under bf16 autocast, batch 8 of 512 tokens, GPT2_STEPS
#         timed steps (default 40); GPT2_VARIANTS (default "plain full").
# marks:  bench_marks.py, µs per optimizer step (the bootstrap's step record
#         and phase range) and per NVTX range push and pop, plain and full.
# alloc:  MLP training with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync;
#         ALLOC_VARIANTS picks its variants (default "plain full nostacks").
# allocnative: the same loop with PyTorch's default caching allocator, whose
#         tensors the collector sees from inside the allocator (same
#         ALLOC_VARIANTS).
# launch: bench_launch.cu, ns per tiny kernel launched back to back (the
#         per-kernel cost of kernel tracing); LAUNCH_VARIANTS (default
#         "plain full nokernels barekernels").
#
# Variants bare* run the workload under tests/gpu/bare_cupti.c instead of
# gmem-prof: CUPTI features enabled with empty bodies, records discarded: the
# floor any CUPTI-based tool pays for them.
#   barekernels  CONCURRENT_KERNEL activity
#   barehw       the same, with CUPTI's hardware-based tracing asked for
#   barememory   MEMORY2 activity
#   barecallbacks  callbacks on every cbid the collector watches, no activity
#   bareasync    MEMORY2 + callbacks on cuMem{Alloc,Free}Async only
#   bareours     MEMORY2 + callbacks on every cbid the collector watches
#   bareall      everything the collector enables: kernel, memory, pool and
#                device activity, its callbacks, the resource callback and
#                a flush every 200 ms
#   bareallfrees bareall plus callbacks on the ordinary frees (what the
#                collector enables with --free-stacks)
#   bareactivity bareall without the allocation callbacks: the activity alone
#   barewrap     bareactivity plus wrappers of cuMemAllocAsync and
#                cuMemAllocFromPoolAsync handed out through a cuGetProcAddress
#                callback: allocation calls seen without CUPTI's callback path
#   barekernels32  barekernels with a 32 MiB device buffer for kernel records
#   barekernelspt  barekernels with CUPTI's per-thread activity buffers
#   barelaunch   callbacks on the kernel launch cbids reading a clock and the
#                name, no activity: every launch seen on the host instead
#   bareallcb    bareall with launch callbacks in place of kernel activity
#   barefloor    what a paused collector keeps enabled: memory, pool and
#                device activity, the resource callback, the flush thread
# bareX@V runs bare variant X through CUPTI release V (a staged release or
# `toolkit`, as cupti-V below): bare_cupti.c linked against that copy, to
# tell what each release's own path costs (bareallcb@12.8.90 against
# bareallcb@toolkit).
#
# Variant inprocess records with recording paused and resumed every
# PAUSE_EVERY steps (default 10) inside the run (recording_switch.py): its
# summary line gives the ratio of recorded to paused steps, each pair of
# phases moments apart in one process, free of the host's drift between
# runs; paused still has CUPTI loaded and PyTorch's tracker attached.
# inprocess-X does the same with variant X (inprocess-nokernels,
# inprocess-with-NAME, ...): what each part of recording costs, measured
# to a percent or better. X may be a bare* variant (bare_cupti.c switches
# everything it enabled off and on: CUPTI's own cost, measured the same
# way) or torchhistory (PyTorch's recorder turned off and on).
#
# Variant cupti-V records through CUPTI release V (`record --cupti`): V is
# a release tests/gpu/stage_cupti.sh staged (12.8.90, ...) or `toolkit`,
# the machine's own CUDA 13.0 one (what `full` finds by itself). Not in a
# PyTorch program whose wheel brings its own libcupti (torch 2.11 cu13):
# torch loads it before CUDA starts and the collector uses that one, so
# every cupti-V is the same run there; bareX@V is not so deferred.
#
# Variant with-NAME records with another collector build,
# $GMEM_BIN/alt/NAME.so (`record --collector`): builds compared in the same
# runs, by step time and by the collector's own figures of each.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${GMEM_BIN:-$ROOT/.gpu-bin}
WORK=${WORK:-/tmp/gmem-gpu}
ROUNDS=${ROUNDS:-5}
BENCHES=${*:-events resnet alloc}
mkdir -p "$WORK/overhead"
RES="$WORK/overhead/results.jsonl"

# The host: where a loop's host sets its pace, the same build measured
# 1.02 on one host and 1.19 on another (docs/overhead.md, 2026-12-07
# evening), so every summary says which it ran on.
echo "### host: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1);" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//');" \
    "clock source $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"

# cupti_lib V, the library of the `cupti-V` variants.
# shellcheck source=tests/gpu/cupti_copies.sh
. "$ROOT/tests/gpu/cupti_copies.sh"

# The collector's own figures from the first round's recorded runs of
# bench $1 (what each event, launch and walk cost, from the trace's notes).
own_figures() {
    for t in "$WORK/overhead/$1"-*-1.bin; do
        [ -f "$t" ] || continue
        echo "  $(basename "$t"):"
        "$BIN/gmem-prof" dump "$t" | grep -oE '(stack capture|PyTorch allocator|CUDA library workspaces|kernel launches|writer thread|clock)[: ].*' | sed 's/^/    /'
    done
}

one() {  # one BENCH VARIANT ROUND COMMAND...
    local bench=$1 variant=$2 round=$3 line flags=()
    shift 3
    local trace="$WORK/overhead/$bench-$variant-$round.bin"
    rm -f "$trace"
    # inprocess-X: variant X (default: full) with its recording switched
    # off and on every PAUSE_EVERY steps inside each run.
    local what=$variant pause=()
    if [ "${variant%%-*}" = inprocess ]; then
        what=${variant#inprocess}
        what=${what#-}
        pause=(env "BENCH_PAUSE_EVERY=${PAUSE_EVERY:-10}")
    fi
    case $what in
        nokernels) flags=(--no-kernels) ;;
        timed) flags=(--kernels timed) ;;
        nostacks) flags=(--stack-depth 0) ;;
        slowflush) flags=(--flush-ms 1000) ;;
        freestacks) flags=(--free-stacks) ;;
        noframeworks) flags=(--no-frameworks) ;;
        nopython) flags=(--no-python) ;;
        tensornative) flags=(--tensor-stacks all) ;;
        pythonstacks) flags=(--tensor-stacks python) ;;
        depth*) flags=(--stack-depth "${what#depth}") ;;
        with-*) flags=(--collector "$BIN/alt/${what#with-}.so") ;;
        cupti-*) flags=(--cupti "$(cupti_lib "${what#cupti-}")") ;;
        ""|full|plain|torchhistory|torchtrace|torchtrace1|bare*) ;;
        *)  # a typo would otherwise run the full collector under its name
            echo "  $bench $variant: unknown variant" >&2
            return ;;
    esac
    if [ -n "${PIN_CPUS:-}" ]; then
        set -- taskset -c "$PIN_CPUS" "$@"
    fi
    if [ "$what" = plain ]; then
        line=$("$@" 2>/dev/null | tail -1)
    elif [ "${what#torch}" != "$what" ]; then
        local history=1 entries=100000
        case $what in
            torchtrace) history=nostacks ;;
            torchtrace1) history=nostacks entries=1 ;;
        esac
        line=$(BENCH_TORCH_HISTORY=$history BENCH_TORCH_HISTORY_ENTRIES=$entries "${pause[@]}" "$@" 2>/dev/null | tail -1)
    elif [ "${what#bare}" != "$what" ]; then
        # A missing library would make CUDA skip the injection silently and
        # the run would pass for free: refuse instead.
        local bare_lib="$WORK/libbare_cupti.so"
        if [ "${what#*@}" != "$what" ]; then
            bare_lib=$(bare_through "${what#*@}")
            what=${what%@*}
        fi
        [ -f "$bare_lib" ] || { echo "  $bench $variant: $bare_lib was not built" >&2; return; }
        local kinds=memory cbs=none resource=0 flush=0 wrap=0 hw=0 devbuf=0 pt=0
        case $what in
            barekernels) kinds=kernel ;;
            barememory) ;;
            barehw) kinds=kernel hw=1 ;;
            barecallbacks) kinds=none cbs=ours ;;
            bareasync) cbs=async ;;
            bareours) cbs=ours ;;
            bareall) kinds=kernel,memory,pool,device cbs=ours resource=1 flush=200 ;;
            bareallfrees) kinds=kernel,memory,pool,device cbs=ours,frees resource=1 flush=200 ;;
            bareactivity) kinds=kernel,memory,pool,device resource=1 flush=200 ;;
            barewrap) kinds=kernel,memory,pool,device resource=1 flush=200 wrap=1 ;;
            barekernels32) kinds=kernel devbuf=32 ;;
            barekernelspt) kinds=kernel pt=1 ;;
            barelaunch) kinds=none cbs=launch ;;
            bareallcb) kinds=memory,pool,device cbs=ours,launch resource=1 flush=200 ;;
            barefloor) kinds=memory,pool,device resource=1 flush=200 ;;
            *) echo "  $bench $variant: unknown variant" >&2; return ;;
        esac
        line=$(CUDA_INJECTION64_PATH="$bare_lib" BARE_CUPTI_KINDS=$kinds \
            BARE_CUPTI_CALLBACKS=$cbs BARE_CUPTI_RESOURCE=$resource BARE_CUPTI_FLUSH_MS=$flush BARE_CUPTI_WRAP=$wrap BARE_CUPTI_HWTRACE=$hw \
            BARE_CUPTI_DEVBUF_MB=$devbuf BARE_CUPTI_PER_THREAD=$pt \
            "${pause[@]}" "$@" 2>"$trace.log" | tail -1)
    else
        line=$("${pause[@]}" "$BIN/gmem-prof" record "${flags[@]}" -o "$trace" -- "$@" 2>"$trace.log" | tail -1)
    fi
    echo "{\"variant\": \"$variant\", \"round\": $round, \"result\": $line}" >>"$RES"
    echo "  $bench $variant round $round: $line"
}

# bare_cupti.c linked against CUPTI release V's copy (cupti_lib V), built
# once: prints the library's path. Built with the toolkit's headers: the
# functions and values it uses are the same in CUPTI 12 and 13.
bare_through() {  # bare_through V
    local lib out="$WORK/libbare_cupti-$1.so"
    if [ ! -f "$out" ]; then
        lib=$(cupti_lib "$1") || return
        gcc -O2 -shared -fPIC -pthread -o "$out" "$ROOT/tests/gpu/bare_cupti.c" \
            -I/usr/local/cuda/targets/x86_64-linux/include -I/usr/local/cuda/extras/CUPTI/include \
            -L/usr/local/cuda/targets/x86_64-linux/lib -L"$(dirname "$lib")" -l:"$(basename "$lib")" \
            -Wl,-rpath,"$(dirname "$lib")" >&2 || echo "bare_cupti through $1 did not build" >&2
    fi
    echo "$out"
}

# The variants of round R: in the order given in odd rounds, reversed in
# even ones. The host's speed drifts within a round too: always running
# plain first would put that drift into every ratio the same way; turned
# around every other round, it goes one way in half the rounds and the
# other way in the rest (the summary shows both halves).
in_turn() {  # in_turn ROUND VARIANT...
    local r=$1
    shift
    if [ $((r % 2)) -eq 1 ]; then
        echo "$@"
    else
        local out=() v
        for v in "$@"; do out=("$v" "${out[@]}"); done
        echo "${out[@]}"
    fi
}

case " ${EVENTS_VARIANTS:-} ${RESNET_VARIANTS:-} ${ALLOC_VARIANTS:-} ${LAUNCH_VARIANTS:-} $BENCHES " in
    *bare*|*launch*)
        gcc -O2 -shared -fPIC -pthread -o "$WORK/libbare_cupti.so" "$ROOT/tests/gpu/bare_cupti.c" \
            -I/usr/local/cuda/targets/x86_64-linux/include -I/usr/local/cuda/extras/CUPTI/include \
            -L/usr/local/cuda/targets/x86_64-linux/lib -L/usr/local/cuda/extras/CUPTI/lib64 -lcupti || echo "bare_cupti did not build" ;;
esac

for bench in $BENCHES; do
    echo "### overhead: $bench"
    case $bench in
        events)
            nvcc -O2 -arch=sm_90 -o "$WORK/bench_events" "$ROOT/tests/gpu/bench_events.cu"
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${EVENTS_VARIANTS:-plain full nostacks nokernels}); do one events $v "$r" "$WORK/bench_events" 50000 30; done
            done ;;
        resnet)
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${RESNET_VARIANTS:-plain full}); do one resnet $v "$r" python3 "$ROOT/tests/gpu/bench_train.py"; done
            done
            own_figures resnet ;;
        gpt2)
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${GPT2_VARIANTS:-plain full}); do
                    BENCH_MODEL=gpt2 BENCH_STEPS=${GPT2_STEPS:-40} one gpt2 $v "$r" python3 "$ROOT/tests/gpu/bench_train.py"
                done
            done
            own_figures gpt2 ;;
        marks)
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" plain full); do one marks $v "$r" python3 "$ROOT/tests/gpu/bench_marks.py"; done
            done ;;
        launch)
            nvcc -O2 -arch=sm_90 -o "$WORK/bench_launch" "$ROOT/tests/gpu/bench_launch.cu"
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${LAUNCH_VARIANTS:-plain full nokernels barekernels}); do one launch $v "$r" "$WORK/bench_launch" 200000; done
            done ;;
        allocnative)
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${ALLOC_VARIANTS:-plain full nostacks}); do
                    PYTORCH_CUDA_ALLOC_CONF= one allocnative $v "$r" python3 "$ROOT/tests/gpu/bench_alloc.py"
                done
            done
            "$BIN/gmem-prof" dump "$WORK/overhead/allocnative-full-1.bin" | awk '
                / allocator_event .* alloc / {alloc++} / allocator_event .* (free_requested|free) / {free++}
                END {printf "{\"allocs\": %d, \"frees\": %d}\n", alloc, free}' >"$WORK/overhead/allocnative-events.json"
            own_figures allocnative ;;
        alloc)
            for r in $(seq 1 "$ROUNDS"); do
                for v in $(in_turn "$r" ${ALLOC_VARIANTS:-plain full nostacks}); do
                    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync one alloc $v "$r" python3 "$ROOT/tests/gpu/bench_alloc.py"
                done
            done
            "$BIN/gmem-prof" dump "$WORK/overhead/alloc-full-1.bin" | awk '
                / memory t=[0-9]+ alloc / {alloc++} / memory t=[0-9]+ free / {free++}
                END {printf "{\"allocs\": %d, \"frees\": %d}\n", alloc, free}' >"$WORK/overhead/alloc-events.json"
            tail -n 2 "$WORK/overhead/alloc-full-1.bin.log"
            grep -H bare_cupti "$WORK"/overhead/alloc-bare*-1.bin.log 2>/dev/null
            # Where the stack cost goes (the collector's own counters).
            for t in "$WORK"/overhead/alloc-*-1.bin; do
                echo "  $(basename "$t"): $("$BIN/gmem-prof" dump "$t" | grep -o 'stack capture.*' | head -1)"
            done ;;
    esac
done

python3 - "$RES" "$WORK/overhead/alloc-events.json" "$WORK/overhead/allocnative-events.json" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
events = {b: json.load(open(p)) for b, p in (("alloc", sys.argv[2]), ("allocnative", sys.argv[3]))
          if os.path.exists(p)}
by = {}
steps = {}
per_round = {}
p10_round = {}
probe_round = {}
inprocess = {}
marks = {}
for r in rows:
    res = r["result"]
    if res["bench"] == "marks":
        marks.setdefault(r["variant"], []).append(res)
        continue
    if "inprocess_ratio" in res:
        inprocess.setdefault((res["bench"], r["variant"]), []).append(res)
    value = res.get("median_ms", res.get("ns_per_pair", res.get("ns_per_kernel")))
    by.setdefault((res["bench"], r["variant"]), []).append(value)
    per_round[(res["bench"], r["variant"], r["round"])] = value
    if "p10_ms" in res:
        p10_round[(res["bench"], r["variant"], r["round"])] = res["p10_ms"]
    if "probe_ms" in res:
        probe_round[(res["bench"], r["variant"], r["round"])] = res["probe_ms"]
    steps[res["bench"]] = res.get("steps")


def bootstrap(values, n=4000):
    # The 5th and 95th percentiles of the median of resamples: how far the
    # median of this many noisy rounds can be trusted.
    import random
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n))
    return medians[n // 20], medians[n - 1 - n // 20]


def round_ratios(bench, variant):
    # Each round's recorded run against the plain run of the same round:
    # the machine drifts between rounds more than within one. By round.
    return {rnd: v / per_round[(bench, "plain", rnd)]
            for (b, var, rnd), v in per_round.items()
            if b == bench and var == variant and (bench, "plain", rnd) in per_round}


def paired(bench, variant):
    ratios = list(round_ratios(bench, variant).values())
    return statistics.median(ratios), min(ratios), max(ratios), ratios
unit = {"events": "ns/pair", "resnet50": "ms/step", "gpt2": "ms/step", "alloc": "ms/step", "allocnative": "ms/step",
        "launch": "ns/kernel"}
print("### overhead summary: ratio of medians of per-run values, spread = min..max over runs")
for bench in ("events", "resnet50", "gpt2", "alloc", "allocnative", "launch"):
    plain = by.get((bench, "plain"))
    if not plain:
        continue
    mp = statistics.median(plain)
    print(f"  {bench} plain: median {mp:.3f} {unit[bench]}, runs {min(plain):.3f}..{max(plain):.3f}")
    depths = sorted({v for (b, v) in by if b == bench and v.startswith("depth")})
    order = ["full", "nostacks", "nopython", "noframeworks", "tensornative", "pythonstacks", *depths, "nokernels",
             "slowflush", "freestacks",
             "barekernels", "barememory", "barecallbacks", "bareasync", "bareours",
             "bareall", "bareallfrees", "bareactivity", "barewrap"]
    # Then any other variant run, in the order first seen.
    order += [v for (b, v) in by if b == bench and v != "plain" and v not in order]
    for variant in order:
        v = by.get((bench, variant))
        if not v:
            continue
        mv = statistics.median(v)
        pm, plo, phi, ratios = paired(bench, variant)
        line = (f"  {bench} {variant}: median {mv:.3f}, runs {min(v):.3f}..{max(v):.3f}, "
                f"ratio {mv / mp:.3f} (runs {min(v) / mp:.3f}..{max(v) / mp:.3f}), "
                f"paired by round {pm:.3f} ({plo:.3f}..{phi:.3f})")
        if bench == "events":
            line += f", {(mv - mp) / 2:.0f} ns per event"
        if bench == "launch":
            line += f", +{mv - mp:.0f} ns per kernel"
        per_step = (events[bench]["allocs"] + events[bench]["frees"]) / steps[bench] if bench in events else 0
        if per_step:  # none when the run that counts them was not made
            line += f", ~{per_step:.0f} events/step, {(mv - mp) * 1e6 / per_step:.0f} ns per event"
        print(line)
        print(f"    {bench} {variant} per round: " + " ".join(f"{r:.3f}" for r in ratios))
        if (bench, variant) in inprocess:
            runs = inprocess[(bench, variant)]
            pairs = [p for res in runs for p in res["pair_ratios"]]
            print(f"    {bench} {variant} recorded/paused in one process: median over runs "
                  f"{statistics.median(r['inprocess_ratio'] for r in runs):.3f} ("
                  + " ".join(f"{r['inprocess_ratio']:.3f}" for r in runs)
                  + f"); over all {len(pairs)} pairs of phases {statistics.median(pairs):.3f}"
                  + (", 90%% interval %.3f..%.3f" % bootstrap(pairs) if len(pairs) >= 4 else ""))
        if len(ratios) >= 4:
            lo, hi = bootstrap(ratios)
            by_round = round_ratios(bench, variant)
            odd = [r for rnd, r in by_round.items() if rnd % 2 == 1]
            even = [r for rnd, r in by_round.items() if rnd % 2 == 0]
            print(f"    {bench} {variant} paired median's 90% interval (bootstrap): {lo:.3f}..{hi:.3f}; "
                  f"rounds with plain first {statistics.median(odd):.3f}, with plain last "
                  f"{statistics.median(even):.3f}")
        p10 = [v / p10_round[(b, "plain", rnd)] for (b, var, rnd), v in p10_round.items()
               if b == bench and var == variant and (b, "plain", rnd) in p10_round]
        if p10:
            print(f"    {bench} {variant} 10th-percentile steps, paired by round: median "
                  f"{statistics.median(p10):.3f}: " + " ".join(f"{r:.3f}" for r in p10))
        # Each round's ratio over the ratio of the two runs' host probes
        # (host_probe.py): what is left once the host's own speed is
        # taken out.
        adjusted = [v / per_round[(b, "plain", rnd)]
                    / (probe_round[(b, var, rnd)] / probe_round[(b, "plain", rnd)])
                    for (b, var, rnd), v in per_round.items()
                    if b == bench and var == variant and (b, "plain", rnd) in per_round
                    and (b, var, rnd) in probe_round and (b, "plain", rnd) in probe_round]
        if adjusted:
            print(f"    {bench} {variant} paired, over the host probes' ratio: median "
                  f"{statistics.median(adjusted):.3f}: " + " ".join(f"{r:.3f}" for r in adjusted))
# The marks: what recording adds to each, in µs (full minus plain).
for field, what in (("step_us", "optimizer step"), ("range_us", "NVTX range push+pop")):
    plain = [m[field] for m in marks.get("plain", [])]
    full = [m[field] for m in marks.get("full", [])]
    if plain and full:
        p, f = statistics.median(plain), statistics.median(full)
        print(f"  marks {what}: plain {p:.2f} µs ({min(plain):.2f}..{max(plain):.2f}), recorded {f:.2f} µs "
              f"({min(full):.2f}..{max(full):.2f}): +{f - p:.2f} µs per mark")
PY
