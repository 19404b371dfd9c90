"""How fast the host runs pure-Python work in this process: a fixed piece
of work timed a few times (median, ms). CUDA and the collector take no part
in it, so between two runs of a benchmark it measures the host's own speed
(frequency, other tenants), which moves step times of host-bound loops by
as much as recording does. Printed by bench_alloc.py and bench_train.py;
overhead.sh divides each round's ratio by the ratio of the probes."""
import statistics
import time


def host_probe_ms(rounds=7):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        table = {}
        for i in range(100_000):
            table[i & 1023] = i
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
