// A stand-in for PyTorch's libc10_cuda.so, for testing how the collector
// attaches to the CUDA caching allocator on machines without a GPU (CI).
//
// It declares the same classes, in the same namespaces, with the same
// method signatures as torch 2.11 (so the mangled names, the vtable check
// and the std::function ABI are the real ones), and a tiny allocator behind
// them: segments come from the fake driver (fake_cupti.c) and blocks are
// handed out from them as the real allocator reports them (alloc, free
// requested and completed, segment alloc and free, OOM with its observer).
// It tests our plumbing; what real PyTorch does is tested on the GPU
// machine (tests/gpu).
#include <chrono>
#include <thread>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

extern "C" uint32_t fake_cuMemAlloc(uint64_t *dptr, size_t bytes);
extern "C" uint32_t fake_cuMemFree(uint64_t dptr, size_t bytes);
extern "C" uint32_t fake_cuMemGetInfo(size_t *free, size_t *total);
extern "C" uint32_t fake_cuMemcpyHtoD(uint64_t dst, const void *src, size_t bytes);
extern "C" uint32_t fake_cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, void *stream);

namespace c10 {
struct GatheredContext {
  virtual ~GatheredContext() = default;
};
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
using DeviceIndex = int8_t;

namespace CachingDeviceAllocator {
// torch 2.11's TraceEntry (c10/core/CachingDeviceAllocator.h).
struct TraceEntry {
  enum Action {
    ALLOC,
    FREE_REQUESTED,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    SNAPSHOT,
    OOM
  };
  TraceEntry(Action action, DeviceIndex device, size_t addr, size_t size, void *stream,
             MempoolId_t mempool, uint64_t time)
      : action_(action), device_(device), addr_(addr), stream_(stream), size_(size),
        mempool_(std::move(mempool)), time_(time) {}
  Action action_;
  DeviceIndex device_;
  size_t addr_;
  std::shared_ptr<GatheredContext> context_;
  void *stream_{};
  size_t size_;
  MempoolId_t mempool_;
  uint64_t time_{};
  std::string compile_context_;
  std::string user_metadata_;
};
using AllocatorTraceTracker = std::function<void(const TraceEntry &)>;
} // namespace CachingDeviceAllocator

namespace cuda::CUDACachingAllocator {
using c10::CachingDeviceAllocator::AllocatorTraceTracker;
using c10::CachingDeviceAllocator::TraceEntry;
using OutOfMemoryObserver =
    std::function<void(int64_t device, size_t allocated, size_t device_total, size_t device_free)>;

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual bool initialized() = 0;
  virtual void attachOutOfMemoryObserver(OutOfMemoryObserver observer) = 0;
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
};

__attribute__((visibility("default"))) std::atomic<CUDAAllocator *> allocator;

namespace Native {
class NativeCachingAllocator : public CUDAAllocator {
 public:
  bool initialized() override { return ready; }
  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override {
    observers.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
    // As the real one: a copy per device.
    for (int d = 0; d < 2; d++) trackers.push_back(tracker);
  }

  // A tensor's block, as `fake_torch_malloc` (an alias: the same code under
  // both names). torch's returns a DataPtr; the mangled name is the same,
  // and the collector finds who asked for a block past this frame.
  __attribute__((visibility("default"))) static uint64_t allocate(unsigned long size);

  void trace(TraceEntry::Action action, size_t addr, size_t size) {
    TraceEntry te(action, 0, addr, size, (void *)0x11, {0, 0}, 0);
    // One device's trackers (the first copy of each).
    for (size_t i = 0; i < trackers.size(); i += 2) trackers[i](te);
  }

