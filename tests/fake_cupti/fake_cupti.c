/* A stand-in for libcupti.so.13 and the CUDA driver, for testing the
 * collector and `gmem-prof record` on machines without a GPU (CI).
 *
 * It implements the CUPTI functions the collector calls, with CUPTI 13.0's
 * record layouts for the fields the collector reads, and "driver" entry
 * points (fake_cuMemAlloc, ...) that raise the same callbacks and activity
 * records CUPTI would. It tests our plumbing (injection, callbacks, buffers,
 * files, merging, exit codes, signals, fork, threads); it is not evidence of
 * what real CUDA does: the GPU tests under tests/gpu are.
 *
 * The record layouts it writes are those of every CUPTI 12.0 to 13.5 for
 * the fields the collector reads (the same offsets in all of them:
 * collector/layouts/cupti.json), so one stand-in serves every release:
 *
 * Knobs: FAKE_CUPTI_VERSION (API version to report, default 130001: 22 is
 * CUPTI 12.4, 28 12.9, 130401 13.4), FAKE_CUPTI_TAKEN=1 (another client,
 * "Nsight Systems", holds CUPTI: subscribing fails), FAKE_CUPTI_SHARES=1
 * (that client lets others subscribe: cuptiSubscribe_v2 succeeds when
 * asked to share), FAKE_CUPTI_DROPPED=N (CUPTI reports N activity records
 * dropped), FAKE_DRIVER_CUDA (the CUDA version cuDriverGetVersion reports,
 * default 13000). Against the driver it plays what was measured on the H100
 * with driver 580 (CUDA 13.0): CUPTI 13.1, 13.4 and 13.5 subscribe (a newer
 * minor of the driver's CUDA), but 13.4 and 13.5 asked to share answer
 * MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED naming no holder, so a CUPTI newer
 * than the driver here refuses to share; a CUPTI of a newer CUDA major than
 * the driver's is refused outright.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*api_cb)(void *, uint32_t, uint32_t, const void *);
typedef void (*buf_req)(uint8_t **, size_t *, size_t *);
typedef void (*buf_done)(void *, uint32_t, uint8_t *, size_t, size_t);

/* CUpti_CallbackData (cupti_callbacks.h), natural C layout. */
typedef struct {
    uint32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} CallbackData;

/* CUpti_ActivityMemory4 (CUPTI 13.0). */
typedef struct {
    uint32_t kind, memoryOperationType, memoryKind, correlationId;
    uint64_t address, bytes, timestamp, PC;
    uint32_t processId, deviceId, contextId, streamId;
    const char *name;
    uint32_t isAsync, pad1;
    uint32_t memoryPoolType, pad2;
    uint64_t poolAddress, releaseThreshold, poolSize, utilizedSize;
    const char *source;
} Memory4;

/* The leading fields of CUpti_ActivityKernel10 (CUPTI 13.0). */
typedef struct {
    uint32_t kind;
    uint8_t cacheConfig, sharedMemoryConfig;
    uint16_t registersPerThread;
    uint32_t partitionedGlobalCacheRequested, partitionedGlobalCacheExecuted;
    uint64_t start, end, completed;
    uint32_t deviceId, contextId, streamId;
    int32_t gridX, gridY, gridZ, blockX, blockY, blockZ;
    int32_t staticSharedMemory, dynamicSharedMemory;
    uint32_t localMemoryPerThread, localMemoryTotal, correlationId;
    int64_t gridId;
    const char *name;
} Kernel10;

/* CUpti_ActivityDevice5 (CUPTI 13.0), the fields the collector reads at
 * their offsets (184 bytes in all). */
typedef struct {
    uint8_t bytes[184];
} Device5;
enum {
    DEV_KIND = 0, DEV_GLOBAL_MEMORY = 16, DEV_MULTIPROCESSORS = 44, DEV_MAJOR = 104,
    DEV_MINOR = 108, DEV_ID = 112, DEV_UUID = 120, DEV_NAME = 136
};

