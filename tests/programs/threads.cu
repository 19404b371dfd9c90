// threads.cu — 8 threads allocate at once: each makes 2100 allocations of
// 64 KiB and frees 2000 of them (100 leaked per thread). Nothing may be lost.
//
// expect: exit=0
// expect: site=thread_worker kind=device allocs=16800 bytes=1101004800 freed=16000 leaked=800 leaked_bytes=52428800
// expect: dropped=0
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void thread_worker(int id) {
    std::vector<void *> mine;
    for (int i = 0; i < 2100; i++) {
        void *p;
        if (cudaMalloc(&p, 64 << 10) != cudaSuccess) { fprintf(stderr, "thread %d: malloc failed\n", id); exit(1); }
        mine.push_back(p);
        // Keep a few live at a time so frees interleave with allocations.
        if (mine.size() > 4 && i < 2004) { cudaFree(mine.front()); mine.erase(mine.begin()); }
    }
    // 2100 - 2000 freed so far; free until exactly 2000 frees in total.
    size_t freed = 2100 - mine.size();
    while (freed < 2000) { cudaFree(mine.back()); mine.pop_back(); freed++; }
}

int main() {
    cudaFree(0);
    std::vector<std::thread> ts;
    for (int i = 0; i < 8; i++) ts.emplace_back(thread_worker, i);
    for (auto &t : ts) t.join();
    printf("threads: done\n");
    return 0;
}
