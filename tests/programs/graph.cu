// graph.cu — CUDA graph memory nodes: a graph with an allocation node, a
// kernel and a free node, launched three times; then a stream capture of
// cudaMallocAsync/cudaFreeAsync replayed twice.
//
// expect: exit=0
// expect: api func=cuGraphAddMemAllocNode count=1 bytes=2097152
// expect: api func=cuGraphAddMemFreeNode count=1
// expect: kernels name=fill_kernel count=5
// record: --kernels timed
// (A graph's kernels are launched by the graph: only kernels traced timed
// see each of its runs.)
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define NOINLINE __attribute__((noinline))

__global__ void fill_kernel(char *p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = 7;
}

NOINLINE void graph_with_memory_nodes(cudaStream_t s) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap = {};
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = 2 << 20;
    cudaGraphNode_t alloc, kern, fre;
    CHECK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
    char *p = (char *)ap.dptr;
    size_t n = 2 << 20;
    void *args[] = {&p, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)fill_kernel;
    kp.gridDim = dim3(n / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kern, g, &alloc, 1, &kp));
    CHECK(cudaGraphAddMemFreeNode(&fre, g, &kern, 1, ap.dptr));
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
}

NOINLINE void captured_async_alloc(cudaStream_t s) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    char *p;
    CHECK(cudaMallocAsync((void **)&p, 1 << 20, s));
    fill_kernel<<<(1 << 20) / 256, 256, 0, s>>>(p, 1 << 20);
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 2; i++) CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    graph_with_memory_nodes(s);
    captured_async_alloc(s);
    CHECK(cudaDeviceGraphMemTrim(0));
    printf("graph: done\n");
    return 0;
}
