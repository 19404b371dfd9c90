// two_pools.cu — fragmentation is per pool: the device's default pool,
// left empty with 32 MiB kept (one 32 MiB block allocated and freed), and a
// custom pool of 64 × 1 MiB blocks with every other one freed. No request
// from the custom pool can use the default pool's 32 MiB: the custom
// pool's F is 1 − 1 MiB / 32 MiB (if the pool holds exactly its 64 MiB),
// and that is the device's figure, never the 0.5 that adding both pools'
// free space gives.
//
// expect: exit=0
// expect: site=fill_default_pool kind=device allocs=1 bytes=33554432 freed=1 leaked=0
// expect: site=fill_custom_pool kind=device allocs=64 bytes=67108864 freed=64 leaked=0
// expect: api func=cuMemAllocFromPoolAsync count=64
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define NOINLINE __attribute__((noinline))

static const unsigned long long KEEP_ALL = ~0ull;

NOINLINE void fill_default_pool(cudaStream_t s) {
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    // Keep freed memory in the pool rather than giving it back at syncs.
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&KEEP_ALL));
    void *p;
    CHECK(cudaMallocAsync(&p, 32 << 20, s));
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
}

NOINLINE void fill_custom_pool(cudaStream_t s, cudaMemPool_t pool, void **p) {
    for (int i = 0; i < 64; i++) CHECK(cudaMallocFromPoolAsync(&p[i], 1 << 20, pool, s));
    CHECK(cudaStreamSynchronize(s));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    fill_default_pool(s);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, (void *)&KEEP_ALL));
    void *p[64];
    fill_custom_pool(s, pool, p);
    for (int i = 0; i < 64; i += 2) CHECK(cudaFreeAsync(p[i], s));
    CHECK(cudaStreamSynchronize(s));
    size_t reserved = 0, used = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    // What the driver says the custom pool holds, for the sample's README.
    printf("two_pools: custom pool reserved %zu used %zu\n", reserved, used);
    for (int i = 1; i < 64; i += 2) CHECK(cudaFreeAsync(p[i], s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemPoolDestroy(pool));
    CHECK(cudaStreamDestroy(s));
    printf("two_pools: done\n");
    return 0;
}
