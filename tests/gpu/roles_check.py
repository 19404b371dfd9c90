"""Compares gmem-prof's roles at the allocated peak (`export --format json`
of a recorded run of torch_roles.py) with torch.profiler's memory timeline
categories at its peak (the same program run with --profile), and with the
program's own parameter and optimizer-state bytes.

    python3 roles_check.py ANALYSIS.json RECORDED.json PROFILED.json

Prints one table per program; exits 1 when a role's figure and the
profiler's differ by more than 5% of the peak (each such difference is then
explained in docs/design.md, "Roles")."""

import json
import sys

OURS_TO_PROFILER = {
    "parameters": "parameter",
    "optimizer state": "optimizer_state",
    "inputs": "input",
    "temporaries": "temporary",
    "activations": "activation",
    "gradients": "gradient",
    "unknown": "none",
}


def mib(b):
    return f"{b / 2**20:10.1f}"


a = json.load(open(sys.argv[1]))
recorded = json.load(open(sys.argv[2]))
profiled = json.load(open(sys.argv[3]))
view = max(a["frameworks"], key=lambda v: v["allocated_peak"])
ours = view["roles_at_peak"]["roles"]
theirs = profiled["profiler"]["categories"]
peak = view["allocated_peak"]
print(f"{recorded['program']}: allocated peak {mib(peak)} MiB (program's max_memory_allocated "
      f"{mib(recorded['max_memory_allocated'])}), profiler's peak {mib(profiled['profiler']['peak_bytes'])} MiB")
print(f"    {'role':<20} {'gmem-prof':>10} {'profiler':>10}   (MiB)")
rows = sorted(set(ours) | {k for k, v in OURS_TO_PROFILER.items() if v in theirs})
over = []
for role in rows:
    mine = ours.get(role, 0)
    other = theirs.get(OURS_TO_PROFILER.get(role, ""), 0)
    flag = ""
    if role in OURS_TO_PROFILER and abs(mine - other) > 0.05 * peak:
        flag = "  <- over 5% of the peak"
        over.append(role)
    print(f"    {role:<20} {mib(mine)} {mib(other)}{flag}")
for cat, b in theirs.items():
    if cat not in OURS_TO_PROFILER.values():
        print(f"    {'(profiler) ' + cat:<20} {'':>10} {mib(b)}")
# The program's own count is of its tensors' storage; ours and the
# profiler's of the allocator's blocks (rounded to 512 bytes, and a block
# the allocator does not split keeps its remainder): within 1% of it.
own = [("parameters", "parameters"), ("optimizer state", "optimizer_state")]
for role, key in own:
    mine, theirs_own = ours.get(role, 0), recorded[key]
    ok = abs(mine - theirs_own) <= 0.01 * max(theirs_own, 1)
    print(f"    {'ok  ' if ok else 'FAIL'} {role} {mine} within 1% of the program's own {theirs_own}")
    if not ok and theirs_own:
        over.append(role + " (program)")
sys.exit(1 if over else 0)
