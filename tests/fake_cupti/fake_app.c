/* A "CUDA program" for the fake driver in fake_cupti.c: it initializes the
 * fake CUDA (which injects the collector), allocates at named sites, and
 * behaves as the scenario in argv[1] says. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../collector/include/gmem_prof.h"
/* NVTX3 as NVIDIA ships it (header only; nvtx3/LICENSE.txt). */
#include "nvtx3/nvToolsExt.h"

uint32_t fake_cuMemAlloc(uint64_t *dptr, size_t bytes);
uint32_t fake_cuMemFree(uint64_t dptr, size_t bytes);
void fake_kernel(const char *name);
void fake_kernel_on(void *stream, const char *name);
void fake_kernel_fn(void *stream, void *function, const char *name);
void *fake_cuStreamCreate(void);
void fake_cuStreamDestroy(void *stream);
void fake_cuModuleUnload(void);
uint32_t fake_stream_id_calls(void);
void fake_cuSetDevice(uint32_t device);
uint32_t fake_cuIpcOpenMemHandle(uint64_t *dptr, size_t bytes);
uint32_t fake_cuIpcCloseMemHandle(uint64_t dptr, size_t bytes);
int fake_cuInit(void);

#define NOINLINE __attribute__((noinline))

NOINLINE uint64_t site_alpha(size_t bytes) {
    uint64_t p = 0;
    if (fake_cuMemAlloc(&p, bytes)) exit(10);
    return p;
}

NOINLINE uint64_t site_beta(size_t bytes) {
    uint64_t p = 0;
    if (fake_cuMemAlloc(&p, bytes)) exit(10);
    return p;
}

NOINLINE uint32_t site_too_big(void) {
    uint64_t p = 0;
    return fake_cuMemAlloc(&p, 1ull << 41);
}

/* basic: 3 allocations of 1 MiB at site_alpha (2 freed), 2 of 4 KiB at
 * site_beta (both freed), one failed 2 TiB request, kernels "k_one" x2. */
static void basic(void) {
    uint64_t a[3];
    for (int i = 0; i < 3; i++) a[i] = site_alpha(1 << 20);
    uint64_t b0 = site_beta(4096), b1 = site_beta(4096);
    if (site_too_big() != 2) exit(11);
    fake_kernel("k_one");
    fake_kernel("k_one");
    fake_cuMemFree(a[0], 1 << 20);
    fake_cuMemFree(a[1], 1 << 20);
    fake_cuMemFree(b0, 4096);
    fake_cuMemFree(b1, 4096);
}

NOINLINE void *thread_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) {
        uint64_t p = site_alpha(256);
        fake_cuMemFree(p, 256);
    }
    return NULL;
}

NOINLINE void *io_worker(void *arg) {
    (void)arg;
    nvtxRangePushA("io");
    uint64_t p = site_alpha(256 << 10);
    fake_cuMemFree(p, 256 << 10);
    nvtxRangePop();
    return NULL;
}

struct epoch { nvtxDomainHandle_t domain; nvtxRangeId_t id; };

NOINLINE void *epoch_ender(void *arg) {
    struct epoch *e = arg;
    nvtxDomainRangeEnd(e->domain, e->id);
    return NULL;
}

/* nvtx: ranges and marks as NVTX3 programs make them. A range pushed before
 * CUDA started ("before_cuda", not recorded); 8 iterations of a pushed
 * "step" holding a pushed "forward" (keeps 2 MiB at site_alpha, frees a
 * 1 MiB temporary of site_beta) and "backward" (frees forward's 2 MiB and
 * keeps 1 MiB at site_beta, for good); a started range "epoch" of the
 * domain "trainer", named by a registered string, around them all and
 * ended by another thread; a thread's own pushed "io" (256 KiB made and
 * freed); marks "begin" (text) and "done" (wide text, in "trainer").
 * Prints what the first iteration's pushes and pop returned. */
static int nvtx_scenario(void) {
    /* What NVTX's calls return (the tool's answers; -2 with no tool). */
    printf("before_cuda popped at %d\n", nvtxRangePop());
    nvtxMarkA("begin");
    nvtxDomainHandle_t trainer = nvtxDomainCreateA("trainer");
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = nvtxDomainRegisterStringA(trainer, "epoch");
    struct epoch e = {trainer, nvtxDomainRangeStartEx(trainer, &a)};
    pthread_t io;
    pthread_create(&io, NULL, io_worker, NULL);
    pthread_join(io, NULL);
    for (int i = 0; i < 8; i++) {
        int step = nvtxRangePushA("step");
        int forward = nvtxRangePushA("forward");
        uint64_t activation = site_alpha(2 << 20);
        uint64_t temporary = site_beta(1 << 20);
        fake_cuMemFree(temporary, 1 << 20);
        nvtxRangePop();
        nvtxRangePushA("backward");
        fake_cuMemFree(activation, 2 << 20);
        site_beta(1 << 20); /* kept for good */
        nvtxRangePop();
        int popped = nvtxRangePop();
        if (i == 0) printf("depths: step %d, forward %d, step popped at %d\n", step, forward, popped);
    }
    pthread_t ender;
    pthread_create(&ender, NULL, epoch_ender, &e);
    pthread_join(ender, NULL);
    a.messageType = NVTX_MESSAGE_TYPE_UNICODE;
    a.message.unicode = L"done";
    nvtxDomainMarkEx(trainer, &a);
    return 0;
}

