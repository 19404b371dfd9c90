"""Checks the report of torch_steps.py against PyTorch's own figures:

    python3 steps_check.py ANALYSIS.json TRUTH.json

Each step's tensors kept = memory_allocated at its end minus at the step
before's (step 1: since the process started, from nothing); its allocated
peak = max_memory_allocated since the step before; steps 2 on keep all of
it at the `kept` line (the 3 MiB tensor's block: 3 MiB, or 4 MiB where the
allocator served it from a free 4 MiB block it does not split, as
memory_allocated counts it too); step 1 names the optimizer's state (the
momentum buffers, the parameters' size) at the `step` line. Prints each figure beside its truth; exits 1 on a mismatch."""
import json
import sys

a = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2]))
lines = t["lines"]
bad = 0


def say(ok, what):
    global bad
    bad += not ok
    print(("ok   " if ok else "FAIL ") + what)


def line_of(site):
    label = a["tensor_sites"][site]["label"]
    return int(label.rsplit("torch_steps.py:", 1)[1]) if "torch_steps.py:" in label else None


steps = a.get("steps", [])
say(len(steps) == 1, f"one process with steps: {len(steps)}")
p = steps[0]
say(p["count"] == t["steps"], f"steps {p['count']} == {t['steps']} (the second optimizer adds none)")
say(p["marked_by"] == "optimizer", f"marked by {p['marked_by']}")
before = 0
for s, allocated, peak in zip(p["steps"], t["allocated"], t["peaks"]):
    n = s["number"]
    tensors = s.get("tensors") or {}
    kept = tensors.get("kept_bytes")
    say(kept == allocated - before, f"step {n}: tensors kept {kept} == {allocated - before}")
    say(tensors.get("allocated_peak") == peak, f"step {n}: allocated peak {tensors.get('allocated_peak')} == {peak}")
    by_line = [(line_of(k["site"]), k["bytes"]) for k in tensors.get("kept_by_site", [])]
    if n == 1:
        say((lines["step"], t["params"]) in by_line,
            f"step 1 names the optimizer's state ({t['params']} B) at line {lines['step']}: {by_line}")
    else:
        block = allocated - before
        say(block in (3 << 20, 4 << 20) and by_line == [(lines["kept"], block)],
            f"step {n} keeps its tensor's {block} B block at line {lines['kept']}: {by_line}")
    before = allocated
sys.exit(1 if bad else 0)
