// vmm.cu — the virtual memory management API: reserve 64 MiB of address
// space, create two 8 MiB physical allocations, map both, unmap and release
// one, and leave the other mapped at exit (leaked).
//
// expect: exit=0
// expect: api func=cuMemAddressReserve count=1 bytes=67108864
// expect: api func=cuMemCreate count=2 bytes=16777216
// expect: api func=cuMemMap count=2 bytes=16777216
// expect: api func=cuMemUnmap count=1 bytes=8388608
// expect: api func=cuMemRelease count=1
// expect: site=map_two_chunks kind=device allocs=2 bytes=16777216 freed=1 leaked=1 leaked_bytes=8388608
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1); } } while (0)
#define NOINLINE __attribute__((noinline))

static const size_t CHUNK = 8ull << 20;

NOINLINE void map_two_chunks(CUdeviceptr base, CUmemGenericAllocationHandle *h) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    for (int i = 0; i < 2; i++) {
        CK(cuMemCreate(&h[i], CHUNK, &prop, 0));
        CK(cuMemMap(base + i * CHUNK, CHUNK, 0, h[i], 0));
    }
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(base, 2 * CHUNK, &access, 1));
}

int main() {
    cudaFree(0);  // create the primary context through the runtime
    size_t gran = 0;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (CHUNK % gran) { fprintf(stderr, "granularity %zu\n", gran); return 1; }
    CUdeviceptr base;
    CK(cuMemAddressReserve(&base, 64ull << 20, 0, 0, 0));
    CUmemGenericAllocationHandle h[2];
    map_two_chunks(base, h);
    CK(cuMemsetD8(base, 1, 2 * CHUNK));
    CK(cuCtxSynchronize());
    CK(cuMemUnmap(base, CHUNK));
    CK(cuMemRelease(h[0]));
    printf("vmm: done\n");
    return 0;
}
