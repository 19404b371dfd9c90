"""Checks the report of torch_steps.py against PyTorch's own figures:

    python3 steps_check.py ANALYSIS.json TRUTH.json [FIRST-LAST]

Each step's tensors kept = memory_allocated at its end minus at the step
before's (step 1: since the process started, from nothing); its allocated
peak = max_memory_allocated since the step before; steps 2 on keep all of
it at the `kept` line (the 3 MiB tensor's block: 3 MiB, or 4 MiB where the
allocator served it from a free 4 MiB block it does not split, as
memory_allocated counts it too); step 1 names the optimizer's state (the
momentum buffers, the parameters' size) at the `step` line. With
FIRST-LAST the analysis is of a window recorded with `record --steps
FIRST-LAST`: it holds those steps alone, each with the same truth, and the
tensors live when it opened are memory_allocated at step FIRST-1's end.
Prints each figure beside its truth; exits 1 on a mismatch."""
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
first, last = 1, t["steps"]
if len(sys.argv) > 3:
    first, last = (int(n) for n in sys.argv[3].split("-"))
    w = a["processes"][0].get("window") or {}
    opened = t["allocated"][first - 2] if first > 1 else 0
    say(w.get("tensors_at_open_bytes") == opened,
        f"window {w.get('what')!r}: tensors live at its opening {w.get('tensors_at_open_bytes')} == {opened}")
say(p["count"] == last - first + 1, f"steps {p['count']} == {last - first + 1} (the second optimizer adds none)")
say([s["number"] for s in p["steps"]] == list(range(first, last + 1)),
    f"steps {first} to {last}: {[s['number'] for s in p['steps']]}")
say(p["marked_by"] == "optimizer", f"marked by {p['marked_by']}")
before = t["allocated"][first - 2] if first > 1 else 0
for s, allocated, peak in zip(p["steps"], t["allocated"][first - 1:], t["peaks"][first - 1:]):
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
