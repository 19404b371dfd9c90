// kinds.cu — one allocation site per memory kind CUPTI reports, some leaked,
// three kernel launches, and exit code 3 (record must pass it through).
//
// Sizes are chosen so each site is unambiguous. MiB = 1048576.
//
// expect: exit=3
// expect: processes=1
// expect: site=alloc_device_buffers kind=device allocs=4 bytes=4194304 freed=3 leaked=1 leaked_bytes=1048576
// expect: site=alloc_pitched kind=device allocs=1 bytes=102400 freed=1 leaked=0
// expect: site=alloc_array kind=array allocs=1 freed=1 leaked=0
// expect: site=alloc_managed kind=managed allocs=1 bytes=4194304 freed=1 leaked=0
// expect: site=alloc_pinned kind=pinned allocs=2 bytes=3145728 freed=1 leaked=1 leaked_bytes=1048576
// expect: kernels name=touch_kernel count=3 threads=6291456
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define NOINLINE __attribute__((noinline))

__global__ void touch_kernel(char *p, size_t n) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] = (char)i;
}

static void *leaked_device, *leaked_pinned;

NOINLINE void alloc_device_buffers(void **out) {
    for (int i = 0; i < 4; i++) CHECK(cudaMalloc(&out[i], 1 << 20));
}

NOINLINE void alloc_pitched() {
    void *p; size_t pitch;
    CHECK(cudaMallocPitch(&p, &pitch, 1000, 100));
    CHECK(cudaFree(p));
}

NOINLINE void alloc_array() {
    cudaChannelFormatDesc d = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &d, make_cudaExtent(256, 256, 4)));
    CHECK(cudaFreeArray(a));
}

NOINLINE void alloc_managed() {
    char *m;
    CHECK(cudaMallocManaged(&m, 4 << 20));
    touch_kernel<<<(4 << 20) / 256, 256>>>(m, 4 << 20);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(m));
}

NOINLINE void alloc_pinned() {
    void *h1, *h2;
    CHECK(cudaMallocHost(&h1, 2 << 20));
    CHECK(cudaHostAlloc(&h2, 1 << 20, cudaHostAllocDefault));
    CHECK(cudaFreeHost(h1));
    leaked_pinned = h2;
}

int main() {
    void *bufs[4];
    alloc_device_buffers(bufs);
    for (int i = 0; i < 2; i++) touch_kernel<<<4096, 256>>>((char *)bufs[i], 1 << 20);
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 3; i++) CHECK(cudaFree(bufs[i]));
    leaked_device = bufs[3];
    alloc_pitched();
    alloc_array();
    alloc_managed();
    alloc_pinned();
    printf("kinds: done\n");
    return 3;
}
