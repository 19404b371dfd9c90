// children.cu — a parent that allocates, forks a child that never touches
// CUDA (must neither hang nor add a process), and execs itself as a CUDA
// child that allocates two buffers and leaks one.
//
// expect: exit=0
// expect: processes=2
// expect: site=parent_alloc kind=device allocs=1 bytes=2097152 freed=1 leaked=0
// expect: site=child_alloc kind=device allocs=2 bytes=6291456 freed=1 leaked=1 leaked_bytes=3145728
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void child_alloc() {
    void *a, *b;
    if (cudaMalloc(&a, 3 << 20) || cudaMalloc(&b, 3 << 20)) exit(1);
    cudaFree(a);
}

NOINLINE void parent_alloc() {
    void *p;
    if (cudaMalloc(&p, 2 << 20)) exit(1);
    cudaFree(p);
}

static int wait_for(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        child_alloc();
        printf("children: cuda child done\n");
        return 0;
    }
    parent_alloc();
    pid_t plain = fork();
    if (plain == 0) {
        // A fork child that only computes and exits through exit() (running
        // atexit handlers inherited from the parent).
        volatile long x = 0;
        for (int i = 0; i < 1000; i++) x += i;
        exit(0);
    }
    if (wait_for(plain) != 0) { fprintf(stderr, "plain fork child failed\n"); return 1; }
    pid_t cuda_child = fork();
    if (cuda_child == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)nullptr);
        _exit(127);
    }
    if (wait_for(cuda_child) != 0) { fprintf(stderr, "cuda child failed\n"); return 1; }
    printf("children: done\n");
    return 0;
}
