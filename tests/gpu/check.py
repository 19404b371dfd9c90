#!/usr/bin/env python3
"""Checks a recorded trace against the expectations written in a test
program's header (`// expect: ...` lines) and prints what it found.

Ground truth is the program: its comments say what it allocated, freed,
leaked and failed, at which site (a function name that must appear in the
symbolized stack of the allocation). The trace is read through
`gmem-prof dump --json`, so this also checks the dump and the symbols.

usage: check.py GMEM_PROF TRACE PROGRAM.cu RECORD_EXIT_CODE
exit status: 0 if every expectation holds, 1 otherwise.
"""
import json
import re
import subprocess
import sys
from collections import defaultdict

KINDS = {1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
         6: "device_static", 7: "managed_static"}


def load(gmem, trace):
    out = subprocess.run([gmem, "dump", "--json", trace], check=True,
                         capture_output=True, text=True)
    streams = defaultdict(lambda: defaultdict(list))
    for line in out.stdout.splitlines():
        r = json.loads(line)
        streams[r["trace_stream"]][r["type"]].append(r)
    return streams, out.stderr


class Stream:
    def __init__(self, recs):
        self.recs = recs
        self.proc = (recs.get("Process") or [{}])[0]
        self.symbols = {s["address"]: s for s in recs.get("Symbol", [])}
        self.stacks = {s["id"]: s for s in recs.get("Stack", [])}
        self.strings = {s["id"]: s["text"] for s in recs.get("String", [])}
        self.api_by_corr = defaultdict(list)
        for a in recs.get("Api", []):
            self.api_by_corr[a["correlation"]].append(a)
        self.unjoined = 0

    def functions(self, stack_id):
        """Function names (all inlined levels) of a stack, innermost first."""
        names = []
        st = self.stacks.get(stack_id)
        if not st:
            return names
        for f in st["frames"]:
            addr = f.get("Native")
            sym = self.symbols.get(addr)
            if sym:
                names.extend(fr["function"] for fr in sym["frames"])
        return names

    def site_of_memory(self, m):
        """The allocating API call's stack for a MEMORY2 record."""
        calls = [a for a in self.api_by_corr.get(m["correlation"], [])
                 if not a["internal"]]
        if not calls:
            self.unjoined += 1
            return []
        return self.functions(calls[0]["stack"])

    def allocations(self):
        """Allocation records with their free (or None), in time order."""
        mem = sorted(self.recs.get("Memory", []), key=lambda m: m["time"])
        live = {}
        out = []
        for m in mem:
            if m["alloc"]:
                entry = {"m": m, "freed": False}
                live[m["address"]] = entry
                out.append(entry)
            else:
                e = live.pop(m["address"], None)
                if e is not None:
                    e["freed"] = True
        return out


def matches(site, functions):
    return any(re.search(r"\b" + re.escape(site) + r"\b", f) for f in functions)


def parse_expectations(path):
    exps = []
    for line in open(path):
        m = re.match(r"\s*//\s*expect:\s*(.*)", line)
        if not m:
            continue
        words = m.group(1).split()
        head = None if "=" in words[0] else words.pop(0)
        if head == "message":
            exps.append((head, {"text": " ".join(words)}, m.group(1).strip()))
            continue
        kv = dict(w.split("=", 1) for w in words)
        exps.append((head, kv, m.group(1).strip()))
    return exps


