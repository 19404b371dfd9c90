/* A stand-in for libnvidia-ml.so.1 (NVML) with the five functions the
 * collector's device view calls. It knows one GPU, fake_cupti.c's device 0
 * (by its UUID), and reports the figures its environment gives, so a test
 * knows exactly what nvidia-smi "would show":
 *
 *   FAKE_NVML_USED     bytes used on the device by everyone (default 6 GiB)
 *   FAKE_NVML_PROCESS  bytes charged to the calling process (default 1 GiB;
 *                      "none": the process is not listed, as in a container)
 *   FAKE_NVML_OTHERS   bytes of one other process (pid 1; default 4 GiB;
 *                      0: no other process)
 *   FAKE_NVML_RESERVED bytes the driver keeps (default 512 MiB; only the
 *                      v2 call reports it)
 *
 * The device has 80 GiB; free is 80 GiB minus used and reserved (v1: minus
 * used). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { uint64_t total, free, used; } Memory;
typedef struct { unsigned version; uint64_t total, reserved, free, used; } MemoryV2;
typedef struct { unsigned pid; uint64_t used; unsigned gi, ci; } ProcessInfo;

static const char *UUID = "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f";
static int device_handle;

static uint64_t env_bytes(const char *name, uint64_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : fallback;
}

int nvmlInit_v2(void) { return 0; }

int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    if (strcmp(uuid, UUID) != 0) return 13; /* NVML_ERROR_NOT_FOUND-like */
    *device = &device_handle;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *device, Memory *m) {
    if (device != &device_handle) return 2;
    m->total = 80ull << 30;
    m->used = env_bytes("FAKE_NVML_USED", 6ull << 30);
    m->free = m->total - m->used;
    return 0;
}

/* v2: `used` without the driver's reservation (FAKE_NVML_RESERVED, default
 * 512 MiB), as nvidia-smi shows it. */
int nvmlDeviceGetMemoryInfo_v2(void *device, MemoryV2 *m) {
    if (device != &device_handle) return 2;
    if (m->version != (sizeof(MemoryV2) | (2u << 24))) return 25; /* version mismatch */
    m->total = 80ull << 30;
    m->reserved = env_bytes("FAKE_NVML_RESERVED", 512ull << 20);
    m->used = env_bytes("FAKE_NVML_USED", 6ull << 30);
    m->free = m->total - m->used - m->reserved;
    return 0;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned *count, ProcessInfo *infos) {
    if (device != &device_handle) return 2;
    unsigned n = 0;
    const char *mine = getenv("FAKE_NVML_PROCESS");
    if (!(mine && strcmp(mine, "none") == 0) && n < *count) {
        infos[n++] = (ProcessInfo){(unsigned)getpid(), env_bytes("FAKE_NVML_PROCESS", 1ull << 30), 0, 0};
    }
    uint64_t others = env_bytes("FAKE_NVML_OTHERS", 4ull << 30);
    if (others > 0 && n < *count) infos[n++] = (ProcessInfo){1, others, 0, 0};
    *count = n;
    return 0;
}
