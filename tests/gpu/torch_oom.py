"""Out-of-memory cases of PyTorch's default caching allocator, for recording.

1. Recovered: fill the device with 4 GiB tensors, free every other one (torch
   keeps those segments cached), then ask for one tensor larger than any
   cached block and than what is free. cudaMalloc fails, torch releases its
   cached segments and retries, and the retry succeeds: the program never
   sees the failure.
2. Reached the program: ask for far more than the device holds. cudaMalloc
   fails, the retry after releasing the cache fails too, and torch raises
   OutOfMemoryError, which this program catches.

Writes torch.cuda.memory_stats() and the sizes asked to the JSON file named by
argv[1] (ground truth: num_alloc_retries, num_ooms).
usage: torch_oom.py STATS_JSON
"""
import json
import sys

import torch

GIB = 1 << 30


def main():
    free, total = torch.cuda.mem_get_info()
    block = 4 * GIB
    count = int(free * 0.85) // block
    held = [torch.empty(block, dtype=torch.uint8, device="cuda") for _ in range(count)]
    # Free every other one: torch caches them, nothing goes back to CUDA.
    for i in range(0, count, 2):
        held[i] = None
    free_now, _ = torch.cuda.mem_get_info()
    # Larger than any cached 4 GiB block and than what CUDA has free, smaller
    # than what becomes free once the cache is released.
    recovered_bytes = ((free_now + block * (count // 2)) // 2 // GIB) * GIB
    big = torch.empty(recovered_bytes, dtype=torch.uint8, device="cuda")
    del big
    impossible_bytes = 2 * total
    reached = False
    try:
        torch.empty(impossible_bytes, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        reached = True
    held = None
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    out = {
        "block_bytes": block,
        "blocks": count,
        "recovered_request_bytes": recovered_bytes,
        "impossible_request_bytes": impossible_bytes,
        "oom_reached_program": reached,
        "num_alloc_retries": stats["num_alloc_retries"],
        "num_ooms": stats["num_ooms"],
        "reserved_peak": stats["reserved_bytes.all.peak"],
    }
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    print("torch_oom:", json.dumps(out))


if __name__ == "__main__":
    main()
