"""Checks what gmem-prof says about a recorded program against what the
program (and PyTorch itself) said in the same run: the truth file each
program of tests/gpu writes (truth.py).

usage: framework_check.py GMEM_PROF NAME TRACE TRUTH_JSON
NAME picks the checks (the program's name in run.sh). Prints one line per
check; exits 1 if any fails.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

failures = 0


def check(ok, what):
    global failures
    print(f"    {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures += 1


def analysis(gmem, trace):
    """The trace's analysis, exported into a scratch folder: nothing is left
    beside the trace (which may be a shipped sample)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "analysis.json")
        subprocess.run([gmem, "export", trace, "--format", "json", "-o", out, "-q"],
                       check=True)
        with open(out) as f:
            return json.load(f)


def label_has(label, file, line):
    return f"{os.path.basename(file)}:{line}" in label


def tensor_site(a, file, line):
    return [s for s in a.get("tensor_sites", []) if label_has(s["label"], file, line)]


def driver_site(a, file, line):
    return [s for s in a["sites"] if label_has(s["label"], file, line)]


def python_frames(site):
    return [f for f in site["frames"] if f.get("python")]


def view(a, pid=None):
    views = [v for v in a.get("frameworks", []) if pid is None or v["pid"] == pid]
    return views[0] if views else None


def peaks_equal_torch(v, torch):
    """A view's allocated and reserved peaks against torch's memory_stats."""
    check(v["allocated_peak"] == torch["allocated_bytes.all.peak"],
          f"allocated peak {v['allocated_peak']} = torch's max_memory_allocated {torch['allocated_bytes.all.peak']}")
    check(v["reserved_peak"] == torch["reserved_bytes.all.peak"],
          f"reserved peak {v['reserved_peak']} = torch's max_memory_reserved {torch['reserved_bytes.all.peak']}")


def torch_leak(a, t):
    v = view(a)
    check(v is not None, "PyTorch's allocator seen from the inside")
    if v is None:
        return
    peaks_equal_torch(v, t["torch"])
    seg = v["segments"]
    check(seg["reported"] > 0 and seg["matched"] == seg["reported"],
          f"every segment matches a driver allocation ({seg['matched']} of {seg['reported']})")
    leak = tensor_site(a, t["file"], t["lines"]["leak"])
    check(len(leak) == 1, f"one tensor site at the leak's line {t['lines']['leak']}")
    if leak:
        s = leak[0]
        check(s["count"] == t["kept"], f"{s['count']} tensors from that line = {t['kept']} kept")
        check(abs(s["total_bytes"] - t["kept_bytes"]) <= t["tensor_bytes"],
              f"{s['total_bytes']} bytes from that line, within one tensor of {t['kept_bytes']}")
        growing = [g for g in a.get("tensor_growth", []) if g["site"] == s["id"]]
        check(bool(growing) and a["tensor_growth"][0]["site"] == s["id"],
              "the leak's line is the tensor site that grows most")
        frames = python_frames(s)
        check(bool(frames) and label_has(frames[0]["location"], t["file"], t["lines"]["leak"]),
              "its innermost Python frame is the leak's line")


def torch_leak_async(a, t):
    procs = a["processes"]
    check(procs and procs[0]["allocator_view"] == "tensors", "the allocator view is per tensor")
    v = view(a)
    check(v is not None and v["reserved_in"] == "CUDA pool",
          "the cudaMallocAsync backend's view (tensors = stream-ordered allocations, reserved = its pool)")
    if v is not None:
        peaks_equal_torch(v, t["torch"])
        tensors = tensor_site(a, t["file"], t["lines"]["leak"])
        check(len(tensors) == 1 and tensors[0]["count"] == t["kept"],
              f"one tensor site at the leak's line with {t['kept']} tensors")
        if tensors:
            check(bool(a.get("tensor_growth")) and a["tensor_growth"][0]["site"] == tensors[0]["id"],
                  "the leak's line is the tensor site that grows most")
    leak = driver_site(a, t["file"], t["lines"]["leak"])
    check(len(leak) == 1, f"one CUDA allocation site at the leak's line {t['lines']['leak']}")
    if leak:
        check(leak[0]["count"] == t["kept"], f"{leak[0]['count']} allocations from it = {t['kept']} kept")
        # Growth is said once per line: as tensors (above), not again as
        # the CUDA site each tensor is under this backend.
        check(not any(g["site"] == leak[0]["id"] for g in a["growth"]),
              "its growth is said once, as tensors, not again as a CUDA site")


