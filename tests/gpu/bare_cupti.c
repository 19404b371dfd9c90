/* The floor of what gmem-prof asks of CUPTI: a CUDA injection library that
 * enables the same CUPTI features gmem-prof's collector does, with empty
 * bodies, and throws the records away. Comparing it with a plain run and
 * with `gmem-prof record` splits the overhead into what CUPTI itself costs
 * and what the collector adds on top.
 *
 *   BARE_CUPTI_KINDS=kernel,memory,pool,device   activity kinds (default kernel;
 *                                                "both" = kernel,memory)
 *   BARE_CUPTI_CALLBACKS=none|async|ours[,frees] driver callbacks with an empty
 *                                                body: none (default), the four
 *                                                cuMem{Alloc,Free}Async cbids, or
 *                                                the cbids the collector watches
 *                                                by default (ours), plus the
 *                                                ordinary frees it watches with
 *                                                --free-stacks (frees)
 *   BARE_CUPTI_RESOURCE=1                        also the context-destroy callback
 *   BARE_CUPTI_FLUSH_MS=N                        a thread calling
 *                                                cuptiActivityFlushAll(0) every N ms
 *   BARE_CUPTI_WRAP=1                            instead of a CUPTI callback on the
 *                                                allocation call, a callback on
 *                                                cuGetProcAddress that hands out a
 *                                                wrapper of cuMemAllocAsync and
 *                                                cuMemAllocFromPoolAsync (the floor
 *                                                of seeing allocation calls without
 *                                                CUPTI's callback path)
 *   BARE_CUPTI_HWTRACE=1                         ask CUPTI for hardware-based
 *                                                tracing first
 *                                                (cuptiActivityEnableHWTrace; its
 *                                                result is printed)
 *   BARE_CUPTI_DEVBUF_MB=N                       CUPTI's device buffer for kernel
 *                                                records, N MiB (default 3)
 *   BARE_CUPTI_PER_THREAD=1                      CUPTI's per-thread activity
 *                                                buffers
 *   BARE_CUPTI_CALLBACKS=launch                  callbacks on the kernel launch
 *                                                cbids that read a clock and the
 *                                                kernel's name: the floor of
 *                                                seeing every launch on the host
 *                                                instead of CUPTI's kernel activity
 *   CUDA_INJECTION64_PATH=.../libbare_cupti.so ./app
 *
 * It exports bare_cupti_set_recording(on), as the collector exports
 * gmem_prof_set_recording: off, every activity kind and callback above is
 * disabled (the flush thread idles); on, they are back. Benchmarks
 * alternate the two in one process (recording_switch.py), so what CUPTI
 * costs is measured free of the host's drift between runs.
 */
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t last_launch_ns;
static size_t records, callbacks, launches, named, wrapped_calls, wraps_handed, proc_lookups;
static CUpti_SubscriberHandle subscriber;
static long flush_ms;
/* What InitializeInjection enabled, for bare_cupti_set_recording. */
static int recording = 1, resource_on, wrapping_on;
static const char *kinds_on = "", *cbs_on = "";

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid) {
    CUpti_Activity *r = NULL;
    (void)ctx;
    (void)stream;
    (void)size;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) records++;
    free(buffer);
}

static void on_proc_address(const CUpti_CallbackData *cb);

static const CUpti_CallbackId launch_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
};

static int is_launch(CUpti_CallbackId cbid) {
    for (size_t i = 0; i < sizeof launch_cbids / sizeof *launch_cbids; i++)
        if (launch_cbids[i] == cbid) return 1;
    return 0;
}

static void CUPTIAPI on_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data) {
    (void)user;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && (cbid == CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress ||
                                                 cbid == CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2)) {
        on_proc_address(data);
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && is_launch(cbid)) {
        /* What a host-side launch record needs: a time and the name. */
        const CUpti_CallbackData *cb = data;
        if (cb->callbackSite == CUPTI_API_ENTER) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
            __atomic_store_n(&last_launch_ns, (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec, __ATOMIC_RELAXED);
            __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
            if (cb->symbolName && cb->symbolName[0]) __atomic_fetch_add(&named, 1, __ATOMIC_RELAXED);
        }
        return;
    }
    __atomic_fetch_add(&callbacks, 1, __ATOMIC_RELAXED);
}

