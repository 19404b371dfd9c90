"""The stand-in caching allocator (fake_torch.cpp) driven from Python 30
frames deep: prints ns per tensor allocated and freed (median of 7 timed
loops). Used by bench.sh; argv: the fake libcupti.so.13, the stand-in
libc10_cuda.so."""
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


def loop(n):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        free(malloc(4096))
    return (time.perf_counter_ns() - t0) / n


def deep(depth, n):
    if depth == 0:
        return [loop(n) for _ in range(7)]
    return deep(depth - 1, n)


loop(20000)
print("%.0f ns per tensor allocated and freed" % statistics.median(deep(28, 50000)))
