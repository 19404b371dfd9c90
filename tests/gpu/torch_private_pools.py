"""PyTorch's private pools: a torch.cuda.MemPool and a CUDA graph's own pool.

Eight 6 MiB tensors are made inside a MemPool (`use_mem_pool`) and every
other one is freed: the pool's segments hold free space in pieces that no
tensor outside the pool can use. Then an MLP's forward pass is captured in a
CUDA graph: its intermediates live in the pool the graph made for itself,
and stay there after capture. The memory snapshot taken after each step is
the ground truth: each private pool's id (as torch numbers it), segments,
free bytes and largest free block.
Writes the truth to argv[1].
usage: torch_private_pools.py TRUTH_JSON
"""
import sys

import torch

from truth import marked_lines, torch_state, write

MIB = 1 << 20


def private_pools(snapshot):
    """Per private pool, stream and segment type: what its segments hold."""
    pools = {}
    for seg in snapshot["segments"]:
        pool_id = tuple(seg.get("segment_pool_id", (0, 0)))
        if pool_id == (0, 0):
            continue
        key = f'{pool_id[0]},{pool_id[1]}/{seg["stream"]}/{seg["segment_type"]}'
        p = pools.setdefault(key, {"segments": 0, "reserved": 0, "allocated": 0,
                                   "free": 0, "largest_free": 0})
        p["segments"] += 1
        p["reserved"] += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "inactive":
                p["free"] += b["size"]
                p["largest_free"] = max(p["largest_free"], b["size"])
            elif b["state"] == "active_allocated":
                p["allocated"] += b["size"]
    return pools


def main():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        kept = [torch.empty(6 * MIB, dtype=torch.uint8, device="cuda")  # line:mempool
                for _ in range(8)]
    for i in range(0, len(kept), 2):
        kept[i] = None
    torch.cuda.synchronize()
    after_mempool = private_pools(torch.cuda.memory._snapshot())

    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024),
    ).cuda()
    x = torch.randn(2048, 1024, device="cuda")
    # Warm up on a side stream first (cuBLAS's handles and workspaces), as
    # torch's documentation asks before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = model(x)  # line:graph
    graph.replay()
    torch.cuda.synchronize()
    after_graph = private_pools(torch.cuda.memory._snapshot())
    truth = {
        "file": __file__,
        "lines": marked_lines(__file__),
        "mempool_id": list(pool.id),
        "graph_pool_id": list(graph.pool()),
        "after_mempool": after_mempool,
        "after_graph": after_graph,
        "output_bytes": y.numel() * y.element_size(),
        "torch": torch_state(torch),
    }
    write(sys.argv[1], truth)


if __name__ == "__main__":
    main()
