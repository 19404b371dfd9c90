"""A PyTorch memory snapshot pickle written by PyTorch itself, with torch's
own figures beside it: the ground truth of `gmem-prof report snapshot.pickle`.

The program turns PyTorch's allocation history on before its first CUDA
tensor, trains a small MLP with Adam for STEPS steps while keeping a 3 MiB
tensor per step (a leak at a marked line), cuts a pool into pieces, asks for
far too much once (an allocator OOM, caught), frees the pieces and calls
empty_cache() (segments given back), then dumps the snapshot with
torch.cuda.memory._dump_snapshot, as users do.

    python3 torch_snapshot.py OUT.pickle TRUTH.json [MAX_ENTRIES]

MAX_ENTRIES (default 100000) bounds PyTorch's history ring: a small one
drops the oldest events, as long real runs do.
"""
import sys

import torch
from torch.cuda import _memory_viz

from truth import marked_lines, write

STEPS = 12
MIB = 1 << 20


def train(kept):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024)
    ).cuda()  # line:model
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(STEPS):
        x = torch.randn(512, 1024, device="cuda")  # line:batch
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # line:step
        kept.append(torch.empty(3 * MIB, dtype=torch.uint8, device="cuda"))  # line:kept
    return model, optimizer


def fragment():
    sizes = [3 * MIB // 2, 3 * MIB, 5 * MIB]
    pieces = [torch.empty(sizes[i % 3], dtype=torch.uint8, device="cuda")  # line:pieces
              for i in range(24)]
    for i in range(0, len(pieces), 2):
        pieces[i] = None
    return pieces


def main():
    out, truth_path = sys.argv[1], sys.argv[2]
    entries = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
    torch.cuda.memory._record_memory_history(max_entries=entries)
    kept = []
    model, optimizer = train(kept)
    pieces = fragment()
    torch.cuda.synchronize()
    peak_before_oom = torch.cuda.max_memory_allocated()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # line:oom
    except torch.OutOfMemoryError:
        pass
    pieces = None
    torch.cuda.synchronize()
    reserved_before_empty = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()  # line:empty_cache
    stats = torch.cuda.memory_stats()
    torch.cuda.memory._dump_snapshot(out)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    truth = {
        "file": __file__,
        "lines": marked_lines(__file__),
        "steps": STEPS,
        "max_entries": entries,
        "kept_bytes": sum(t.numel() for t in kept),
        "params": sum(p.numel() * p.element_size() for p in model.parameters()),
        "allocated_peak": stats["allocated_bytes.all.peak"],
        "allocated_peak_before_oom": peak_before_oom,
        "allocated": stats["allocated_bytes.all.current"],
        "reserved": stats["reserved_bytes.all.current"],
        "reserved_peak": stats["reserved_bytes.all.peak"],
        "reserved_before_empty_cache": reserved_before_empty,
        "num_ooms": stats["num_ooms"],
        "num_device_alloc": stats["num_device_alloc"],
        "num_device_free": stats["num_device_free"],
        "segments": len(snapshot["segments"]),
        "trace_entries": [len(t) for t in snapshot["device_traces"]],
        "trace_actions": sorted({e["action"] for t in snapshot["device_traces"] for e in t}),
        "memory_viz_stats": _memory_viz.segsum(snapshot),
        "memory_viz_trace_tail": _memory_viz.trace(snapshot).splitlines()[-1],
        "torch": torch.__version__,
    }
    del optimizer
    write(truth_path, truth)


if __name__ == "__main__":
    main()