def torch_leak_uncached(a, t, gmem, trace):
    """PYTORCH_NO_CUDA_MEMORY_CACHING=1: each tensor a cudaMalloc of its own;
    no view from the inside, and tensor budgets refused."""
    check(view(a) is None, "no view inside the allocator (it reports nothing)")
    procs = a["processes"]
    why = procs[0].get("allocator_not_attached", "") if procs else ""
    check("PYTORCH_NO_CUDA_MEMORY_CACHING" in why, f"the reason is said: {why[:80]}")
    leak = driver_site(a, t["file"], t["lines"]["leak"])
    check(len(leak) == 1, f"one CUDA allocation site at the leak's line {t['lines']['leak']}")
    if leak:
        check(leak[0]["count"] >= t["kept"], f"{leak[0]['count']} allocations from it, at least the {t['kept']} kept")
        # Growth is said once per line: as tensors (above), not again as
        # the CUDA site each tensor is under this backend.
        check(not any(g["site"] == leak[0]["id"] for g in a["growth"]),
              "its growth is said once, as tensors, not again as a CUDA site")
    code = subprocess.run([gmem, "check", trace, "--max-allocated", "1TiB"],
                          capture_output=True).returncode
    check(code == 2, f"check --max-allocated is not judged (exit {code}, expect 2)")
    code = subprocess.run([gmem, "check", trace, "--max-peak", "1TiB"],
                          capture_output=True).returncode
    check(code == 0, f"check --max-peak is judged (exit {code}, expect 0)")


def torch_fragment(a, t):
    v = view(a)
    check(v is not None, "PyTorch's allocator seen from the inside")
    if v is None:
        return
    snaps = v.get("snapshots", [])
    check(len(snaps) >= 1, f"the program's memory snapshots seen ({len(snaps)})")
    if snaps:
        ours = {p["pool"]: p for p in snaps[0]["pools"]}
        for key, truth in t["fragmented"]["pools"].items():
            device, stream, kind = key.split("/")
            name = f"{kind} blocks, stream {int(stream):#x}"
            p = ours.get(name)
            check(p is not None, f"pool {name} at the snapshot")
            if p is None:
                continue
            check(p["free_bytes"] == truth["free"], f"{name}: free {p['free_bytes']} = torch's {truth['free']}")
            check(p["largest_free_bytes"] == truth["largest_free"],
                  f"{name}: largest free block {p['largest_free_bytes']} = torch's {truth['largest_free']}")
            check(abs(p["fragmentation"] - truth["fragmentation"]) <= 0.01,
                  f"{name}: F {p['fragmentation']:.4f} within 0.01 of torch's {truth['fragmentation']:.4f}")
    last_reserved = v["reserved"][-1]["last"] if v["reserved"] else -1
    check(last_reserved == t["reserved_after_empty_cache"],
          f"reserved after empty_cache {last_reserved} = torch's {t['reserved_after_empty_cache']}")
    check(v["segments_freed"] == v["segments_allocated"] > 0,
          f"empty_cache gave back every segment ({v['segments_freed']} of {v['segments_allocated']})")
    mixed = tensor_site(a, t["file"], t["lines"]["mixed"])
    check(len(mixed) == 1 and mixed[0]["count"] == 60, "60 tensors from the allocation line")


def torch_fraction_oom(a, t):
    v = view(a)
    check(v is not None and len(v["ooms"]) == 1, "one out-of-memory error raised by the allocator")
    if v is None or not v["ooms"]:
        return
    o = v["ooms"][0]
    check(o["requested_bytes"] == t["request"], f"request {o['requested_bytes']} = {t['request']}")
    check(o["limit"] == "memory fraction", f"refused by the memory fraction ({o['limit']})")
    check(o["limit_bytes"] == t["limit"], f"limit {o['limit_bytes']} = fraction × total {t['limit']}")
    check(o["allocated_bytes"] == t["torch"]["allocated_bytes.all.current"],
          f"allocated then {o['allocated_bytes']} = torch's {t['torch']['allocated_bytes.all.current']}")
    site = a["tensor_sites"][o["site"]] if o["site"] is not None else None
    check(site is not None and label_has(site["label"], t["file"], t["lines"]["oom"]),
          f"the request's line is {t['lines']['oom']} ({site and site['label']})")
    check(a["ooms"] == [] or all(x.get("raised_as") for x in a["ooms"]),
          "no CUDA allocation failed on its own (the fraction refused first)")


