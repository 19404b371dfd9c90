// killed.cu — allocates one 1 MiB buffer every 20 ms forever and logs each
// (CLOCK_REALTIME ns, address) to the file named by argv[1]. The GPU script
// kills it with SIGKILL; every allocation logged more than one second before
// the kill must be in the trace.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void *alloc_forever_step() {
    void *p;
    if (cudaMalloc(&p, 1 << 20)) exit(1);
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    FILE *log = fopen(argv[1], "w");
    if (!log) return 2;
    cudaFree(0);
    for (long i = 0;; i++) {
        void *p = alloc_forever_step();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        fprintf(log, "%ld %lld %p\n", i, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, p);
        fflush(log);
        usleep(20000);
    }
}
