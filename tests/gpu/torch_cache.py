"""Reserved far above allocated at the peak, which torch.cuda.empty_cache()
would have avoided: sixteen 64 MiB tensors (a segment each) are freed, and
the caching allocator keeps their segments; then one 2 GiB tensor fits in
none of them and takes a new segment, so memory_reserved() peaks at 3 GiB
while 2 GiB are allocated. Just before the 2 GiB request this program reads
the allocator's snapshot: the bytes in segments holding no tensor, which
empty_cache() would have returned (ground truth, argv[1]).
usage: torch_cache.py TRUTH_JSON
"""
import sys

import torch

from truth import marked_lines, torch_state, write

MIB = 1 << 20


def main():
    xs = [torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(16)]  # line:phase_one
    del xs
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    idle = [s["total_size"] for s in snap["segments"] if s["allocated_size"] == 0]
    big = torch.empty(2048 * MIB, dtype=torch.uint8, device="cuda")  # line:big
    torch.cuda.synchronize()
    write(sys.argv[1], {
        "file": __file__,
        "lines": marked_lines(__file__),
        "idle_segments": len(idle),
        "idle_bytes": sum(idle),
        "torch": torch_state(torch),
    })
    del big


if __name__ == "__main__":
    main()
