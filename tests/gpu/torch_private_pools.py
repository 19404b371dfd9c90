"""PyTorch's private pools: a torch.cuda.MemPool and a CUDA graph's own pool.

Eight 6 MiB tensors are made inside a MemPool (`use_mem_pool`) and every
other one is freed: the pool's segments hold free space in pieces that no
tensor outside the pool can use. Then an MLP's forward pass is captured in a
CUDA graph: its intermediates live in the pool the graph made for itself,
and stay there after capture. The memory snapshot taken after each step is
the ground truth: each private pool's id (as torch numbers it), segments,
free bytes and largest free block; and what stays allocated once the
program has dropped its objects (the workspaces cuBLAS got for the side
stream and the capture: torch's, not the program's).
Writes the truth to argv[1].
usage: torch_private_pools.py TRUTH_JSON
"""
import sys

import torch

from truth import left_allocated, marked_lines, pools_from_snapshot, torch_state, write

MIB = 1 << 20


def private_pool_key(seg):
    """Private pools only: torch's pool id, stream and segment type."""
    pool_id = tuple(seg.get("segment_pool_id", (0, 0)))
    if pool_id == (0, 0):
        return None
    return f'{pool_id[0]},{pool_id[1]}/{seg["stream"]}/{seg["segment_type"]}'


def private_pools(snapshot):
    return pools_from_snapshot(snapshot, private_pool_key)


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
    del kept, pool, model, x, y, graph, side
    truth["left_allocated"] = left_allocated(torch)
    write(sys.argv[1], truth)


if __name__ == "__main__":
    main()
