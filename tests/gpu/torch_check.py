#!/usr/bin/env python3
"""Compares a trace of torch_train.py with PyTorch's own memory_stats.

With the default caching allocator, each segment PyTorch reserves is one
cudaMalloc (cuMemAlloc) whose stack passes through libc10_cuda: the trace's
count and bytes of such device allocations must equal memory_stats'
segment.all.allocated and reserved_bytes.all.allocated, and its frees of them
segment.all.freed / reserved_bytes.all.freed.
With backend:cudaMallocAsync, every tensor allocation is a cuMemAllocAsync.

usage: torch_check.py GMEM_PROF TRACE STATS_JSON
"""
import json
import sys

from check import Stream, load


def main():
    gmem, trace, stats_path = sys.argv[1:4]
    stats = json.load(open(stats_path))
    streams, _ = load(gmem, trace)
    p = Stream(streams[0])
    modules = {m["id"]: m["path"] for m in p.recs.get("Module", [])}

    def via_c10(stack_id):
        st = p.stacks.get(stack_id)
        if not st:
            return False
        for f in st["frames"]:
            sym = p.symbols.get(f.get("Native"))
            if sym and "libc10_cuda" in modules.get(sym["module"], ""):
                return True
        return False

    backend = stats["allocator_backend"]
    allocs = [e for e in p.allocations() if e["m"]["kind"] == 3]
    ours = []
    for e in allocs:
        calls = [a for a in p.api_by_corr.get(e["m"]["correlation"], []) if not a["internal"]]
        if calls and via_c10(calls[0]["stack"]):
            ours.append(e)
    got = {
        "count": len(ours),
        "bytes": sum(e["m"]["bytes"] for e in ours),
        "freed": sum(1 for e in ours if e["freed"]),
        "freed_bytes": sum(e["m"]["bytes"] for e in ours if e["freed"]),
    }
    print(f"== torch ({backend}) {trace}")
    print(f"   device allocations through libc10_cuda: {got}")
    print(f"   all device allocations: {len(allocs)}, api calls: {len(p.recs.get('Api', []))}, "
          f"kernels: {len(p.recs.get('Kernel', []))}, unjoined: {p.unjoined}")
    if backend == "native" and stats["segment.all.allocated"] == 0 and stats["reserved_bytes.all.allocated"] > 0:
        # expandable_segments: segments grow by cuMemCreate+cuMemMap; torch
        # counts bytes, not maps.
        want = {"bytes": stats["reserved_bytes.all.allocated"],
                "freed_bytes": stats["reserved_bytes.all.freed"]}
    elif backend == "native":
        want = {
            "count": stats["segment.all.allocated"],
            "bytes": stats["reserved_bytes.all.allocated"],
            "freed": stats["segment.all.freed"],
            "freed_bytes": stats["reserved_bytes.all.freed"],
        }
    else:
        # cudaMallocAsync: every tensor is a cuMemAllocAsync, so the peak of
        # live bytes over the trace must be torch's allocated_bytes peak.
        # (Live bytes at the end differ: the trace goes on through the
        # interpreter's shutdown, which frees the model after the stats.)
        live = peak = 0
        sizes = {}
        mem = sorted((m for m in p.recs.get("Memory", []) if m["kind"] == 3), key=lambda m: m["time"])
        for m in mem:
            calls = [a for a in p.api_by_corr.get(m["correlation"], []) if not a["internal"]]
            if m["alloc"] and calls and calls[0]["func_name"] == "cuMemAllocAsync" and via_c10(calls[0]["stack"]):
                sizes[m["address"]] = m["bytes"]
                live += m["bytes"]
                peak = max(peak, live)
            elif not m["alloc"] and m["address"] in sizes:
                live -= sizes.pop(m["address"])
        got["peak_bytes"] = peak
        want = {"peak_bytes": stats.get("allocated_bytes.all.peak", "missing from memory_stats")}
    good = all(got[k] == v for k, v in want.items())
    print(f"   {'PASS' if good else 'FAIL'}  expected from torch.cuda.memory_stats: {want}")
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