  bool ready = false;
  std::vector<OutOfMemoryObserver> observers;
  std::vector<AllocatorTraceTracker> trackers;
  // Segments by address: (size, bytes handed out so far).
  std::map<uint64_t, std::pair<size_t, size_t>> segments;
  std::map<uint64_t, size_t> blocks;
};
} // namespace Native

// The cudaMallocAsync backend (FAKE_TORCH_BACKEND=cudaMallocAsync): as
// torch's, a tensor the memory fraction does not allow is refused before any
// CUDA allocation, asking CUDA only for the free memory, for its message.
namespace CudaMallocAsync {
struct CudaMallocAsyncAllocator : public CUDAAllocator {
  bool initialized() override { return true; }
  void attachOutOfMemoryObserver(OutOfMemoryObserver) override {}
  void attachAllocatorTraceTracker(AllocatorTraceTracker) override {}
};

namespace {
std::vector<size_t> pytorch_used_bytes(1);
std::vector<size_t> pytorch_memory_limits(1, SIZE_MAX);

// Returns 2 (out of memory) for a tensor over the fraction.
__attribute__((noinline)) uint32_t mallocAsync(void **devPtr, c10::DeviceIndex device, size_t size,
                                               struct CUstream_st *stream) {
  (void)stream;
  if (pytorch_used_bytes[device] + size > pytorch_memory_limits[device]) {
    size_t device_free = 0, device_total = 0;
    fake_cuMemGetInfo(&device_free, &device_total);
    return 2;
  }
  uint64_t p = 0;
  uint32_t err = fake_cuMemAlloc(&p, size);
  if (err == 0) {
    *devPtr = (void *)p;
    pytorch_used_bytes[device] += size;
  }
  return err;
}
} // namespace
} // namespace CudaMallocAsync
} // namespace cuda::CUDACachingAllocator
} // namespace c10

using c10::cuda::CUDACachingAllocator::TraceEntry;
using c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator;

static NativeCachingAllocator *native() {
  return static_cast<NativeCachingAllocator *>(c10::cuda::CUDACachingAllocator::allocator.load());
}

extern "C" {
// torch creates its allocator at load time and initializes it lazily.
__attribute__((constructor)) static void create() {
  using namespace c10::cuda::CUDACachingAllocator;
  const char *backend = getenv("FAKE_TORCH_BACKEND");
  if (backend && strcmp(backend, "cudaMallocAsync") == 0) {
    allocator.store(new CudaMallocAsync::CudaMallocAsyncAllocator());
  } else {
    allocator.store(new NativeCachingAllocator());
  }
}

static bool async_backend() {
  return dynamic_cast<c10::cuda::CUDACachingAllocator::CudaMallocAsync::CudaMallocAsyncAllocator *>(
             c10::cuda::CUDACachingAllocator::allocator.load()) != nullptr;
}

// torch.cuda.set_per_process_memory_fraction, as the cudaMallocAsync backend
// keeps it: bytes per device.
void fake_torch_set_limit(size_t bytes) {
  c10::cuda::CUDACachingAllocator::CudaMallocAsync::pytorch_memory_limits[0] = bytes;
}

void fake_torch_init(void) {
  if (!async_backend()) native()->ready = true;
}

// With FAKE_TORCH_REUSE set (benchmarks: a long loop then holds its
// segments, as the real allocator does), a freed block of the same rounded
// size is handed out again first.
static std::multimap<size_t, uint64_t> &freed_blocks() {
  static std::multimap<size_t, uint64_t> freed;
  return freed;
}
static bool reuse() {
  static const bool on = getenv("FAKE_TORCH_REUSE") != nullptr;
  return on;
}

uint64_t fake_torch_malloc(size_t size)
    __attribute__((alias("_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator8allocateEm")));
}

// Blocks of `size` (rounded up to 512) from 20 MiB segments; a request that
// does not fit in the last segment gets a new one.
__attribute__((noinline)) uint64_t NativeCachingAllocator::allocate(unsigned long size) {
  if (async_backend()) {
    void *p = nullptr;
    return c10::cuda::CUDACachingAllocator::CudaMallocAsync::mallocAsync(&p, 0, size, nullptr) == 0
               ? (uint64_t)p
               : 0;
  }
  NativeCachingAllocator *a = native();
  size_t rounded = (size + 511) / 512 * 512;
  if (reuse()) {
    auto it = freed_blocks().find(rounded);
    if (it != freed_blocks().end()) {
      uint64_t p = it->second;
      freed_blocks().erase(it);
      a->blocks[p] = size;
      a->trace(TraceEntry::ALLOC, p, size);
      return p;
    }
  }
  for (auto &s : a->segments) {
    if (s.second.first - s.second.second >= rounded) {
      uint64_t p = s.first + s.second.second;
      s.second.second += rounded;
      a->blocks[p] = size;
      a->trace(TraceEntry::ALLOC, p, size);
      return p;
    }
  }
  size_t seg = rounded > (20u << 20) ? rounded : (20u << 20);
  uint64_t base = 0;
  if (fake_cuMemAlloc(&base, seg) != 0) return 0;
  a->trace(TraceEntry::SEGMENT_ALLOC, base, seg);
  a->segments[base] = {seg, rounded};
  a->blocks[base] = size;
  a->trace(TraceEntry::ALLOC, base, size);
  return base;
}

