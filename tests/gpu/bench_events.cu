// bench_events.cu — the collector's cost per allocation event, measured in
// the program: N cudaMallocAsync + cudaFreeAsync pairs (64 KiB, one stream),
// called from DEPTH nested frames so stacks are as deep as a framework's.
// Prints the best of 5 repetitions in ns per pair. Not a test program: no
// expectations; tests/gpu/overhead.sh runs it plain and recorded, alternately.
//
// usage: bench_events [PAIRS] [DEPTH]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

static cudaStream_t stream;

__attribute__((noinline)) static double pairs(long n) {
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) {
        void *p;
        if (cudaMallocAsync(&p, 64 << 10, stream) != cudaSuccess) exit(1);
        cudaFreeAsync(p, stream);
    }
    cudaStreamSynchronize(stream);
    auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

__attribute__((noinline)) static double nested(int depth, long n) {
    volatile int guard = depth;  // keeps each level a real frame
    double r = depth > 0 ? nested(depth - 1, n) : pairs(n);
    return r + guard * 0;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 50000;
    int depth = argc > 2 ? atoi(argv[2]) : 30;
    cudaStreamCreate(&stream);
    nested(depth, 1000);  // warm up: pool, collector caches
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double v = nested(depth, n);
        if (v < best) best = v;
    }
    printf("{\"bench\": \"events\", \"ns_per_pair\": %.1f, \"pairs\": %ld, \"depth\": %d}\n", best, n, depth);
    return 0;
}
