// oom.cu — failed allocations: one impossible 1 TiB request, then 16 GiB
// blocks until the device is full (the last request fails), then all freed.
//
// expect: exit=0
// expect: failed site=try_huge bytes=1099511627776 result=2 count=1
// expect: failed site=fill_device bytes=17179869184 result=2 count=1
// expect: site=fill_device kind=device leaked=0
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

NOINLINE bool try_huge() {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, 1ull << 40);
    cudaGetLastError();
    return e == cudaSuccess;
}

NOINLINE int fill_device(std::vector<void *> &held) {
    for (;;) {
        void *p = nullptr;
        if (cudaMalloc(&p, 16ull << 30) != cudaSuccess) { cudaGetLastError(); break; }
        held.push_back(p);
    }
    return (int)held.size();
}

int main() {
    if (try_huge()) { fprintf(stderr, "1 TiB allocation succeeded?\n"); return 1; }
    std::vector<void *> held;
    int n = fill_device(held);
    for (void *p : held) cudaFree(p);
    printf("oom: held %d blocks of 16 GiB before the device was full\n", n);
    return 0;
}