/* Up to four distinct driver entry points per function (the default-stream
 * and per-thread-default-stream forms, and versions) each get their own
 * wrapper, which counts the call and forwards it. */
#define SLOTS 4
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
static alloc_async_fn orig_async[SLOTS];
static alloc_pool_fn orig_pool[SLOTS];
#define WRAPPERS(i)                                                                    \
    static CUresult wrap_async##i(CUdeviceptr *p, size_t n, CUstream s) {              \
        __atomic_fetch_add(&wrapped_calls, 1, __ATOMIC_RELAXED);                       \
        return orig_async[i](p, n, s);                                                 \
    }                                                                                  \
    static CUresult wrap_pool##i(CUdeviceptr *p, size_t n, CUmemoryPool m, CUstream s) { \
        __atomic_fetch_add(&wrapped_calls, 1, __ATOMIC_RELAXED);                       \
        return orig_pool[i](p, n, m, s);                                               \
    }
WRAPPERS(0)
WRAPPERS(1)
WRAPPERS(2)
WRAPPERS(3)
static void *const async_wrappers[SLOTS] = {(void *)wrap_async0, (void *)wrap_async1,
                                            (void *)wrap_async2, (void *)wrap_async3};
static void *const pool_wrappers[SLOTS] = {(void *)wrap_pool0, (void *)wrap_pool1,
                                           (void *)wrap_pool2, (void *)wrap_pool3};
static pthread_mutex_t wrap_lock = PTHREAD_MUTEX_INITIALIZER;

static void *wrapper_for(void **orig, void *const *wrappers, void *fn) {
    void *w = fn;
    pthread_mutex_lock(&wrap_lock);
    for (int i = 0; i < SLOTS; i++) {
        if (wrappers[i] == fn) break; /* already ours */
        if (orig[i] == fn || orig[i] == NULL) {
            orig[i] = fn;
            w = wrappers[i];
            break;
        }
    }
    pthread_mutex_unlock(&wrap_lock);
    return w;
}

static void on_proc_address(const CUpti_CallbackData *cb) {
    /* cuGetProcAddress and its _v2 form share the first two fields. */
    const cuGetProcAddress_params *p = cb->functionParams;
    __atomic_fetch_add(&proc_lookups, 1, __ATOMIC_RELAXED);
    if (cb->callbackSite != CUPTI_API_EXIT || !p || !p->symbol || !p->pfn || !*p->pfn) return;
    if (cb->functionReturnValue && *(CUresult *)cb->functionReturnValue != CUDA_SUCCESS) return;
    void *w = *p->pfn;
    if (!strcmp(p->symbol, "cuMemAllocAsync"))
        w = wrapper_for((void **)orig_async, async_wrappers, *p->pfn);
    else if (!strcmp(p->symbol, "cuMemAllocFromPoolAsync"))
        w = wrapper_for((void **)orig_pool, pool_wrappers, *p->pfn);
    if (w != *p->pfn) {
        __atomic_fetch_add(&wraps_handed, 1, __ATOMIC_RELAXED);
        *p->pfn = w;
    }
}

static void *flusher(void *arg) {
    struct timespec ts = {flush_ms / 1000, (flush_ms % 1000) * 1000000L};
    (void)arg;
    for (;;) {
        nanosleep(&ts, NULL);
        if (__atomic_load_n(&recording, __ATOMIC_RELAXED)) cuptiActivityFlushAll(0);
    }
    return NULL;
}

static void at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    fprintf(stderr, "bare_cupti: %zu records, %zu callbacks, %zu launches seen (%zu named), %zu proc-address lookups, %zu wrappers handed out, %zu wrapped calls\n",
            records, callbacks, launches, named, proc_lookups, wraps_handed, wrapped_calls);
}

/* The driver cbids collector/src/cuda/callbacks.rs watches by default (WATCHED
 * less the frees of release_in_activity). */
static const CUpti_CallbackId ours[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2, CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate, CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode, CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister, CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolCreate, CUPTI_DRIVER_TRACE_CBID_cuMemPoolDestroy,
    CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
};
/* The ordinary frees it adds with --free-stacks. */
static const CUpti_CallbackId frees[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy, CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy,
};
static const CUpti_CallbackId async_only[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
};

