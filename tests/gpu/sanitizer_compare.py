#!/usr/bin/env python3
"""Compares compute-sanitizer's leak report with gmem-prof's leaks of the
same program (issue 36, item 3): one run under
`compute-sanitizer --leak-check full`, and the program's traces recorded
through each CUPTI. The sanitizer reports leaks of device, pinned host
(cudaHostAlloc, cudaMallocHost) and managed memory, so the comparison is of
our leaks of those kinds: how many, how many bytes (its LEAK SUMMARY line,
which counts the leaks it did not print too), and, for each leak it printed,
a leaked site of ours whose label names a function of its host backtrace.

usage: sanitizer_compare.py GMEM_PROF SANITIZER_LOG TAG=TRACE...
Prints one row per trace; exit status 1 if any row differs.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

SANITIZER_KINDS = {"device", "pinned host", "managed"}
SUMMARY = re.compile(r"LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations")
LEAK = re.compile(r"Leaked ([\d,]+) bytes at (0x[0-9a-f]+)")
FRAME = re.compile(r"Host Frame:\s*(?:0x[0-9a-f]+\s+in\s+)?([^\s(\[]+)")


def sanitizer_leaks(path):
    """(count, bytes) of its LEAK SUMMARY (0, 0 without one), and
    (bytes, host function names) per leak the sanitizer printed."""
    leaks, total = [], (0, 0)
    for line in open(path, errors="replace"):
        s = SUMMARY.search(line)
        if s:
            total = (int(s.group(2)), int(s.group(1)))
            continue
        m = LEAK.search(line)
        if m:
            leaks.append((int(m.group(1).replace(",", "")), []))
            continue
        f = FRAME.search(line)
        if f and leaks:
            leaks[-1][1].append(f.group(1))
    return total, leaks


def our_leaks(gmem, trace):
    """(label, count, bytes) of each site of a kind the sanitizer tracks that
    leaked, from `report`."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([gmem, "report", "-q", "-o", out, trace], check=True)
        name = os.path.splitext(os.path.basename(trace))[0]
        d = json.load(open(os.path.join(out, name + ".json")))
    return [(s["label"], s["leaked_count"], s["leaked_bytes"]) for s in d["sites"]
            if SANITIZER_KINDS & set(s["kinds"]) and s["leaked_count"]]


def main():
    gmem, log = sys.argv[1:3]
    (t_count, t_bytes), theirs = sanitizer_leaks(log)
    bad = 0
    print(f"{'cupti':<12} {'sanitizer':>18} {'gmem-prof':>18}  sites")
    for arg in sys.argv[3:]:
        tag, trace = arg.split("=", 1)
        ours = our_leaks(gmem, trace)
        o_count, o_bytes = sum(c for _, c, _ in ours), sum(b for _, _, b in ours)
        # Every sanitizer leak must fall on a leaked site of ours whose label
        # names one of its host frames' functions.
        unmatched = [b for b, frames in theirs
                     if not any(any(fn in label for fn in frames if len(fn) > 3)
                                for label, _, _ in ours)]
        same = (o_count, o_bytes) == (t_count, t_bytes) and not unmatched
        bad |= not same
        sites = "; ".join(f"{label} {c}x" for label, c, _ in ours)
        print(f"{tag:<12} {t_count:>6} {t_bytes:>11} {o_count:>6} {o_bytes:>11}  "
              f"{'same' if same else 'DIFFERENT'}: {sites}"
              + (f" (sanitizer leaks on no site of ours: {len(unmatched)})" if unmatched else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
