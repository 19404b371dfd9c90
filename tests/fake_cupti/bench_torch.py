"""The stand-in caching allocator (fake_torch.cpp) driven from Python 30
frames deep: prints ns per tensor allocated and freed (median of 7 timed
loops). Used by bench.sh; argv: the fake libcupti.so.13, the stand-in
libc10_cuda.so, optionally KiB of memory to write between tensors (as
a framework's own work would, leaving the collector's data out of the
CPU's caches; the plain run pays it too), and "native" to allocate from a
thread without Python instead."""
import ctypes
import statistics
import sys
import time

cupti = ctypes.CDLL(sys.argv[1])
if cupti.fake_cuInit() < 0:
    sys.exit("fake cuInit failed")
c10 = ctypes.CDLL(sys.argv[2])
c10.fake_torch_malloc.argtypes = [ctypes.c_size_t]
c10.fake_torch_malloc.restype = ctypes.c_uint64
c10.fake_torch_free.argtypes = [ctypes.c_uint64]
c10.fake_torch_init()
malloc, free = c10.fake_torch_malloc, c10.fake_torch_free
sweep_bytes = int(sys.argv[3]) << 10 if len(sys.argv) > 3 else 0
sweep = ctypes.create_string_buffer(max(sweep_bytes, 1))
memset = ctypes.memset


def loop(n):
    t0 = time.perf_counter_ns()
    if sweep_bytes:
        for _ in range(n):
            free(malloc(4096))
            memset(sweep, 1, sweep_bytes)
    else:
        for _ in range(n):
            free(malloc(4096))
    return (time.perf_counter_ns() - t0) / n


def deep(depth, n):
    if depth == 0:
        return [loop(n) for _ in range(7)]
    return deep(depth - 1, n)


if len(sys.argv) > 4 and sys.argv[4] == "native":
    # From a thread that runs no Python (as PyTorch's autograd thread):
    # 12 call paths 30 frames deep in turn.
    c10.fake_torch_bench_native.argtypes = [ctypes.c_long, ctypes.c_uint, ctypes.c_int]
    c10.fake_torch_bench_native.restype = ctypes.c_double
    runs = [c10.fake_torch_bench_native(100000, 12, 30) for _ in range(5)]
    print("%.0f ns per tensor allocated and freed" % statistics.median(runs))
    sys.exit(0)
loop(20000)
print("%.0f ns per tensor allocated and freed" % statistics.median(deep(28, 50000)))
