"""Timing workload: torchvision resnet50 training, bf16 autocast, batch 64
(BENCH_BATCH: another batch size; a small one leaves the GPU waiting on the
host, so that the host sets every step's pace, the case where recording's
host time shows in full).
Prints one JSON line: median step time (ms) over the timed steps."""
import json
import os
import statistics
import sys
import time

import torch
import torchvision

from host_probe import host_probe_ms
from recording_switch import timed_steps, torch_history


def main():
    steps = 100
    # cuDNN's autotuner picks its algorithms by timing them, and may pick
    # others in the next run: that alone moved the plain runs' step time by
    # up to 24% between runs, more than the overhead being measured. Its
    # heuristics pick the same ones every run. BENCH_CUDNN_AUTOTUNE=1 turns
    # the autotuner back on.
    torch.backends.cudnn.benchmark = os.environ.get("BENCH_CUDNN_AUTOTUNE") == "1"
    model = torchvision.models.resnet50().cuda()
    # BENCH_TORCH_HISTORY: PyTorch's own allocation history, the reference
    # `overhead.sh` variants `torchhistory` and `torchtrace` measure.
    torch_history(True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = int(os.environ.get("BENCH_BATCH", "64"))
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    # Warm up for three seconds (cuDNN autotuning, clocks, caches).
    start = time.perf_counter()
    while time.perf_counter() - start < 3.0:
        step()
    # Where a step's time goes, to tell the spread between runs apart: the
    # host's time to issue the step (Python, autograd, launches, and the
    # collector's callbacks) against the whole step. When the two are close
    # the step is host-bound and every microsecond the collector spends on
    # the host shows in full.
    issue = []

    def timed_step():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        issue.append((t1 - t0) * 1e3)
        return (time.perf_counter() - t0) * 1e3

    probe_before = host_probe_ms()
    # BENCH_PAUSE_EVERY: recorded and paused steps alternated
    # (recording_switch.py).
    times, extra = timed_steps(timed_step, steps)
    with open("/proc/self/stat") as f:
        cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    print(json.dumps({
        "bench": "resnet50",
        "batch": batch,
        "median_ms": statistics.median(times),
        "issue_ms": statistics.median(issue),
        "min_ms": min(times),
        "probe_ms": (probe_before + host_probe_ms()) / 2,
        "cpu": cpu,
        "cpus": len(os.sched_getaffinity(0)),
        "steps": len(times),
        **extra,
    }))


if __name__ == "__main__":
    main()