extern "C" {

void fake_torch_free(uint64_t p) {
  NativeCachingAllocator *a = native();
  auto it = a->blocks.find(p);
  if (it == a->blocks.end()) return;
  a->trace(TraceEntry::FREE_REQUESTED, p, it->second);
  a->trace(TraceEntry::FREE_COMPLETED, p, it->second);
  if (reuse()) freed_blocks().emplace((it->second + 511) / 512 * 512, p);
  a->blocks.erase(it);
}

// A tensor's copy_(): from the host when `src` is 0 (a CPU tensor's
// .to("cuda"): cudaMemcpyAsync, which calls cuMemcpyAsync; with `htod`,
// cuMemcpyHtoD as cudaMemcpy does), else from the device tensor at `src`.
void fake_torch_copy(uint64_t dst, uint64_t src, size_t bytes, int htod) {
  static const char host[64] = {0};
  if (src == 0 && htod) {
    fake_cuMemcpyHtoD(dst, host, bytes);
    return;
  }
  fake_cuMemcpyAsync(dst, src != 0 ? src : (uint64_t)host, bytes, nullptr);
}

// Call paths for `fake_torch_bench_native`: at each level one of two
// functions, chosen by a bit of the path's number, so that each path has
// its own return addresses in its innermost frames and shares the outer
// ones (as the ops of PyTorch's autograd thread do under its engine).
static __attribute__((noinline)) void path_b(int depth, unsigned path);
static __attribute__((noinline)) void path_a(int depth, unsigned path) {
  if (depth == 0) {
    fake_torch_free(fake_torch_malloc(4096));
    return;
  }
  ((path >> (depth % 16)) & 1 ? path_b : path_a)(depth - 1, path);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays
}
static __attribute__((noinline)) void path_b(int depth, unsigned path) {
  if (depth == 0) {
    fake_torch_free(fake_torch_malloc(4096));
    return;
  }
  ((path >> (depth % 16)) & 1 ? path_a : path_b)(depth - 1, path);
  asm volatile("" ::: "memory");
}

// ns per tensor allocated and freed on a thread that runs no Python (its
// events take native stacks), from `paths` call paths `depth` frames deep
// in turn.
double fake_torch_bench_native(long n, unsigned paths, int depth) {
  double ns = 0;
  std::thread t([&] {
    for (unsigned p = 0; p < paths; p++) path_a(depth, p);  // warm up
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < n; i++) path_a(depth, (unsigned)(i % paths));
    auto t1 = std::chrono::steady_clock::now();
    ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
  });
  t.join();
  return ns;
}

// Gives every segment back to the driver (blocks still in them included:
// the stand-in does not check).
void fake_torch_empty_cache(void) {
  NativeCachingAllocator *a = native();
  for (auto &s : a->segments) {
    a->trace(TraceEntry::SEGMENT_FREE, s.first, s.second.first);
    fake_cuMemFree(s.first, s.second.first);
  }
  a->segments.clear();
}

// torch.cuda.memory._snapshot(): a SNAPSHOT trace entry.
void fake_torch_snapshot(void) { native()->trace(TraceEntry::SNAPSHOT, 0, 0); }

// What the real allocator does when a request cannot be met: an OOM trace
// entry (address = free device memory), then its observers with
// (device, bytes it tried to obtain, the limit, free device memory).
void fake_torch_oom(size_t size, size_t limit, size_t device_free) {
  NativeCachingAllocator *a = native();
  size_t rounded = (size + 511) / 512 * 512;
  a->trace(TraceEntry::OOM, device_free, rounded);
  for (auto &o : a->observers) o(0, rounded, limit, device_free);
}
}
