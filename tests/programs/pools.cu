// pools.cu — stream-ordered allocation: the default pool and a custom pool
// with a release threshold, trimmed and destroyed.
//
// expect: exit=0
// expect: site=alloc_default_pool kind=device allocs=8 bytes=8388608 freed=8 leaked=0
// expect: site=alloc_custom_pool kind=device allocs=4 bytes=16777216 freed=4 leaked=0
// The device's default pool is created on first use: CUPTI reports it too.
// expect: pool op=created count=2
// expect: pool op=destroyed count=1
// expect: api func=cuMemPoolTrimTo count=1
// expect: api func=cuMemAllocAsync count=8
// expect: api func=cuMemAllocFromPoolAsync count=4
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define NOINLINE __attribute__((noinline))

NOINLINE void alloc_default_pool(cudaStream_t s) {
    void *p[8];
    for (int i = 0; i < 8; i++) CHECK(cudaMallocAsync(&p[i], 1 << 20, s));
    for (int i = 0; i < 8; i++) CHECK(cudaFreeAsync(p[i], s));
    CHECK(cudaStreamSynchronize(s));
}

NOINLINE void alloc_custom_pool(cudaStream_t s, cudaMemPool_t pool) {
    void *p[4];
    for (int i = 0; i < 4; i++) CHECK(cudaMallocFromPoolAsync(&p[i], 4 << 20, pool, s));
    for (int i = 0; i < 4; i++) CHECK(cudaFreeAsync(p[i], s));
    CHECK(cudaStreamSynchronize(s));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    alloc_default_pool(s);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    unsigned long long threshold = 64ull << 20;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    alloc_custom_pool(s, pool);
    CHECK(cudaMemPoolTrimTo(pool, 0));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    printf("pools: done\n");
    return 0;
}
