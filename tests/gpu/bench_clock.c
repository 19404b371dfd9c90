/* What reading the time costs on this host, per call: CLOCK_REALTIME
 * through the vDSO (what the collector stamps every event with) and the
 * CPU's timestamp counter. Prints one JSON line. */
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

static double ns_per(int which, long n) {
    struct timespec a, b, t;
    volatile uint64_t sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        if (which == 0) {
            clock_gettime(CLOCK_REALTIME, &t);
            sink += (uint64_t)t.tv_nsec;
        } else {
            sink += __rdtsc();
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)sink;
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}

int main(void) {
    long n = 5000000;
    ns_per(0, n / 10);
    printf("{\"realtime_ns\": %.1f, \"rdtsc_ns\": %.1f}\n", ns_per(0, n), ns_per(1, n));
    return 0;
}
