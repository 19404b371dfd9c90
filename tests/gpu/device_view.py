"""Holds 1 GiB in a PyTorch tensor and reads nvidia-smi while it is held:
the trace's device view (NVML samples the collector took) must agree with
what nvidia-smi said in the same run. Writes the truth to argv[1]."""
import json
import os
import subprocess
import sys
import time

import torch


def smi(query):
    out = subprocess.run(["nvidia-smi", f"--query-{query}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return [[f.strip() for f in line.split(",")] for line in out.stdout.strip().splitlines()]


x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # line:hold
torch.cuda.synchronize()
time.sleep(0.7)  # flush ticks while it is held
apps = smi("compute-apps=pid,used_memory")
gpu = smi("gpu=memory.used,memory.total")
free, total = torch.cuda.mem_get_info()
time.sleep(0.7)
json.dump({
    "pid": os.getpid(),
    # MiB, as nvidia-smi prints them
    "apps": {int(p): int(m) for p, m in apps if p.isdigit()},
    "gpu_used_mib": int(gpu[0][0]),
    "gpu_total_mib": int(gpu[0][1]),
    "cuda_free": free,
    "cuda_total": total,
}, open(sys.argv[1], "w"))
