#!/usr/bin/env python3
"""After SIGKILL: every allocation killed.cu logged more than one second
before the kill must be in the trace (matched by address).
usage: check_killed.py GMEM_PROF TRACE LOG KILL_NS
"""
import sys

from check import load


def main():
    gmem, trace, log, kill_ns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    streams, err = load(gmem, trace)
    addrs = {m["address"] for s in streams.values() for m in s.get("Memory", []) if m["alloc"]}
    logged = []
    for line in open(log):
        parts = line.split()
        if len(parts) == 3:
            logged.append((int(parts[1]), int(parts[2], 16)))
    old = [a for t, a in logged if t < kill_ns - 1_000_000_000]
    missing = [a for a in old if a not in addrs]
    recent = [a for t, a in logged if t >= kill_ns - 1_000_000_000]
    recent_in = sum(1 for a in recent if a in addrs)
    ok = len(old) > 0 and not missing
    print(f"== killed: {len(logged)} allocations logged, {len(old)} older than 1 s before the kill, "
          f"{len(missing)} of those missing; {recent_in}/{len(recent)} of the last second present")
    for line in err.splitlines():
        print(f"   dump: {line}")
    print(f"   {'PASS' if ok else 'FAIL'}  every allocation older than 1 s before SIGKILL is in the trace")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