#define SLOT 256 /* every fake record takes one slot in a buffer */
#define MAX_QUEUED 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static api_cb callback;
static void *callback_userdata;
static int enabled_cbids[1024];
static buf_req requested;
static buf_done completed;
static uint8_t queue[MAX_QUEUED][SLOT];
static size_t queued;
static uint64_t dropped;
static uint32_t next_corr = 1;
static uint64_t next_addr = 0x7f0000000000ull;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

uint32_t cuptiGetVersion(uint32_t *v) {
    const char *e = getenv("FAKE_CUPTI_VERSION");
    *v = e ? (uint32_t)atoi(e) : 130001;
    return 0;
}
uint32_t cuptiGetResultString(uint32_t r, const char **s) { *s = r == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "fake CUPTI error"; return 0; }
static int knob(const char *name) {
    const char *v = getenv(name);
    return v && *v == '1';
}
/* The driver's CUDA version, which needs no initialization. */
int cuDriverGetVersion(int *v) {
    const char *e = getenv("FAKE_DRIVER_CUDA");
    *v = e ? atoi(e) : 13000;
    return 0;
}
static uint32_t subscribe(void **sub, api_cb cb, void *ud, int share);
uint32_t cuptiSubscribe(void **sub, api_cb cb, void *ud) { return subscribe(sub, cb, ud, 0); }
/* CUpti_SubscriberParams: structSize, subscriberName, oldSubscriberName,
 * oldSubscriberSize, then (CUPTI 13.2 and later) allowMultipleSubscribers. */
typedef struct {
    size_t structSize;
    const char *subscriberName;
    char *oldSubscriberName;
    size_t oldSubscriberSize;
    uint8_t allowMultipleSubscribers;
} SubscriberParams;
uint32_t cuptiSubscribe_v2(void **sub, api_cb cb, void *ud, SubscriberParams *p) {
    int share = p && p->structSize >= sizeof(SubscriberParams) && p->allowMultipleSubscribers;
    if (p && p->oldSubscriberName && p->oldSubscriberSize > 0 && knob("FAKE_CUPTI_TAKEN"))
        snprintf(p->oldSubscriberName, p->oldSubscriberSize, "Nsight Systems");
    return subscribe(sub, cb, ud, share);
}
/* The CUDA version of the CUPTI release this stand-in plays (12040 for API
 * version 22, 13040 for 130401). */