static volatile sig_atomic_t got_signal;
static void on_signal(int s) { got_signal = s; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "basic";
    if (!strcmp(mode, "nvtx")) nvtxRangePushA("before_cuda");
    if (fake_cuInit() < 0) return 20;
    if (!strcmp(mode, "nvtx")) return nvtx_scenario();
    if (!strcmp(mode, "nvtx_bench")) {
        /* ns per NVTX push and pop pair, measured inside the program. */
        long n = argc > 2 ? atol(argv[2]) : 100000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) {
            nvtxRangePushA("bench");
            nvtxRangePop();
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("%.1f ns per push+pop\n", ns / n);
        return 0;
    }
    if (!strcmp(mode, "basic")) {
        basic();
        return argc > 2 ? atoi(argv[2]) : 0;
    }
    if (!strcmp(mode, "streams")) {
        /* k_s twice on a stream, which is then destroyed; twice on the
         * stream created next, which gets the same handle; twice on the
         * default stream. Prints how often CUPTI was asked for a stream id. */
        void *first = fake_cuStreamCreate();
        fake_kernel_on(first, "k_s");
        fake_kernel_on(first, "k_s");
        fake_cuStreamDestroy(first);
        void *second = fake_cuStreamCreate();
        if (second != first) return 12;
        fake_kernel_on(second, "k_s");
        fake_kernel_on(second, "k_s");
        fake_kernel("k_s");
        fake_kernel("k_s");
        printf("stream id lookups: %u\n", fake_stream_id_calls());
        return 0;
    }
    if (!strcmp(mode, "renamed")) {
        /* Kernels whose names CUPTI hands over at the same address (a module
         * unloaded and another loaded in its place): two that differ early,
         * then, after an unload, two long ones that differ only late (as
         * PyTorch's mangled names do). */
        static char name[400];
        strcpy(name, "k_first");
        fake_kernel(name);
        strcpy(name, "k_second");
        fake_kernel(name);
        memset(name, 'x', 300);
        name[300] = 0;
        name[250] = '1';
        fake_kernel(name);
        fake_cuModuleUnload();
        name[250] = '2';
        fake_kernel(name);
        return 0;
    }
    if (!strcmp(mode, "functions")) {
        /* Launches that name their function, as every driver launch call
         * does: two functions whose names CUPTI hands over at the same
         * address, each launched twice; then, after an unload, a new
         * function at the first one's handle with a name at that address. */
        static char name[64];
        void *alpha = (void *)(uintptr_t)0xf000, *beta = (void *)(uintptr_t)0xf100;
        strcpy(name, "k_alpha");
        fake_kernel_fn(NULL, alpha, name);
        strcpy(name, "k_beta");
        fake_kernel_fn(NULL, beta, name);
        strcpy(name, "k_alpha");
        fake_kernel_fn(NULL, alpha, name);
        strcpy(name, "k_beta");
        fake_kernel_fn(NULL, beta, name);
        fake_cuModuleUnload();
        strcpy(name, "k_gamma");
        fake_kernel_fn(NULL, alpha, name);
        return 0;
    }
    if (!strcmp(mode, "two_devices")) {
        /* 2 MiB on device 1, then 1 MiB on device 0, then a 2 TiB request
         * that fails on device 1: the failure is device 1's, though the
         * process's last allocation was on device 0. */
        fake_cuSetDevice(1);
        site_alpha(2 << 20);
        fake_cuSetDevice(0);
        site_beta(1 << 20);
        fake_cuSetDevice(1);
        if (site_too_big() != 2) exit(11);
        return 0;
    }
    if (!strcmp(mode, "ipc")) {
        /* 2 MiB of its own, and 64 MiB another process shared (CUDA IPC)
         * mapped while it is held: the process's memory is its 2 MiB. */
        uint64_t own = site_alpha(2 << 20);
        uint64_t shared = 0;
        if (fake_cuIpcOpenMemHandle(&shared, 64 << 20)) exit(11);
        usleep(20 * 1000);
        fake_cuIpcCloseMemHandle(shared, 64 << 20);
        fake_cuMemFree(own, 2 << 20);
        return 0;
    }
    if (!strcmp(mode, "device_view")) {
        /* 3 MiB live when a 2 TiB request fails, after the collector has
         * had time to flush (and so to know the device): see fake_nvml.c. */
        for (int i = 0; i < 3; i++) site_alpha(1 << 20);
        usleep(300 * 1000);
        if (site_too_big() != 2) exit(11);
        usleep(100 * 1000);
        return 0;
    }
    if (!strcmp(mode, "threads")) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, thread_worker, NULL);
        for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        basic();
        pid_t c = fork();
        if (c == 0) exit(0); /* runs inherited atexit handlers */
        int st;
        waitpid(c, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 30;
    }
    if (!strcmp(mode, "shared")) {
        /* Two processes on the 80 GiB device 0 at once: the parent holds
         * 30 GiB while an exec'ed child allocates 20 GiB ("hold20"). */
        site_alpha(30ull << 30);
        pid_t c = fork();
        if (c == 0) {
            execl("/proc/self/exe", argv[0], "hold20", (char *)NULL);
            _exit(127);
        }
        int st;
        waitpid(c, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 30;
    }
    if (!strcmp(mode, "hold20")) {
        site_beta(20ull << 30);
        return 0;
    }
    if (!strcmp(mode, "exec")) {
        site_beta(8192);
        pid_t c = fork();
        if (c == 0) {
            execl("/proc/self/exe", argv[0], "basic", (char *)NULL);
            _exit(127);
        }
        int st;
        waitpid(c, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 30;
    }
    if (!strcmp(mode, "forever")) {
        /* Logs "i ns address" per allocation to argv[2] until killed. */
        FILE *log = fopen(argv[2], "w");
        for (long i = 0;; i++) {
            uint64_t p = site_alpha(1 << 20);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            fprintf(log, "%ld %lld %llx\n", i, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, (unsigned long long)p);
            fflush(log);
            usleep(10000);
        }
    }
    if (!strcmp(mode, "signal")) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        site_alpha(1 << 20);
        printf("ready\n");
        fflush(stdout);
        while (!got_signal) pause();
        return 40 + got_signal;
    }
    if (!strcmp(mode, "steps")) {
        /* 10 steps marked with gmem_prof_mark_step: each keeps 1 MiB at
         * site_alpha and frees 4 MiB it made at site_beta; step 5 also
         * fails a 2 TiB request. Prints each step's number. */
        for (int i = 0; i < 10; i++) {
            uint64_t temporary = site_beta(4 << 20);
            site_alpha(1 << 20);
            if (i == 4 && site_too_big() != 2) return 11;
            fake_cuMemFree(temporary, 4 << 20);
            printf("%llu ", (unsigned long long)gmem_prof_mark_step());
        }
        printf("\n");
        return 0;
    }
    if (!strcmp(mode, "step_bench")) {
        /* ns per step marked, measured inside the program. */
        long n = argc > 2 ? atol(argv[2]) : 100000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) gmem_prof_mark_step();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("%.1f ns per step\n", ns / n);
        return 0;
    }
    if (!strcmp(mode, "echo")) {
        char line[256];
        site_alpha(1 << 20);
        if (fgets(line, sizeof line, stdin)) printf("echo: %s", line);
        fprintf(stderr, "to stderr\n");
        return 0;
    }
    if (!strcmp(mode, "bench")) {
        /* ns per allocation+free pair, measured inside the program. */
        long n = argc > 2 ? atol(argv[2]) : 200000;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) {
            uint64_t p = site_alpha(256);
            fake_cuMemFree(p, 256);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("%.1f ns per alloc+free\n", ns / n);
        return 0;
    }
    if (!strcmp(mode, "launch_bench")) {
        /* ns per kernel launch, measured inside the program: launches of
         * kernels with names as long as PyTorch's, in turn, on one stream,
         * each naming its function as the driver's launch calls do.
         * Optionally KiB written between launches (a framework's own work,
         * which leaves the collector's data out of the caches) and how many
         * kernels take turns (8; a resnet50 step launches ~150 kinds). */
        long n = argc > 2 ? atol(argv[2]) : 200000;
        size_t sweep = argc > 3 ? (size_t)atol(argv[3]) << 10 : 0;
        int kinds = argc > 4 ? atoi(argv[4]) : 8;
        if (kinds < 1) kinds = 1;
        char **names = malloc(sizeof(char *) * (size_t)kinds);
        for (int k = 0; k < kinds; k++) {
            names[k] = malloc(300);
            memset(names[k], 'a' + k % 26, 299);
            snprintf(names[k] + 280, 20, "%d", k);
            names[k][299] = 0;
        }
        char *buffer = malloc(sweep ? sweep : 1);
        void *s = fake_cuStreamCreate();
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) {
            if (sweep) memset(buffer, (int)i, sweep);
            fake_kernel_fn(s, (void *)(uintptr_t)(0x10000 + 16 * (i % kinds)), names[i % kinds]);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("%.1f ns per launch\n", ns / n);
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
