// streams.cu — each kernel launch names the stream it went into: a kernel
// launched twice on a stream that is then destroyed, twice on the stream
// created next (the driver often hands it the same handle), twice on the
// legacy default stream. The collector keeps stream ids by handle and must
// forget them when a stream is destroyed.
//
// expect: exit=0
// expect: kernels name=step_kernel count=6 streams=3
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void step_kernel(int *p) { p[threadIdx.x] += 1; }

static void twice(int *p, cudaStream_t s) {
    for (int i = 0; i < 2; i++) step_kernel<<<1, 32, 0, s>>>(p);
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
}

int main() {
    int *p;
    CHECK(cudaMalloc(&p, 32 * sizeof(int)));
    cudaStream_t first, second;
    CHECK(cudaStreamCreate(&first));
    twice(p, first);
    CHECK(cudaStreamDestroy(first));
    CHECK(cudaStreamCreate(&second));
    twice(p, second);
    printf("the second stream %s the first one's handle\n", second == first ? "got" : "did not get");
    CHECK(cudaStreamDestroy(second));
    twice(p, 0);
    CHECK(cudaFree(p));
    return 0;
}