static int release_cuda(void) {
    uint32_t api;
    cuptiGetVersion(&api);
    if (api >= 10000) return (int)(api / 10000 * 1000 + api / 100 % 100 * 10);
    static const int cu12[][2] = {{18, 12000}, {20, 12020}, {21, 12030}, {22, 12040},
                                  {23, 12050}, {24, 12060}, {26, 12080}, {28, 12090}};
    for (size_t i = 0; i < sizeof cu12 / sizeof cu12[0]; i++)
        if (cu12[i][0] == (int)api) return cu12[i][1];
    return 12000;
}
static uint32_t subscribe(void **sub, api_cb cb, void *ud, int share) {
    int driver, release = release_cuda();
    cuDriverGetVersion(&driver);
    if (release / 1000 > driver / 1000) return 999; /* a driver of an older CUDA major */
    if (share && release > driver) return 39; /* as 13.4 and 13.5 on a 13.0 driver */
    if (knob("FAKE_CUPTI_TAKEN") && !(share && knob("FAKE_CUPTI_SHARES"))) return 39;
    /* As a real CUPTI does when its buffers fill under load. */
    const char *d = getenv("FAKE_CUPTI_DROPPED");
    if (d) dropped = (uint64_t)atoll(d);
    callback = cb;
    callback_userdata = ud;
    *sub = (void *)1;
    return 0;
}
static int enabled_resource_cbids[32];
uint32_t cuptiEnableCallback(uint32_t enable, void *sub, uint32_t domain, uint32_t cbid) {
    (void)sub;
    if (domain == 1 && cbid < 1024) enabled_cbids[cbid] = (int)enable;
    if (domain == 3 && cbid < 32) enabled_resource_cbids[cbid] = (int)enable;
    return 0;
}
static int kernel_activity; /* CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL enabled */
uint32_t cuptiActivityEnable(uint32_t kind) {
    if (kind == 10) kernel_activity = 1;
    return 0;
}
uint32_t cuptiActivityRegisterCallbacks(buf_req r, buf_done d) { requested = r; completed = d; return 0; }
uint32_t cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, void **rec) {
    uint8_t *next = *rec ? (uint8_t *)*rec + SLOT : buf;
    if (next + SLOT > buf + valid) return 3; /* CUPTI_ERROR_MAX_LIMIT_REACHED-like end */
    *rec = next;
    return 0;
}
uint32_t cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&lock);
    while (queued > 0 && requested && completed) {
        uint8_t *buf = NULL;
        size_t size = 0, max = 0;
        requested(&buf, &size, &max);
        if (!buf) { dropped += queued; queued = 0; break; }
        size_t n = size / SLOT < queued ? size / SLOT : queued;
        memcpy(buf, queue, n * SLOT);
        memmove(queue, queue[n], (queued - n) * SLOT);
        queued -= n;
        completed(NULL, 0, buf, size, n * SLOT);
    }
    pthread_mutex_unlock(&lock);
    return 0;
}
uint32_t cuptiActivityGetNumDroppedRecords(void *ctx, uint32_t s, size_t *n) { (void)ctx; (void)s; *n = dropped; dropped = 0; return 0; }
uint32_t cuptiActivityGetAttribute(uint32_t attr, size_t *size, void *value) {
    (void)size;
    *(size_t *)value = attr == 0 ? (3u << 20) : 2;
    return 0;
}
uint32_t cuptiGetTimestamp(uint64_t *t) { *t = now_ns(); return 0; }

/* Queues an activity record; a full queue is delivered first, as CUPTI
 * hands over a full buffer. */
static void enqueue(const void *rec, size_t len) {
    pthread_mutex_lock(&lock);
    if (!requested || !completed) {
        /* No client took CUPTI's buffers (the program runs with no
         * collector): CUPTI records nothing, and a full queue would wait
         * for a flush forever. */
        pthread_mutex_unlock(&lock);
        return;
    }
    while (queued == MAX_QUEUED) {
        pthread_mutex_unlock(&lock);
        cuptiActivityFlushAll(0);
        pthread_mutex_lock(&lock);
    }
    memset(queue[queued], 0, SLOT);
    memcpy(queue[queued], rec, len);
    queued++;
    pthread_mutex_unlock(&lock);
}

/* ---- the fake driver ---------------------------------------------------- */

/* The calling thread's current device (cuCtxSetCurrent's effect): its
 * context is the pointer device + 1, which cuptiGetDeviceId maps back. */
static __thread uint32_t current_device;
void fake_cuSetDevice(uint32_t device) { current_device = device; }
uint32_t cuptiGetDeviceId(void *context, uint32_t *id) {
    if (!context) return 1;
    *id = (uint32_t)((uintptr_t)context - 1);
    return 0;
}

enum { CB_MEM_ALLOC = 243, CB_MEM_FREE = 245 };

struct alloc_params { uint64_t *dptr; size_t bytesize; };
struct free_params { uint64_t dptr; };

static void raise_call(uint32_t cbid, uint32_t corr, const void *params, uint32_t *ret, uint32_t site) {
    if (!callback || !enabled_cbids[cbid]) return;
    static __thread uint64_t corr_data;
    CallbackData d = {0};
    d.callbackSite = site;
    d.functionName = cbid == CB_MEM_ALLOC ? "cuMemAlloc_v2" : "cuMemFree_v2";
    d.functionParams = params;
    d.functionReturnValue = site == 1 ? ret : NULL;
    d.correlationData = &corr_data;
    d.correlationId = corr;
    d.context = (void *)(uintptr_t)(current_device + 1);
    callback(callback_userdata, 1, cbid, &d);
}

