/* The floor of kernel tracing: a CUDA injection library that does nothing
 * but enable CUPTI activity kinds and throw the records away. Comparing it
 * with a plain run measures what CUPTI itself costs, apart from gmem-prof.
 *
 *   BARE_CUPTI_KINDS=kernel|memory|both  (default kernel)
 *   CUDA_INJECTION64_PATH=.../libbare_cupti.so ./app
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t records;

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

static void at_exit(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    fprintf(stderr, "bare_cupti: %zu records\n", records);
}

int InitializeInjection(void) {
    const char *kinds = getenv("BARE_CUPTI_KINDS");
    if (!kinds) kinds = "kernel";
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) return 0;
    if (!strcmp(kinds, "kernel") || !strcmp(kinds, "both"))
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (!strcmp(kinds, "memory") || !strcmp(kinds, "both"))
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2);
    atexit(at_exit);
    return 1;
}
