//! gmem-prof's collector: the shared library the CUDA driver loads into every
//! CUDA process started with `CUDA_INJECTION64_PATH` pointing at it.
//!
//! It subscribes to CUPTI: driver API callbacks for every allocation and free
//! call (parameters, return code, thread, native stack), and activity records
//! for device-side facts (memory kind, pools, streams, kernels). Both are
//! written, unjoined, to one trace file per process in `GMEM_PROF_DIR`;
//! `gmem-prof record` merges those files and symbolizes the stacks.
//!
//! # Design constraints
//! - Never harm the host: every entry point runs in `guarded` (no unwinding
//!   across FFI, no reentry); an internal failure turns profiling off and the
//!   program goes on. No CUDA calls from callbacks or from InitializeInjection.
//! - App threads do the minimum: copy parameters and return addresses into a
//!   bounded queue. Encoding and I/O happen on the collector's writer thread.
//! - Python programs: stacks carry the interpreter's frames (`python.rs`),
//!   and PyTorch's caching allocator reports its tensors and segments
//!   (`torch/allocator.rs`), both with no change to the program.
//! - JAX's and CuPy's pools: a Python bootstrap (`python/sitecustomize.py`,
//!   put on the path by `record`) reads their own figures and hands them to
//!   `gmem_prof_pool_usage`.
//! - Bounded loss: data reaches the file every `GMEM_PROF_FLUSH_MS` (200 ms),
//!   so a SIGKILL loses well under a second; drops are counted in the trace.

mod clock;
pub mod config;
mod costs;
/// CUDA through CUPTI: loading it, its per-release layouts, the driver
/// calls watched (callbacks) and the device's records (activity).
mod cuda;
mod hashing;
mod nvml;
/// The program's NVTX ranges and marks (the collector is NVTX's tool too).
mod nvtx;
pub mod python;
mod session;
mod sink;
/// What stack an event gets: native walks, the loaded modules and their
/// symbols (Python frames are `python`'s).
mod stacks;
mod state;
mod switch;
/// PyTorch from the inside: its caching allocator, its cudaMallocAsync
/// backend, and autograd's nodes.
mod torch;
mod window;

/// Called by the CUDA driver during `cuInit` in every process that has
/// `CUDA_INJECTION64_PATH` set to this library. Returns 1 (success) always:
/// a collector problem must never fail the program's CUDA initialisation.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> std::ffi::c_int {
    state::no_unwind((), session::start);
    1
}

/// Called by the Python bootstrap `record` puts on the path
/// (`collector/python/sitecustomize.py`) with a framework's own reading of
/// its memory pool (JAX's `memory_stats()`, CuPy's pool): written into the
/// trace as a `PoolUsage` record. Returns 1 when recorded, 0 when not
/// (profiling off in this process). Safe from any thread.
#[no_mangle]
pub extern "C" fn gmem_prof_pool_usage(
    framework: u8,
    device: u32,
    in_use: u64,
    peak_in_use: u64,
    pool: u64,
    limit: u64,
    reason: u8,
) -> std::ffi::c_int {
    state::no_unwind(0, || {
        let Some(c) = state::get() else { return 0 };
        if !c.recording() {
            return 0;
        }
        use gmem_prof_traces::record::{Bytes, Nanos, PoolUsage};
        c.sink.push(gmem_prof_traces::Record::PoolUsage(PoolUsage {
            time: Nanos(c.clock.now()),
            device,
            framework,
            reason,
            in_use: Bytes(in_use),
            peak_in_use: Bytes(peak_in_use),
            pool: Bytes(pool),
            limit: Bytes(limit),
        }));
        1
    })
}

