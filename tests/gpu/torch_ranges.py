"""NVTX ranges of a real PyTorch program, recorded with no code change to
gmem-prof: a small MLP trained with Adam for STEPS steps, each iteration an
"iteration" range holding "forward", "backward" and "optimizer" ranges
(torch.cuda.nvtx.range_push/range_pop, PyTorch's own copy of NVTX3), each
iteration keeping a 3 MiB tensor inside "optimizer". PyTorch's own figures
per range instance: memory_allocated when it began and ended, and
max_memory_allocated inside it (reset as each of the three begins; the
iteration's are not compared for rise). Then BENCH push/pop pairs timed in
the program.

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


kept = []
for step in range(STEPS):
    it = begin("iteration")
    x = torch.randn(512, 1024, device="cuda")
    s = begin("forward")
    loss = model(x).square().mean()  # line:forward
    end("forward", s)
    s = begin("backward")
    optimizer.zero_grad()
    loss.backward()
    del loss
    end("backward", s)
    s = begin("optimizer")
    optimizer.step()  # line:step
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
        "pair_ns": pair_ns,
        "lines": marked_lines(__file__),
        "params": sum(p.numel() * p.element_size() for p in model.parameters()),
    },
    open(sys.argv[1], "w"),
)
