// ipc.cu — a parent shares a 64 MiB device buffer with a CUDA child through
// CUDA IPC (cudaIpcGetMemHandle, then cudaIpcOpenMemHandle in the child,
// which writes to it). The buffer is device memory once: the child's
// mapping of it must not count as an allocation of its own. The child also
// allocates and frees 1 MiB of its own. Exit 0 only when the parent reads
// back what the child wrote.
//
// expect: exit=0
// expect: processes=2
// expect: site=shared_buffer kind=device allocs=1 bytes=67108864 freed=1 leaked=0
// expect: site=child_own kind=device allocs=1 bytes=1048576 freed=1 leaked=0
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

static const size_t SHARED = 64 << 20;

NOINLINE void *shared_buffer() {
    void *p = nullptr;
    if (cudaMalloc(&p, SHARED)) exit(1);
    if (cudaMemset(p, 0, SHARED)) exit(1);
    return p;
}

NOINLINE void child_own() {
    void *p = nullptr;
    if (cudaMalloc(&p, 1 << 20)) exit(11);
    cudaFree(p);
}

static int child(const char *hex) {
    cudaIpcMemHandle_t h;
    for (size_t i = 0; i < sizeof h; i++) {
        unsigned v = 0;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 12;
        ((unsigned char *)&h)[i] = (unsigned char)v;
    }
    void *p = nullptr;
    if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) return 13;
    if (cudaMemset(p, 7, SHARED) || cudaDeviceSynchronize()) return 14;
    child_own();
    if (cudaIpcCloseMemHandle(p)) return 15;
    printf("ipc: child wrote the shared buffer\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "child") == 0) return child(argv[2]);
    void *p = shared_buffer();
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, p)) return 2;
    char hex[2 * sizeof h + 1];
    for (size_t i = 0; i < sizeof h; i++) sprintf(hex + 2 * i, "%02x", ((unsigned char *)&h)[i]);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child", hex, (char *)nullptr);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ipc: child failed (%d)\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 3;
    }
    unsigned char first = 0, last = 0;
    cudaMemcpy(&first, p, 1, cudaMemcpyDeviceToHost);
    cudaMemcpy(&last, (char *)p + SHARED - 1, 1, cudaMemcpyDeviceToHost);
    cudaFree(p);
    if (first != 7 || last != 7) {
        fprintf(stderr, "ipc: the parent did not see the child's writes\n");
        return 4;
    }
    printf("ipc: done\n");
    return 0;
}
