"""Checks the report of torch_ranges.py against PyTorch's own figures:

    python3 ranges_check.py ANALYSIS.json TRUTH.json [STEPS.json]

For "forward", "backward" and "optimizer": the tensors' rise (the most an
instance went above what was allocated when it began) == PyTorch's
max(max_memory_allocated - memory_allocated at the start) over the
instances, and the median instance's kept bytes == the median of
memory_allocated at the end minus at the start; "optimizer" names the
`kept` line; every range has STEPS instances. STEPS.json, the analysis
with --step-range iteration: STEPS steps, each keeping what PyTorch says
an iteration kept. The phases the bootstrap marks (domain "PyTorch"):
"backward" and "optimizer step" have STEPS instances, "forward" one fewer
(the first iteration's, before any step, is not marked), each with the
median kept bytes, and the first two the rise, of PyTorch's figures around
them. Prints each figure beside its truth; exits 1 on a mismatch."""
import json
import sys

a = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
bad = 0


def say(ok, what):
    global bad
    bad += not ok
    print(("ok   " if ok else "FAIL ") + what)


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


ranges = a.get("ranges", [])
say(len(ranges) == 1, f"one process with ranges: {len(ranges)}")
# NVTX's default domain, and the phases' ("PyTorch:backward").
by_name = {(f"{r['domain']}:" if r["domain"] else "") + r["name"]: r for r in ranges[0]["ranges"]}


def check(name, truth, instances, rise=True):
    r = by_name.get(name)
    say(r is not None and r["instances"] == instances,
        f"{name}: {r and r['instances']} instances == {instances}")
    if r is None:
        return
    tensors = r.get("tensors") or {}
    kept = median([i["end"] - i["start"] for i in truth])
    say(tensors.get("kept_median") == kept, f"{name}: median kept {tensors.get('kept_median')} == {kept}")
    if rise:
        most = max(i["peak"] - i["start"] for i in truth)
        say(tensors.get("rise_bytes") == most, f"{name}: rise {tensors.get('rise_bytes')} == {most}")


for name in ("forward", "backward", "optimizer", "iteration"):
    check(name, t["ranges"][name], t["steps"], rise=name != "iteration")
if "phases" in t:
    for name, truth in t["phases"].items():
        n = t["steps"] - 1 if name == "forward" else t["steps"]
        check(f"PyTorch:{name}", truth, n, rise=name != "forward")
opt = by_name.get("optimizer", {}).get("tensors", {}).get("kept_by_site", [])
labels = [a["tensor_sites"][k["site"]]["label"] for k in opt]
say(any(f"torch_ranges.py:{t['lines']['kept']}" in l for l in labels),
    f"optimizer's kept sites name line {t['lines']['kept']}: {labels}")
if len(sys.argv) > 3:
    s = json.load(open(sys.argv[3]))["steps"][0]
    say(s["count"] == t["steps"] and s["marked_by"] == "NVTX range",
        f"--step-range iteration: {s['count']} steps marked by {s['marked_by']}")
    its = t["ranges"]["iteration"]
    for n, (step, truth) in enumerate(zip(s["steps"][1:], its[1:]), 2):
        # Step n runs from iteration n-1's end to iteration n's: what it
        # kept is the allocated bytes at the two ends.
        want = truth["end"] - its[n - 2]["end"]
        got = (step.get("tensors") or {}).get("kept_bytes")
        say(got == want, f"step {n}: tensors kept {got} == {want}")
print(f"{t['pair_ns']:.1f} ns per push+pop pair in the program")
sys.exit(1 if bad else 0)
