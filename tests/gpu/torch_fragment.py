"""Fragmentation inside PyTorch's caching allocator, then empty_cache().

Tensors of mixed sizes (1.5 to 7 MiB, so they share 20 MiB segments) are
allocated and every other one is freed: the free space inside the segments
is cut into pieces. The snapshot taken then is the ground truth of each
pool's fragmentation (1 - largest free block / free bytes) and largest free
block. Then everything is freed and empty_cache() gives the segments back:
reserved memory must drop to what is still allocated (nothing).
Writes the truth to argv[1].
usage: torch_fragment.py TRUTH_JSON
"""
import sys

import torch

from truth import marked_lines, torch_state, write

MIB = 1 << 20


def main():
    sizes = [3 * MIB // 2, 3 * MIB, 5 * MIB, 5 * MIB // 2, 7 * MIB, 2 * MIB]
    tensors = [torch.empty(sizes[i % len(sizes)], dtype=torch.uint8, device="cuda")  # line:mixed
               for i in range(60)]
    for i in range(0, len(tensors), 2):
        tensors[i] = None
    torch.cuda.synchronize()
    fragmented = torch_state(torch)
    tensors = None
    torch.cuda.synchronize()
    before_empty = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()  # line:empty_cache
    truth = {
        "file": __file__,
        "lines": marked_lines(__file__),
        "fragmented": fragmented,
        "reserved_before_empty_cache": before_empty,
        "reserved_after_empty_cache": torch.cuda.memory_reserved(),
        "torch": torch_state(torch),
    }
    write(sys.argv[1], truth)


if __name__ == "__main__":
    main()
