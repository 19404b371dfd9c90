// A stand-in for the part of PyTorch's libtorch_cuda.so the collector
// looks up: the function that gives cuBLASLt its workspace from the
// caching allocator, once, kept for the process's life, as torch's
// `at::cuda::getCUDABlasLtWorkspace` does (its mangled name holds the same
// identifier), and a matmul that asks for it before its output tensor.
// What real PyTorch does is tested on the GPU machine (tests/gpu).
#include <cstddef>
#include <cstdint>

namespace at {
namespace cuda {
// A real call (not a tail call): its return address stays on the stack
// while the allocator runs, as in torch.
__attribute__((visibility("default"), noinline)) void *getCUDABlasLtWorkspace(
    uint64_t (*malloc_fn)(size_t)) {
  static uint64_t workspace = 0;
  if (workspace == 0) {
    workspace = malloc_fn(1 << 20);
    asm volatile("" ::: "memory");
  }
  return reinterpret_cast<void *>(workspace);
}
}  // namespace cuda
}  // namespace at

extern "C" {
// `bytes` of output through `malloc_fn` (the stand-in allocator's
// fake_torch_malloc), after the workspace.
uint64_t fake_blas_matmul(uint64_t (*malloc_fn)(size_t), size_t bytes) {
  at::cuda::getCUDABlasLtWorkspace(malloc_fn);
  uint64_t out = malloc_fn(bytes);
  asm volatile("" ::: "memory");
  return out;
}
}
