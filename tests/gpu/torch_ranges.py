"""NVTX ranges of a real PyTorch program, recorded with no code change to
gmem-prof: a small MLP trained with Adam for STEPS steps, each iteration an
"iteration" range holding "forward", "backward" and "optimizer" ranges
(torch.cuda.nvtx.range_push/range_pop, PyTorch's own copy of NVTX3), each
iteration keeping a 3 MiB tensor inside "optimizer". PyTorch's own figures
per range instance: memory_allocated when it began and ended, and
max_memory_allocated inside it (reset as each of the three begins; the
iteration's are not compared for rise). The phases gmem-prof's bootstrap
marks by itself (domain "PyTorch") get their own truth: "backward" is
loss.backward() alone and "optimizer step" optimizer.step() alone
(memory_allocated before and after, max_memory_allocated inside, reset
just before), "forward" from one optimizer.step()'s end to the next
loss.backward() (memory_allocated at both ends). Then BENCH push/pop pairs
timed in the program.

    python3 torch_ranges.py TRUTH.json
"""
import json
import sys
import time

import torch
import torch.cuda.nvtx as nvtx

from truth import marked_lines

STEPS = 20
BENCH = 200_000
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)
).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
truth = {"forward": [], "backward": [], "optimizer": [], "iteration": []}
phases = {"backward": [], "optimizer step": [], "forward": []}


def begin(name):
    torch.cuda.synchronize()
    if name != "iteration":
        torch.cuda.reset_peak_memory_stats()
    nvtx.range_push(name)
    return torch.cuda.memory_allocated()


def end(name, start):
    torch.cuda.synchronize()
    nvtx.range_pop()
    truth[name].append(
        {
            "start": start,
            "end": torch.cuda.memory_allocated(),
            "peak": torch.cuda.max_memory_allocated(),
        }
    )


def phase(name, run):
    """Runs `run()`, one phase, with PyTorch's figures around it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    phases[name].append(
        {"start": start, "end": torch.cuda.memory_allocated(), "peak": torch.cuda.max_memory_allocated()}
    )


kept = []
forward_from = None
for step in range(STEPS):
    it = begin("iteration")
    x = torch.randn(512, 1024, device="cuda")
    s = begin("forward")
    loss = model(x).square().mean()  # line:forward
    end("forward", s)
    s = begin("backward")
    optimizer.zero_grad()
    torch.cuda.synchronize()
    if forward_from is not None:
        phases["forward"].append({"start": forward_from, "end": torch.cuda.memory_allocated()})
    phase("backward", loss.backward)
    del loss
    end("backward", s)
    s = begin("optimizer")
    phase("optimizer step", optimizer.step)  # line:step
    forward_from = phases["optimizer step"][-1]["end"]
    kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))  # line:kept
    end("optimizer", s)
    end("iteration", it)

t = time.perf_counter()
for _ in range(BENCH):
    nvtx.range_push("bench")
    nvtx.range_pop()
pair_ns = (time.perf_counter() - t) / BENCH * 1e9
print(f"{pair_ns:.1f} ns per torch.cuda.nvtx push+pop pair")
json.dump(
    {
        "steps": STEPS,
        "ranges": truth,
        "phases": phases,
        "pair_ns": pair_ns,
        "lines": marked_lines(__file__),
        "params": sum(p.numel() * p.element_size() for p in model.parameters()),
    },
    open(sys.argv[1], "w"),
)
