// cupti_client.cu — a program that is itself a CUPTI client: it subscribes
// before CUDA starts, so when the collector is injected the subscriber slot
// (one per process on CUDA 13.0) is taken. The collector must say so and the
// program must run on unharmed.
//
// Build: nvcc ... cupti_client.cu -lcupti (tests/gpu/run.sh adds the paths).
//
// expect: exit=0
// expect: processes=1
// expect: message another CUPTI client
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <cupti.h>

static void CUPTIAPI on_call(void *, CUpti_CallbackDomain, CUpti_CallbackId, const void *) {}

int main() {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_call, nullptr) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_client: could not subscribe\n");
        return 1;
    }
    void *p;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 1;
    cudaFree(p);
    cuptiUnsubscribe(sub);
    printf("cupti_client: done\n");
    return 0;
}