static int has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

/* Every activity kind and callback the environment asked for, on or off. */
static void enable_all(int on) {
    CUptiResult (*activity)(CUpti_ActivityKind) = on ? cuptiActivityEnable : cuptiActivityDisable;
    if (has(kinds_on, "kernel") || has(kinds_on, "both")) activity(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (has(kinds_on, "memory") || has(kinds_on, "both")) activity(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (has(kinds_on, "pool")) activity(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    if (has(kinds_on, "device")) activity(CUPTI_ACTIVITY_KIND_DEVICE);
    if (!subscriber) return;
#define ENABLE(list)                                                                 \
    for (size_t i = 0; i < sizeof list / sizeof *list; i++)                          \
        cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, list[i])
    if (has(cbs_on, "ours")) ENABLE(ours);
    if (has(cbs_on, "frees")) ENABLE(frees);
    if (has(cbs_on, "async")) ENABLE(async_only);
    if (has(cbs_on, "launch")) ENABLE(launch_cbids);
    if (wrapping_on) {
        cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress);
        cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_DRIVER_API,
                            CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2);
    }
    if (resource_on)
        cuptiEnableCallback(on, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
}

/* The in-process switch (see the top): returns 1 when it switched. */
int bare_cupti_set_recording(int on) {
    on = !!on;
    if (on == __atomic_load_n(&recording, __ATOMIC_RELAXED)) return 0;
    if (!on) cuptiActivityFlushAll(0);
    __atomic_store_n(&recording, on, __ATOMIC_RELAXED);
    enable_all(on);
    return 1;
}

int InitializeInjection(void) {
    const char *kinds = getenv("BARE_CUPTI_KINDS");
    const char *cbs = getenv("BARE_CUPTI_CALLBACKS");
    const char *resource = getenv("BARE_CUPTI_RESOURCE");
    const char *flush = getenv("BARE_CUPTI_FLUSH_MS");
    const char *wrap = getenv("BARE_CUPTI_WRAP");
    int wrapping = wrap && *wrap == '1';
    if (!kinds) kinds = "kernel";
    if (!cbs) cbs = "none";
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
    const char *hw = getenv("BARE_CUPTI_HWTRACE");
    if (hw && *hw == '1') {
        /* Looked up, not linked: older CUPTIs do not have it. */
        CUptiResult (*enable_hw)(uint8_t) =
            (CUptiResult(*)(uint8_t))dlsym(RTLD_DEFAULT, "cuptiActivityEnableHWTrace");
        int result = enable_hw ? (int)enable_hw(1) : -1;
        fprintf(stderr, "bare_cupti: cuptiActivityEnableHWTrace(1) = %d%s\n", result,
                enable_hw ? "" : " (not in this CUPTI)");
    }
    const char *devbuf = getenv("BARE_CUPTI_DEVBUF_MB");
    if (devbuf && atol(devbuf) > 0) {
        size_t bytes = (size_t)atol(devbuf) << 20, len = sizeof bytes;
        int rc = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &len, &bytes);
        fprintf(stderr, "bare_cupti: device buffer %zu bytes = %d\n", bytes, rc);
    }
    const char *per_thread = getenv("BARE_CUPTI_PER_THREAD");
    if (per_thread && *per_thread == '1') {
        uint8_t on = 1;
        size_t len = sizeof on;
        int rc = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &len, &on);
        fprintf(stderr, "bare_cupti: per-thread activity buffers = %d\n", rc);
    }
    kinds_on = kinds;
    cbs_on = cbs;
    resource_on = resource && *resource == '1';
    wrapping_on = wrapping;
    if (strcmp(cbs, "none") || resource_on || wrapping) {
        if (cuptiSubscribe(&subscriber, on_callback, NULL) != CUPTI_SUCCESS) return 0;
    }
    enable_all(1);
    if (flush && atol(flush) > 0) {
        pthread_t t;
        flush_ms = atol(flush);
        pthread_create(&t, NULL, flusher, NULL);
        pthread_detach(t);
    }
    atexit(at_exit);
    return 1;
}