static void memory_record(int alloc, uint64_t addr, uint64_t bytes, uint32_t corr) {
    Memory4 m = {0};
    m.kind = 49;
    m.memoryOperationType = alloc ? 1 : 2;
    m.memoryKind = 3;
    m.correlationId = corr;
    m.address = addr;
    m.bytes = bytes;
    m.timestamp = now_ns();
    m.deviceId = current_device;
    m.contextId = 1 + current_device;
    m.streamId = 7;
    enqueue(&m, sizeof m);
}

/* cuMemAlloc: fails with 2 (out of memory) above 1 TiB. */
uint32_t fake_cuMemAlloc(uint64_t *dptr, size_t bytes) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    struct alloc_params p = {dptr, bytes};
    uint32_t ret = 0;
    raise_call(CB_MEM_ALLOC, corr, &p, &ret, 0);
    if (bytes > (1ull << 40)) {
        ret = 2;
    } else {
        *dptr = __atomic_fetch_add(&next_addr, (bytes + 0xfff) & ~0xfffull, __ATOMIC_SEQ_CST);
    }
    raise_call(CB_MEM_ALLOC, corr, &p, &ret, 1);
    if (ret == 0) memory_record(1, *dptr, bytes, corr);
    return ret;
}

/* A call that gives `bytes` at `dptr` back (cuMemFree, cuIpcCloseMemHandle:
 * both take the pointer alone). */
static uint32_t release(uint32_t cbid, uint64_t dptr, size_t bytes) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    struct free_params p = {dptr};
    uint32_t ret = 0;
    raise_call(cbid, corr, &p, &ret, 0);
    raise_call(cbid, corr, &p, &ret, 1);
    memory_record(0, dptr, bytes, corr);
    return ret;
}

uint32_t fake_cuMemFree(uint64_t dptr, size_t bytes) { return release(CB_MEM_FREE, dptr, bytes); }

enum { CB_MEM_GET_INFO = 242 };
struct mem_get_info_params { size_t *free; size_t *total; };

/* cuMemGetInfo: 80 GiB of which `fake_free_bytes` free. */
static size_t fake_free_bytes = 60ull << 30;
uint32_t fake_cuMemGetInfo(size_t *free, size_t *total) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    struct mem_get_info_params p = {free, total};
    uint32_t ret = 0;
    raise_call(CB_MEM_GET_INFO, corr, &p, &ret, 0);
    *free = fake_free_bytes;
    *total = 80ull << 30;
    raise_call(CB_MEM_GET_INFO, corr, &p, &ret, 1);
    return ret;
}

enum { CB_MEMCPY_HTOD = 276, CB_MEMCPY_ASYNC = 306 };
struct htod_params { uint64_t dstDevice; const void *srcHost; size_t ByteCount; };
struct memcpy_async_params { uint64_t dst; uint64_t src; size_t ByteCount; void *hStream; };

/* A call that raises its callbacks and does nothing else (the fake
 * driver's memory is addresses only). */
static uint32_t call_only(uint32_t cbid, const void *params) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    uint32_t ret = 0;
    raise_call(cbid, corr, params, &ret, 0);
    raise_call(cbid, corr, params, &ret, 1);
    return ret;
}

/* cuMemcpyHtoD_v2, and cuMemcpyAsync (what cudaMemcpyAsync calls, as
 * PyTorch's copy of a CPU tensor to the device does). */
uint32_t fake_cuMemcpyHtoD(uint64_t dst, const void *src, size_t bytes) {
    struct htod_params p = {dst, src, bytes};
    return call_only(CB_MEMCPY_HTOD, &p);
}
uint32_t fake_cuMemcpyAsync(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
    struct memcpy_async_params p = {dst, src, bytes, stream};
    return call_only(CB_MEMCPY_ASYNC, &p);
}

