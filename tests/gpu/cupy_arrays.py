"""CuPy with its default memory pool, then with pooling off (each array a
cudaMalloc/cudaFree of its own). Allocations come from the lines marked
a `line:` comment; with argv[1], the truth (those lines) is written there."""
import sys

import cupy as cp


def pooled_arrays():
    xs = [cp.ones(1 << 20, dtype=cp.float32) for _ in range(4)]  # line:pooled
    return float(sum(x.sum() for x in xs))


def unpooled_arrays():
    cp.cuda.set_allocator(None)
    total = 0.0
    for i in range(8):
        x = cp.full(1 << 18, i, dtype=cp.float32)  # line:unpooled
        total += float(x.sum())
        del x
    return total


if __name__ == "__main__":
    print("cupy_arrays:", pooled_arrays(), unpooled_arrays())
    if len(sys.argv) > 1:
        from truth import marked_lines, write
        write(sys.argv[1], {"file": __file__, "lines": marked_lines(__file__)})
