"""Ground truth the GPU programs write beside their traces: what PyTorch
itself says (memory_stats, the memory snapshot's segments and blocks), the
lines of the program marked with a `line:NAME` comment, and the fragmentation of each of
the caching allocator's pools computed from the snapshot's blocks."""
import gc
import json
import sys


def marked_lines(path):
    """{NAME: line number} of every line ending in a `line:NAME` comment."""
    lines = {}
    with open(path) as f:
        for number, text in enumerate(f, 1):
            code, sep, mark = text.rpartition("# line:")
            if sep and code.strip() and mark.strip().isidentifier():
                lines[mark.strip()] = number
    return lines


def default_pool_key(seg):
    return f'{seg["device"]}/{seg["stream"]}/{seg["segment_type"]}'


def pools_from_snapshot(snapshot, key_of=default_pool_key):
    """Per pool of the caching allocator (by default: device, stream, small
    or large): bytes in its segments, free bytes inside them, the largest
    free block and F = 1 - largest / free, from the snapshot's blocks (the
    definition the report uses). `key_of(segment)` names a segment's pool;
    segments it gives None are left out."""
    pools = {}
    for seg in snapshot["segments"]:
        key = key_of(seg)
        if key is None:
            continue
        p = pools.setdefault(key, {"segments": 0, "reserved": 0, "allocated": 0,
                                   "free": 0, "largest_free": 0})
        p["segments"] += 1
        p["reserved"] += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "inactive":
                p["free"] += b["size"]
                p["largest_free"] = max(p["largest_free"], b["size"])
            elif b["state"] == "active_allocated":
                p["allocated"] += b["size"]
    for p in pools.values():
        p["fragmentation"] = 1 - p["largest_free"] / p["free"] if p["free"] else 0.0
    return pools


def torch_state(torch):
    """memory_stats' headline figures and the snapshot's pools."""
    stats = torch.cuda.memory_stats()
    keep = {k: stats.get(k, 0) for k in (
        "allocated_bytes.all.current", "allocated_bytes.all.peak",
        "reserved_bytes.all.current", "reserved_bytes.all.peak",
        "active_bytes.all.current", "requested_bytes.all.current",
        "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
        "segment.all.current", "allocation.all.current")}
    keep["backend"] = torch.cuda.get_allocator_backend()
    if keep["backend"] != "native":
        return keep  # the cudaMallocAsync backend keeps no segments or blocks
    snap = torch.cuda.memory._snapshot()
    keep["pools"] = pools_from_snapshot(snap)
    keep["segments"] = [{"address": s["address"], "total_size": s["total_size"],
                         "segment_type": s["segment_type"], "stream": s["stream"],
                         "allocated_size": s["allocated_size"]} for s in snap["segments"]]
    return keep


def left_allocated(torch):
    """What PyTorch's allocator still hands out once the program has dropped
    every tensor it made: torch's own blocks, the cuBLAS and cuBLASLt
    workspaces it keeps per handle and stream for the process's life. Call
    it after deleting the program's objects; the trace must count exactly
    this as the library's at exit, and no tensor."""
    gc.collect()
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {"bytes": stats.get("allocated_bytes.all.current", 0),
            "blocks": stats.get("allocation.all.current", 0)}


def write(path, truth):
    with open(path, "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
    print(f"{sys.argv[0]}: truth written to {path}")