enum { CB_IPC_OPEN = 567, CB_IPC_CLOSE = 330 };
struct ipc_open_params { uint64_t *pdptr; unsigned char handle[64]; unsigned flags; };

/* cuIpcOpenMemHandle: maps `bytes` another process allocated. As the real
 * CUPTI does, a Memory record describes the mapping, with correlation 0. */
uint32_t fake_cuIpcOpenMemHandle(uint64_t *dptr, size_t bytes) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    struct ipc_open_params p = {dptr, {0}, 1};
    uint32_t ret = 0;
    raise_call(CB_IPC_OPEN, corr, &p, &ret, 0);
    *dptr = __atomic_fetch_add(&next_addr, (bytes + 0xfff) & ~0xfffull, __ATOMIC_SEQ_CST);
    memory_record(1, *dptr, bytes, 0);
    raise_call(CB_IPC_OPEN, corr, &p, &ret, 1);
    return ret;
}

uint32_t fake_cuIpcCloseMemHandle(uint64_t dptr, size_t bytes) { return release(CB_IPC_CLOSE, dptr, bytes); }

enum { CB_LAUNCH_KERNEL = 307 };

/* cuLaunchKernel_params (cupti's generated_cuda_meta.h). */
struct launch_params {
    void *f;
    uint32_t grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
    void *stream;
    void **args, **extra;
};

/* Streams. As the driver may, a destroyed stream's handle goes to the next
 * stream created; CUPTI's id of each stream is new (from 20), and the
 * legacy default stream (NULL) is 7, as in memory records. */
#define MAX_STREAMS 8
static uint32_t stream_ids[MAX_STREAMS]; /* by handle slot; 0 = free */
static uint32_t next_stream_id = 20;
static uint32_t stream_id_calls;
static void *stream_handle(int slot) { return (void *)(uintptr_t)(0x5000 + 16 * slot); }

void *fake_cuStreamCreate(void) {
    pthread_mutex_lock(&lock);
    void *h = NULL;
    for (int i = 0; i < MAX_STREAMS && !h; i++) {
        if (!stream_ids[i]) {
            stream_ids[i] = next_stream_id++;
            h = stream_handle(i);
        }
    }
    pthread_mutex_unlock(&lock);
    return h;
}

/* cuStreamDestroy: CUPTI's resource callback (STREAM_DESTROY_STARTING)
 * first, when enabled. */