/// Steps this process finished (`gmem_prof_step`), for the number of the
/// next.
static STEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The program finished a step (a training iteration): written into the
/// trace as a `Step` record, so that the report can say what each step
/// kept and how high it went. Called by the Python bootstrap when
/// PyTorch's optimizer steps (`source` 1), by `gmem_prof.step()` and by C
/// programs through `include/gmem_prof.h` (`source` 2). Returns the step's
/// number (1, 2, …), 0 when not recorded (profiling off or paused in this
/// process). Safe from any thread; makes no CUDA call.
#[no_mangle]
pub extern "C" fn gmem_prof_step(source: u8) -> u64 {
    state::no_unwind(0, || {
        let Some(c) = state::get() else { return 0 };
        if !c.recording() {
            return 0;
        }
        let number = STEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if c.window_opens_after_step(number) {
            c.flush_activity(cuda::cupti::FLUSH_FORCED);
        }
        use gmem_prof_traces::record::{Nanos, Step};
        c.sink.push(gmem_prof_traces::Record::Step(Step {
            time: Nanos(c.clock.now()),
            tid: cuda::callbacks::current_tid(),
            number,
            source,
        }));
        number
    })
}

/// A range of the program's began, named `name`, in the domain named
/// `domain` (NULL or "": NVTX's default domain): recorded as NVTX's
/// started ranges are (it may end on any thread). Returns its id for
/// `gmem_prof_range_end`, 0 when not recorded. For `gmem_prof.range()` and
/// the Python bootstrap's PyTorch phases; C and C++ programs have NVTX.
///
/// # Safety
/// `domain` and `name` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn gmem_prof_range_begin(
    domain: *const std::ffi::c_char,
    name: *const std::ffi::c_char,
) -> u64 {
    let text = |s: *const std::ffi::c_char| {
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        (!s.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy())
    };
    let Some(name) = text(name) else { return 0 };
    let domain = text(domain).unwrap_or_default();
    nvtx::program_range_begin(&domain, &name)
}

/// Ends the range `gmem_prof_range_begin` returned (0 does nothing).
#[no_mangle]
pub extern "C" fn gmem_prof_range_end(id: u64) {
    nvtx::program_range_end(id);
}

/// Writes everything recorded so far into this process's trace file (CUPTI's
/// buffers handed over first), and returns once it is there, so that
/// another program can read the file up to now: the pytest plugin judging a
/// test as it ends. Returns 1 when done, 0 when not recording or after 10
/// s. Makes no CUDA call; call it between a program's CUDA work, not
/// from a callback.
#[no_mangle]
pub extern "C" fn gmem_prof_flush() -> std::ffi::c_int {
    state::no_unwind(0, || {
        let Some(c) = state::get() else { return 0 };
        if !c.recording() {
            return 0;
        }
        c.flush_activity(cuda::cupti::FLUSH_FORCED);
        c.note_cupti_drops();
        std::ffi::c_int::from(c.sink.flush_and_wait(std::time::Duration::from_secs(10)))
    })
}

/// Ends recording in this process and completes its part of the trace, as
/// at exit, for a process about to end without running its exit handlers:
/// the Python bootstrap calls it from `os._exit`, which Python's
/// fork-started multiprocessing workers end with, and scripts that skip
/// their teardown. Without it what the process did since its last flush and
/// its end would be missing, and the report would call it cut short.
/// Nothing is recorded after it. Does nothing in a process that is not
/// recording (a fork child of a recorded one among them) or a second time.
#[no_mangle]
pub extern "C" fn gmem_prof_finish() {
    state::no_unwind((), session::finish_now);
}

/// For benchmarks that alternate recorded and unrecorded steps in one
/// process (tests/gpu/bench_alloc.py, bench_train.py): 0 pauses recording,
/// anything else resumes it (see `Collector::set_paused`; what happens while
/// paused is missing from the trace). Returns 1 when it took effect, 0 when
/// not (already so, profiling off, or no CUPTI subscription). Safe from any
/// thread; makes no CUDA call, only CUPTI ones.
#[no_mangle]
pub extern "C" fn gmem_prof_set_recording(on: std::ffi::c_int) -> std::ffi::c_int {
    state::no_unwind(0, || {
        let Some(c) = state::get() else { return 0 };
        std::ffi::c_int::from(c.set_paused(on == 0))
    })
}
