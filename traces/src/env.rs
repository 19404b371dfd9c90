//! The environment variables by which `gmem-prof record` configures the
//! collector it injects: the contract between the two, spelled once here
//! for both. A container or job spec may set them by hand with no CLI in
//! front (the collector's README). The Python bootstrap the collector runs
//! reads two of them by name too (`FRAMEWORKS`, and `POOL_MS`, its own).

/// Where each process writes its trace file (a directory). Default: the
/// current directory.
pub const DIR: &str = "GMEM_PROF_DIR";
/// Path of the libcupti to load. Default: search (the collector's `find_cupti`).
pub const CUPTI: &str = "GMEM_PROF_CUPTI";
/// How kernels are traced: "launches" (default; also "1"), "timed", or
/// "0"/"off" (the collector's `KernelMode`).
pub const KERNELS: &str = "GMEM_PROF_KERNELS";
/// Native stack depth per allocation; "0" turns stacks off.
pub const STACK_DEPTH: &str = "GMEM_PROF_STACK_DEPTH";
/// "1" also captures stacks of frees.
pub const FREE_STACKS: &str = "GMEM_PROF_FREE_STACKS";
/// How often buffered data reaches the file, in milliseconds.
pub const FLUSH_MS: &str = "GMEM_PROF_FLUSH_MS";
/// "1" accepts a libcupti whose API version differs from the bindings.
pub const ANY_CUPTI: &str = "GMEM_PROF_ALLOW_ANY_CUPTI";
/// "0": do not look inside framework allocators (PyTorch's caching
/// allocator): only what CUDA sees is recorded.
pub const FRAMEWORKS: &str = "GMEM_PROF_FRAMEWORKS";
/// "0": stacks hold native frames only, no Python frames.
pub const PYTHON: &str = "GMEM_PROF_PYTHON";
/// Which frames events inside framework allocators take (the collector's
/// `TensorStacks`): "auto" (default), "python" or "all".
pub const TENSOR_STACKS: &str = "GMEM_PROF_TENSOR_STACKS";
/// "0": no device view (NVML's used and free memory per device and per
/// process, as `nvidia-smi` shows them).
pub const DEVICE_VIEW: &str = "GMEM_PROF_DEVICE_VIEW";
/// Path of the libnvidia-ml to load. Default: the driver's
/// `libnvidia-ml.so.1` on the linker's path.
pub const NVML: &str = "GMEM_PROF_NVML";
/// "0": do not record the program's NVTX ranges and marks.
pub const NVTX: &str = "GMEM_PROF_NVTX";
/// NVTX's own variable: the library its headers load as their tool on the
/// first NVTX call. `record` points it at the collector.
pub const NVTX_INJECTION: &str = "NVTX_INJECTION64_PATH";
/// Record only a part of the run (`window::WindowPlan::to_env`): unset,
/// the whole run.
pub const WINDOW: &str = "GMEM_PROF_WINDOW";
/// "1" makes the collector do nothing in this process.
pub const DISABLE: &str = "GMEM_PROF_DISABLE";
/// Set by `gmem-prof record`: the collector then leaves messages to the CLI
/// instead of printing them on the app's stderr.
pub const UNDER_CLI: &str = "GMEM_PROF_UNDER_CLI";

/// How often the Python bootstrap reads JAX's and CuPy's pools, in
/// milliseconds (default 50).
pub const POOL_MS: &str = "GMEM_PROF_POOL_MS";
/// The collector library `gmem-prof record` injects (default: the one
/// installed beside the CLI); read by the CLI only.
pub const COLLECTOR: &str = "GMEM_PROF_COLLECTOR";
