// two_gpus.cu — needs two GPUs (exits 77, "skipped", with fewer). One
// process on two devices: 256 MiB on device 0 and 512 MiB on device 1 held
// together, device 0 given peer access to device 1 (a mapping, not an
// allocation), a 1 TiB request on device 1 that fails; then one CUDA child
// per device ("worker N" allocates (N + 1) × 128 MiB on device N).
//
// expect: exit=0
// expect: processes=3
// expect: site=alloc_on kind=device device=0 allocs=2 bytes=402653184 freed=2 leaked=0
// expect: site=alloc_on kind=device device=1 allocs=2 bytes=805306368 freed=2 leaked=0
// expect: failed site=try_huge count=1 result=2
// expect: calldevice device=1 count=1
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void *alloc_on(int device, size_t bytes) {
    void *p = nullptr;
    if (cudaSetDevice(device) || cudaMalloc(&p, bytes)) exit(10 + device);
    return p;
}

NOINLINE bool try_huge(int device) {
    void *p = nullptr;
    cudaSetDevice(device);
    cudaError_t e = cudaMalloc(&p, size_t(1) << 40);
    cudaGetLastError();
    return e == cudaSuccess;
}

static int worker(int device) {
    void *p = alloc_on(device, size_t(device + 1) * (128 << 20));
    cudaFree(p);
    printf("two_gpus: worker %d done\n", device);
    return 0;
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) || n < 2) {
        printf("two_gpus: %d device(s), needs two: skipped\n", n);
        return 77;
    }
    if (argc > 2 && strcmp(argv[1], "worker") == 0) return worker(atoi(argv[2]));
    void *a = alloc_on(0, 256 << 20);
    void *b = alloc_on(1, 512 << 20);
    int can = 0;
    cudaDeviceCanAccessPeer(&can, 0, 1);
    if (can) {
        cudaSetDevice(0);
        cudaDeviceEnablePeerAccess(1, 0);
        cudaMemcpyPeer(a, 0, b, 1, 1 << 20);
    }
    if (try_huge(1)) return 2;
    cudaSetDevice(0);
    cudaFree(a);
    cudaSetDevice(1);
    cudaFree(b);
    for (int d = 0; d < 2; d++) {
        pid_t pid = fork();
        if (pid == 0) {
            char arg[8];
            snprintf(arg, sizeof arg, "%d", d);
            execl("/proc/self/exe", argv[0], "worker", arg, (char *)nullptr);
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
    }
    printf("two_gpus: done (peer access %s)\n", can ? "used" : "not available");
    return 0;
}
