// Timing workload: the cost of tracing kernels, per launch. Launches N tiny
// kernels back to back on one stream and prints one JSON line with the
// wall time per kernel (ns), launches and synchronization included.
//
//   bench_launch [N]
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void tiny(int *p) {
    if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(p, 1);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    int *p;
    cudaMalloc(&p, sizeof(int));
    for (int i = 0; i < 1000; i++) tiny<<<1, 32>>>(p);  // warm-up
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) tiny<<<1, 32>>>(p);
    cudaDeviceSynchronize();
    auto t1 = std::chrono::steady_clock::now();
    cudaFree(p);
    double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
    printf("{\"bench\": \"launch\", \"ns_per_kernel\": %.1f, \"kernels\": %ld}\n", ns, n);
    return 0;
}
