"""Timing workload heavy in allocation events: an MLP training loop. Run
with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync, every tensor is a
cuMemAllocAsync/cuMemFreeAsync (bench "alloc"); with the default caching
allocator, every tensor is an event of the allocator seen from the inside
(bench "allocnative"). Prints one JSON line: median step time (ms)."""
import json
import statistics
import time

import torch

from host_probe import host_probe_ms
from recording_switch import timed_steps, torch_history


def main():
    steps = 1000
    # BENCH_TORCH_HISTORY: PyTorch's own allocation history, the reference
    # `overhead.sh` variants `torchhistory` and `torchtrace` measure.
    torch_history(True)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 512),
    ).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 512, device="cuda")
    y = torch.randn(256, 512, device="cuda")
    # Warm up for two seconds (clocks, allocator pools, the collector's caches).
    start = time.perf_counter()
    warmup = 0
    while time.perf_counter() - start < 2.0:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        warmup += 1
    torch.cuda.synchronize()

    def step():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    probe_before = host_probe_ms()
    # BENCH_PAUSE_EVERY: recorded and paused steps alternated
    # (recording_switch.py).
    times, extra = timed_steps(step, steps)
    backend = torch.cuda.get_allocator_backend()
    # The 10th percentile too: a step's own cost with less of what the
    # host's other load adds to some steps (a run's median moves with it).
    p10 = statistics.quantiles(times, n=10)[0]
    probe = (probe_before + host_probe_ms()) / 2
    print(json.dumps({"bench": "alloc" if backend == "cudaMallocAsync" else "allocnative", "median_ms": statistics.median(times),
                      "p10_ms": p10, "min_ms": min(times), "probe_ms": probe,
                      "steps": warmup + len(times), "backend": torch.cuda.get_allocator_backend(),
                      **extra}))


if __name__ == "__main__":
    main()
