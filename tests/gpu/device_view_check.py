"""Checks a device_view.py trace against the nvidia-smi figures the program
read in the same run: argv = gmem-prof, trace, truth.json."""
import json
import subprocess
import sys
import tempfile

gmem, trace, truth_path = sys.argv[1:4]
truth = json.load(open(truth_path))
MIB = 1 << 20
with tempfile.TemporaryDirectory() as d:
    subprocess.run([gmem, "export", "-q", "--format", "json", "-o", f"{d}/a.json", trace], check=True)
    a = json.load(open(f"{d}/a.json"))
    dump = subprocess.run([gmem, "dump", "--json", trace], capture_output=True, text=True, check=True).stdout
samples = [r for r in map(json.loads, dump.splitlines()) if r["type"] == "DeviceMemory"]
failed = 0


def check(what, ok, detail):
    global failed
    print(f"    {'ok' if ok else 'FAIL'}: {what}: {detail}")
    failed += not ok


view = a["devices"][0].get("device_view")
check("the trace has a device view", view is not None, f"{len(samples)} samples")
if view:
    h = view["highest"]
    check("total = nvidia-smi's", abs(h["total_bytes"] // MIB - truth["gpu_total_mib"]) <= 1,
          f"{h['total_bytes'] // MIB} MiB vs {truth['gpu_total_mib']} MiB")
    # The device's used figure moves with other work on the machine: within 64 MiB.
    check("the driver's reserve is reported apart", h["driver_reserved_bytes"] > 0, h["driver_reserved_bytes"])
    used = [s["used"] // MIB for s in samples]
    check("some sample's used ≈ nvidia-smi's while held",
          any(abs(u - truth["gpu_used_mib"]) <= 64 for u in used),
          f"nvidia-smi {truth['gpu_used_mib']} MiB; samples {sorted(set(used))[-5:]}")
    mine = truth["apps"].get(str(truth["pid"]))
    ours = [p["used"] // MIB for s in samples for p in s["processes"] if p["pid"] == truth["pid"]]
    if mine is None:
        check("nvidia-smi lists no process of ours (container): the report says so",
              h["run_processes_bytes"] is None, f"apps {truth['apps']}")
    else:
        check("this process's share = nvidia-smi's per-process figure",
              mine in ours, f"nvidia-smi {mine} MiB; samples {sorted(set(ours))}")
        check("tracked ≥ the 1 GiB tensor's segment", h["tracked_bytes"] >= 1 << 30, h["tracked_bytes"])
        check("context and untracked = share − tracked",
              h["context_and_untracked_bytes"] == h["run_processes_bytes"] - h["tracked_bytes"],
              f"{h['context_and_untracked_bytes'] // MIB} MiB")
    print("    highest: " + json.dumps(h))
sys.exit(1 if failed else 0)
