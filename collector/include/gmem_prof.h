/* gmem-prof's calls for the C and C++ programs it profiles.
 *
 *     #include "gmem_prof.h"
 *     for (int i = 0; i < steps; i++) {
 *         train_step();
 *         gmem_prof_mark_step();   // the end of one step
 *     }
 *
 * Header only: nothing to link but libdl (glibc 2.34 and later have it in
 * libc). Each call does nothing when the program is not recorded by
 * `gmem-prof record`, or before CUDA has started in the process (the
 * collector is the library CUDA loads from CUDA_INJECTION64_PATH). */
#ifndef GMEM_PROF_H
#define GMEM_PROF_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

/* The end of one step of the program (a training iteration): the report
 * gives each step's peak and what it kept, by site. Returns the step's
 * number (1, 2, ...), or 0 when nothing was recorded. */
static inline uint64_t gmem_prof_mark_step(void) {
    static uint64_t (*step)(uint8_t);
    if (!step) {
        const char *path = getenv("CUDA_INJECTION64_PATH");
        void *lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
        if (!lib)
            return 0;
        step = (uint64_t (*)(uint8_t))dlsym(lib, "gmem_prof_step");
        if (!step)
            return 0;
    }
    return step(2 /* the program's own mark */);
}

#endif