def check(gmem, trace, program, exit_code):
    streams, dump_err = load(gmem, trace)
    procs = [Stream(recs) for _, recs in sorted(streams.items())]
    ok = True
    results = []

    def verdict(text, want, got):
        nonlocal ok
        good = all(str(got.get(k)) == str(v) for k, v in want.items())
        ok &= good
        results.append(("PASS" if good else "FAIL") + f"  {text}   (observed: {got})")

    for head, kv, text in parse_expectations(program):
        if head is None and "exit" in kv:
            verdict(text, {"exit": kv["exit"]}, {"exit": exit_code})
        elif head is None and "processes" in kv:
            verdict(text, kv, {"processes": sum(1 for p in procs if p.proc)})
        elif head is None and "dropped" in kv:
            got = 0
            for p in procs:
                d = p.recs.get("Dropped", [])
                if d:
                    got += d[-1]["cupti"] + d[-1]["collector"]
            verdict(text, kv, {"dropped": got})
        elif head is None and "site" in kv:
            site = kv["site"]
            got = defaultdict(int)
            for p in procs:
                for e in p.allocations():
                    m = e["m"]
                    if kv.get("kind") and KINDS.get(m["kind"]) != kv["kind"]:
                        continue
                    if "device" in kv and m["device"] != int(kv["device"]):
                        continue
                    if not matches(site, p.site_of_memory(m)):
                        continue
                    got["allocs"] += 1
                    got["bytes"] += m["bytes"]
                    if e["freed"]:
                        got["freed"] += 1
                    else:
                        got["leaked"] += 1
                        got["leaked_bytes"] += m["bytes"]
            want = {k: v for k, v in kv.items() if k not in ("site", "kind", "device")}
            verdict(text, want, {k: got.get(k, 0) for k in want})
        elif head == "failed":
            got = defaultdict(int)
            for p in procs:
                for a in p.recs.get("Api", []):
                    if a["result"] == 0 or a["internal"] or a["func"] >= 20:
                        continue
                    if not matches(kv["site"], p.functions(a["stack"])):
                        continue
                    if "bytes" in kv and a["bytes"] != int(kv["bytes"]):
                        continue
                    got["count"] += 1
                    got["result"] = a["result"]
                    got["bytes"] = a["bytes"]
            want = {k: v for k, v in kv.items() if k != "site"}
            verdict(text, want, {k: got.get(k, 0) for k in want})
        elif head == "calldevice":
            # Failed allocations charged to their device (CallDevice records).
            n = sum(1 for p in procs for c in p.recs.get("CallDevice", [])
                    if c["device"] == int(kv["device"]))
            verdict(text, {"count": kv["count"]}, {"count": n})
        elif head == "kernels":
            # Runs on the device (`--kernels timed`) or launches (the
            # default), as the process traced them; threads = the sum of
            # grid x block over them, from each launch's own geometry.
            # streams = how many CUDA streams (CUPTI's ids) they went into.
            n = threads = 0
            streams = set()
            for p in procs:
                kind = "Kernel" if p.proc.get("kernels_timed", True) else "KernelLaunch"
                for k in p.recs.get(kind, []):
                    if kv["name"] in p.strings.get(k["name"], ""):
                        n += 1
                        g, b = k["grid"], k["block"]
                        threads += g[0] * g[1] * g[2] * b[0] * b[1] * b[2]
                        streams.add(k["stream"])
            want = {k: v for k, v in kv.items() if k != "name"}
            verdict(text, want, {"count": n, "threads": threads, "streams": len(streams)})
        elif head == "pool":
            ops = {"created": 1, "destroyed": 2, "trimmed": 3}
            n = sum(1 for p in procs for r in p.recs.get("Pool", [])
                    if r["op"] == ops[kv["op"]])
            verdict(text, {"count": kv["count"]}, {"count": n})
        elif head == "api":
            calls = [a for p in procs for a in p.recs.get("Api", [])
                     if a["func_name"] == kv["func"] and not a["internal"]
                     and a["result"] == 0]
            got = {"count": len(calls), "bytes": sum(a["bytes"] for a in calls)}
            want = {k: v for k, v in kv.items() if k != "func"}
            verdict(text, want, {k: got[k] for k in want})
        elif head == "message":
            texts = [m["text"] for p in procs for m in p.recs.get("Message", [])]
            found = any(kv["text"] in t for t in texts)
            verdict(text, {"found": True}, {"found": found})
        else:
            ok = False
            results.append(f"FAIL  unknown expectation: {text}")

    print(f"== {program} -> {trace}")
    for p in procs:
        counts = {k: len(v) for k, v in sorted(p.recs.items())}
        kinds = defaultdict(int)
        for m in p.recs.get("Memory", []):
            if m["alloc"]:
                kinds[KINDS.get(m["kind"], str(m["kind"]))] += 1
        resolved = sum(1 for s in p.symbols.values() if s["frames"])
        p.allocations()
        for m in p.recs.get("Memory", []):
            if m["alloc"]:
                p.site_of_memory(m)
        print(f"   pid {p.proc.get('pid')} {' '.join(p.proc.get('cmdline', []))[:80]}")
        print(f"     records {counts}")
        print(f"     allocations by kind {dict(kinds)}; memory allocs without an API call: {p.unjoined}")
        print(f"     symbols resolved {resolved}/{len(p.symbols)}")
        for m in p.recs.get("Message", []):
            print(f"     message: {m['text']}")
    for line in dump_err.splitlines():
        print(f"   dump: {line}")
    for r in results:
        print("   " + r)
    return ok


if __name__ == "__main__":
    gmem, trace, program, code = sys.argv[1:5]
    sys.exit(0 if check(gmem, trace, program, int(code)) else 1)