void fake_cuStreamDestroy(void *stream) {
    if (callback && enabled_resource_cbids[4]) {
        uint8_t resource_data[24] = {0};
        callback(callback_userdata, 3, 4, resource_data);
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (stream_handle(i) == stream) stream_ids[i] = 0;
    pthread_mutex_unlock(&lock);
}

/* cuModuleUnload: CUPTI's resource callback (MODULE_UNLOAD_STARTING) first,
 * when enabled; the module's kernel names go with it. */
void fake_cuModuleUnload(void) {
    if (callback && enabled_resource_cbids[7]) {
        uint8_t resource_data[24] = {0};
        callback(callback_userdata, 3, 7, resource_data);
    }
}

/* CUPTI's id of a live stream, 0 for none. */
static uint32_t stream_id_of(void *stream) {
    if (!stream) return 7;
    uint32_t id = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (stream_handle(i) == stream) id = stream_ids[i];
    pthread_mutex_unlock(&lock);
    return id;
}

uint32_t cuptiGetStreamIdEx(void *context, void *stream, uint8_t per_thread, uint32_t *id) {
    (void)context; (void)per_thread;
    __atomic_fetch_add(&stream_id_calls, 1, __ATOMIC_SEQ_CST);
    *id = stream_id_of(stream);
    return *id ? 0 : 1; /* 1: CUPTI_ERROR_INVALID_PARAMETER, not a live stream */
}

/* How many times the collector asked for a stream's id. */
uint32_t fake_stream_id_calls(void) { return __atomic_load_n(&stream_id_calls, __ATOMIC_SEQ_CST); }

/* A kernel launch of `function` (a CUfunction handle; NULL: the call names
 * none) into `stream`: the launch callbacks when they are enabled
 * (`--kernels launches`), and the kernel's activity record when kernel
 * activity is (`--kernels timed`), as CUPTI gives them. */
void fake_kernel_fn(void *stream, void *function, const char *name) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    pthread_mutex_unlock(&lock);
    if (callback && enabled_cbids[CB_LAUNCH_KERNEL]) {
        static __thread uint64_t corr_data;
        struct launch_params p = {function, 1, 1, 1, 256, 1, 1, 0, stream, NULL, NULL};
        uint32_t ret = 0;
        for (uint32_t site = 0; site < 2; site++) {
            CallbackData d = {0};
            d.callbackSite = site;
            d.functionName = "cuLaunchKernel";
            d.functionParams = &p;
            d.functionReturnValue = site == 1 ? &ret : NULL;
            d.symbolName = name;
            d.correlationData = &corr_data;
            d.correlationId = corr;
            d.context = (void *)(uintptr_t)(current_device + 1);
            d.contextUid = current_device + 1;
            callback(callback_userdata, 1, CB_LAUNCH_KERNEL, &d);
        }
    }
    if (!kernel_activity) return;
    Kernel10 k = {0};
    k.kind = 10;
    k.start = now_ns();
    k.end = k.start + 1000;
    k.gridX = k.gridY = k.gridZ = 1;
    k.blockX = 256; k.blockY = k.blockZ = 1;
    k.correlationId = corr;
    k.streamId = stream_id_of(stream);
    k.name = name; /* string literals: valid until the process ends */
    enqueue(&k, sizeof k);
}

/* A launch that names no function (only CUPTI's copy of the name tells
 * the kernel). */
void fake_kernel_on(void *stream, const char *name) { fake_kernel_fn(stream, NULL, name); }

/* A kernel launch into the legacy default stream. */
void fake_kernel(const char *name) { fake_kernel_on(NULL, name); }

/* Device 0, as CUPTI describes a device when its context is created: an
 * 80 GiB "Fake GPU" whose UUID bytes are 0x10, 0x11, … 0x1f (NVML's text
 * GPU-10111213-1415-1617-1819-1a1b1c1d1e1f; fake_nvml.c knows it). */
static void device_record(void) {
    Device5 d = {{0}};
    uint32_t kind = 8, sms = 132, major = 9, minor = 0, id = 0;
    uint64_t total = 80ull << 30;
    static const char *name = "Fake GPU";
    memcpy(d.bytes + DEV_KIND, &kind, 4);
    memcpy(d.bytes + DEV_GLOBAL_MEMORY, &total, 8);
    memcpy(d.bytes + DEV_MULTIPROCESSORS, &sms, 4);
    memcpy(d.bytes + DEV_MAJOR, &major, 4);
    memcpy(d.bytes + DEV_MINOR, &minor, 4);
    memcpy(d.bytes + DEV_ID, &id, 4);
    for (int i = 0; i < 16; i++) d.bytes[DEV_UUID + i] = (uint8_t)(0x10 + i);
    memcpy(d.bytes + DEV_NAME, &name, sizeof name);
    enqueue(&d, sizeof d);
}

/* cuInit: load the injection library named by CUDA_INJECTION64_PATH and
 * call its InitializeInjection, as the real driver does. */
int fake_cuInit(void) {
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path) return 0;
    void *h = dlopen(path, RTLD_NOW);
    if (!h) { fprintf(stderr, "fake driver: %s\n", dlerror()); return -1; }
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    int rc = init ? init() : -1;
    if (rc == 1) device_record();
    return rc;
}