def torch_fraction_oom_async(a, t):
    """The same program under the cudaMallocAsync backend, which refuses
    the tensor before any CUDA allocation: the request is not seen, only the
    least it could have been."""
    check("would exceed allowed memory" in t["message"], "torch's message is the backend's")
    v = view(a)
    check(v is not None and len(v["ooms"]) == 1, "one out-of-memory error raised by the backend")
    if v is None or not v["ooms"]:
        return
    o = v["ooms"][0]
    check(o["cuda_malloc_async"] and not o["request_seen"], "the backend's error, its request not seen")
    check(o["limit"] == "memory fraction", f"refused by the memory fraction ({o['limit']})")
    check(o["limit_bytes"] == t["limit"], f"limit {o['limit_bytes']} = fraction × total {t['limit']}")
    check(o["allocated_bytes"] == t["torch"]["allocated_bytes.all.current"],
          f"allocated then {o['allocated_bytes']} = torch's {t['torch']['allocated_bytes.all.current']}")
    least = o["limit_bytes"] - o["allocated_bytes"] + 1
    check(o["requested_bytes"] == least <= t["request"],
          f"request at least {o['requested_bytes']} (limit − allocated + 1 = {least}; it was {t['request']})")
    site = a["tensor_sites"][o["site"]] if o["site"] is not None else None
    check(site is not None and label_has(site["label"], t["file"], t["lines"]["oom"]),
          f"the request's line is {t['lines']['oom']} ({site and site['label']})")
    check(a["ooms"] == [] or all(x.get("raised_as") for x in a["ooms"]),
          "no CUDA allocation failed on its own (the fraction refused first)")
    kinds = [r["kind"] for r in a.get("remedies", [])]
    check("memory_fraction" in kinds, f"the fraction remedy ({kinds})")


def torch_oom(a, t):
    v = view(a)
    check(v is not None and len(v["ooms"]) == t["num_ooms"],
          f"{t['num_ooms']} error raised by the allocator, as torch's num_ooms")
    outcomes = sorted(o["outcome"] for o in a["ooms"])
    check(outcomes == ["reached program", "recovered", "retried"], f"driver failures: {outcomes}")
    raised = [o for o in a["ooms"] if o.get("raised_as")]
    check(len(raised) == 1 and raised[0]["outcome"] == "reached program",
          "the failure that reached the program is the allocator's error")
    if v and v["ooms"]:
        o = v["ooms"][0]
        check(o["limit"] == "device full", f"refused by the device ({o['limit']})")


def torch_spawn(a, t_path):
    truths = []
    for p in sorted(glob.glob(t_path + ".*")):
        with open(p) as f:
            truths.append(json.load(f))
    check(len(a["processes"]) == 6, f"six processes ({len(a['processes'])})")
    check(all(p["clean_exit"] for p in a["processes"]),
          "every process ended cleanly (the fork workers end with os._exit)")
    check(len(truths) == 4, "four workers (two spawned, two forked) wrote their truth")
    for t in truths:
        v = view(a, t["pid"])
        check(v is not None, f"worker pid {t['pid']}: its allocator seen from the inside")
        if v is None:
            continue
        check(v["allocated_peak"] == t["max_allocated"],
              f"worker {t['pid']}: allocated peak {v['allocated_peak']} = torch's {t['max_allocated']}")
        sites = [a["tensor_sites"][s["site"]] for s in v["peak_sites"]]
        line = t["lines"][t.get("marker", "worker")]
        check(any(label_has(s["label"], t["file"], line) for s in sites),
              f"worker {t['pid']}: its peak names line {line}")


def ctypes_cuda(a, t):
    sites = driver_site(a, t["file"], t["lines"]["malloc"])
    check(len(sites) == 1, f"one site named by the cudaMalloc line {t['lines']['malloc']}")
    if not sites:
        return
    s = sites[0]
    check(s["count"] == 2 and s["total_bytes"] == t["freed_bytes"] + t["leaked_bytes"],
          f"2 allocations, {s['total_bytes']} bytes")
    check(s["leaked_bytes"] == t["leaked_bytes"], f"leaked {s['leaked_bytes']} = {t['leaked_bytes']}")
    frames = s["frames"]
    py = [i for i, f in enumerate(frames) if f.get("python")]
    check(len(py) >= 3, f"Python frames in the stack ({len(py)})")
    if py:
        locs = [frames[i]["location"] for i in py]
        check(label_has(locs[0], t["file"], t["lines"]["malloc"]), f"innermost Python frame {locs[0]}")
        check(any(label_has(x, t["file"], t["lines"]["scratch"]) or label_has(x, t["file"], t["lines"]["kept"])
                  for x in locs), "its caller's line (Workspace.__init__)")
        check(py[0] > 0 and not frames[0].get("python"), "native frames (CUDA, ctypes) inside the Python ones")
        check(not any("_PyEval_EvalFrameDefault" in f["function"] for f in frames),
              "the interpreter's own frames are folded away")


def cupy(a, t):
    for name in ("pooled", "unpooled"):
        sites = driver_site(a, t["file"], t["lines"][name])
        check(len(sites) >= 1, f"a CUDA allocation site named by cupy_arrays.py:{t['lines'][name]} ({name})")


