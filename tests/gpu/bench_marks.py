"""What the marks a recorded training loop makes cost on the host, per
mark: an optimizer step (gmem-prof's bootstrap hooks it: a step record and
the `optimizer step` phase's range) and an NVTX range pushed and popped
(`torch.cuda.nvtx`, recorded through CUPTI's NVTX callbacks). The optimizer
is SGD over one parameter without a gradient, so that its step does
nothing but run its hooks. Run plain and recorded (overhead.sh `marks`):
the difference of the two runs' figures is what recording adds per mark.
Prints one JSON line: µs per optimizer step and per NVTX range, the
median over BATCHES batches of PER_BATCH calls."""
import json
import statistics
import time

import torch

BATCHES = 30
PER_BATCH = 2000


def per_call_us(call):
    times = []
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(PER_BATCH):
            call()
        times.append((time.perf_counter() - t0) * 1e6 / PER_BATCH)
    return statistics.median(times)


def nvtx_range():
    torch.cuda.nvtx.range_push("mark")
    torch.cuda.nvtx.range_pop()


def main():
    torch.cuda.init()
    weight = torch.nn.Parameter(torch.zeros(1, device="cuda"))
    opt = torch.optim.SGD([weight], lr=0.1)
    for call in (opt.step, nvtx_range):  # warm both paths up
        for _ in range(PER_BATCH):
            call()
    print(json.dumps({
        "bench": "marks",
        "step_us": per_call_us(opt.step),
        "range_us": per_call_us(nvtx_range),
        "calls": BATCHES * PER_BATCH,
    }))


if __name__ == "__main__":
    main()