def our_pool_name(pool_id, stream, kind):
    """The name the report gives a private pool (framework_view.rs)."""
    graph, user = pool_id
    owner = f"MemPool {user}" if user else f"CUDA graph pool {graph}"
    return f"{owner} ({kind} blocks), stream {int(stream):#x}"


def torch_private_pools(a, t):
    v = view(a)
    check(v is not None, "PyTorch's allocator seen from the inside")
    if v is None:
        return
    check(t["mempool_id"] != t["graph_pool_id"], f"torch's ids: MemPool {t['mempool_id']}, graph {t['graph_pool_id']}")
    snaps = v.get("snapshots", [])
    check(len(snaps) >= 2, f"the program's two snapshots seen ({len(snaps)})")
    for i, (step, want) in enumerate((("after_mempool", t["mempool_id"]), ("after_graph", t["graph_pool_id"]))):
        if len(snaps) <= i:
            break
        ours = {p["pool"]: p for p in snaps[i]["pools"]}
        truths = {k: p for k, p in t[step].items() if [int(x) for x in k.split("/")[0].split(",")] == want}
        check(bool(truths), f"{step}: torch's snapshot has the pool {want}")
        for key, truth in truths.items():
            ids, stream, kind = key.split("/")
            name = our_pool_name([int(x) for x in ids.split(",")], stream, kind)
            p = ours.get(name)
            check(p is not None, f"{step}: pool {name} at the snapshot (ours: {sorted(ours)})")
            if p is None:
                continue
            check(p["reserved_bytes"] == truth["reserved"], f"{name}: reserved {p['reserved_bytes']} = torch's {truth['reserved']}")
            check(p["free_bytes"] == truth["free"], f"{name}: free {p['free_bytes']} = torch's {truth['free']}")
            check(p["largest_free_bytes"] == truth["largest_free"],
                  f"{name}: largest free block {p['largest_free_bytes']} = torch's {truth['largest_free']}")
    named = {p["pool"] for p in v["pools"]}
    check(any(n.startswith(f"MemPool {t['mempool_id'][1]} ") for n in named), f"the MemPool is a pool of its own ({sorted(named)})")
    check(any(n.startswith(f"CUDA graph pool {t['graph_pool_id'][0]} ") for n in named), "the graph's pool is a pool of its own")
    seg = v["segments"]
    check(seg["reported"] > 0 and seg["matched"] == seg["reported"],
          f"every segment matches a driver allocation ({seg['matched']} of {seg['reported']})")
    peaks_equal_torch(v, t["torch"])
    sites = tensor_site(a, t["file"], t["lines"]["mempool"])
    check(len(sites) == 1 and sites[0]["count"] == 8, "8 tensors from the MemPool's line")
    graph = tensor_site(a, t["file"], t["lines"]["graph"])
    check(bool(graph), "tensors from the captured line")
    workspaces_at_exit(a, t)


def workspaces_at_exit(a, t):
    """The blocks torch still held once the program had dropped its objects
    (truth.left_allocated: cuBLAS's workspaces) are the library's at exit,
    and no tensor is left live."""
    want = t["left_allocated"]
    e = a["frameworks"][0]["at_exit"]
    check(e["library_bytes"] == want["bytes"] and e["library_tensors"] == want["blocks"],
          f"library workspaces at exit: {e['library_tensors']} blocks, {e['library_bytes']} bytes"
          f" = torch's {want['blocks']}, {want['bytes']}")
    check(e["live_tensor_bytes"] == 0, f"no tensor live at exit ({e['live_tensor_bytes']} bytes)")


def torch_activations(a, t):
    workspaces_at_exit(a, t)


CHECKS = {
    "torch_leak": torch_leak,
    "torch_leak_expandable": torch_leak,
    "torch_leak_async": torch_leak_async,
    "torch_fragment": torch_fragment,
    "torch_fraction_oom": torch_fraction_oom,
    "torch_fraction_oom_async": torch_fraction_oom_async,
    "torch_oom": torch_oom,
    "ctypes_cuda": ctypes_cuda,
    "cupy": cupy,
    "torch_private_pools": torch_private_pools,
    "torch_activations": torch_activations,
}


def main():
    gmem, name, trace, truth_path = sys.argv[1:5]
    a = analysis(gmem, trace)
    if name == "torch_spawn":
        torch_spawn(a, truth_path)
    elif name == "torch_leak_uncached":
        with open(truth_path) as f:
            torch_leak_uncached(a, json.load(f), gmem, trace)
    elif name in CHECKS:
        with open(truth_path) as f:
            CHECKS[name](a, json.load(f))
    else:
        print(f"    no checks for {name}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
