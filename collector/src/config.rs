//! Configuration from environment variables, parsed once at injection.
//!
//! `gmem-prof record` sets these; a container or job spec can set them by
//! hand with no CLI in front (see the collector README).

use std::path::PathBuf;

use gmem_prof_traces::env;
use gmem_prof_traces::window::WindowPlan;

pub const DEFAULT_STACK_DEPTH: usize = 64;
pub const MAX_STACK_DEPTH: usize = 256;

/// How kernels are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMode {
    /// Not at all.
    Off,
    /// Each launch, on the launching thread when the program makes it
    /// (CUPTI callbacks on the launch calls): name, stream, grid, time of
    /// the launch. About 0.3-0.45 µs per launch in the collector in
    /// PyTorch on the H200, and ~0.2 µs in CUPTI's callbacks around it.
    Launches,
    /// Each kernel's run on the device, start to end (CUPTI's kernel
    /// activity). About 0.9 µs per launch on the H200, paid on the
    /// launching thread: it shows in loops of many small kernels.
    Timed,
}

impl KernelMode {
    fn from_env() -> KernelMode {
        match std::env::var(env::KERNELS) {
            Err(_) => KernelMode::Launches,
            Ok(v) if is_off(&v) => KernelMode::Off,
            Ok(v) if v.trim() == "timed" => KernelMode::Timed,
            Ok(_) => KernelMode::Launches,
        }
    }
}

/// Which frames an event inside a framework allocator takes (stack.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorStacks {
    /// The Python frames on a thread running Python, else the autograd
    /// node it evaluates (torch/autograd.rs), else the native frames.
    Auto,
    /// As `Auto`, but never the native frames: none where neither Python
    /// nor an autograd node runs.
    Python,
    /// Native and Python frames, interleaved, on every thread.
    All,
}

impl TensorStacks {
    fn from_env() -> TensorStacks {
        match std::env::var(env::TENSOR_STACKS).as_deref().map(str::trim) {
            Ok("python") => TensorStacks::Python,
            Ok("all") => TensorStacks::All,
            _ => TensorStacks::Auto,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub dir: PathBuf,
    pub cupti: Option<String>,
    pub kernels: KernelMode,
    pub stack_depth: usize,
    pub free_stacks: bool,
    pub frameworks: bool,
    pub python: bool,
    pub tensor_stacks: TensorStacks,
    pub device_view: bool,
    pub nvml: Option<String>,
    pub flush_ms: u64,
    pub allow_any_cupti: bool,
    pub disabled: bool,
    pub under_cli: bool,
    /// Record only this part of the run (`env::WINDOW`); an unreadable
    /// value is an error the trace reports, and the whole run is recorded.
    pub window: Option<Result<WindowPlan, String>>,
}

/// A variable's value that turns a feature off.
fn is_off(value: &str) -> bool {
    matches!(value.trim(), "0" | "" | "false" | "no" | "off")
}

pub(crate) fn flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => !is_off(&v),
        Err(_) => default,
    }
}

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

impl Config {
    pub fn from_env() -> Config {
        Config {
            dir: std::env::var_os(env::DIR)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
            cupti: std::env::var(env::CUPTI).ok().filter(|s| !s.is_empty()),
            kernels: KernelMode::from_env(),
            stack_depth: (number(env::STACK_DEPTH, DEFAULT_STACK_DEPTH as u64) as usize)
                .min(MAX_STACK_DEPTH),
            free_stacks: flag(env::FREE_STACKS, false),
            frameworks: flag(env::FRAMEWORKS, true),
            python: flag(env::PYTHON, true),
            tensor_stacks: TensorStacks::from_env(),
            device_view: flag(env::DEVICE_VIEW, true),
            nvml: std::env::var(env::NVML).ok().filter(|s| !s.is_empty()),
            flush_ms: number(env::FLUSH_MS, 200).clamp(10, 10_000),
            allow_any_cupti: flag(env::ANY_CUPTI, false),
            disabled: flag(env::DISABLE, false),
            under_cli: flag(env::UNDER_CLI, false),
            window: std::env::var(env::WINDOW)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| WindowPlan::from_env(v.trim())),
        }
    }
}

/// libcupti's sonames in the order to look for them: the driver's CUDA
/// major first (`driver_cuda`: 12040 for 12.4, 13000 for 13.0; a CUPTI
/// newer than the driver is refused by it, one of an older major works),
/// then the other.
pub fn cupti_sonames(driver_cuda: Option<u32>) -> [&'static str; 2] {
    match driver_cuda {
        Some(v) if v < 13_000 => ["libcupti.so.12", "libcupti.so.13"],
        _ => ["libcupti.so.13", "libcupti.so.12"],
    }
}

/// The libcupti to load when none was named and the process has none yet:
/// for each soname (`cupti_sonames`), the CUDA toolkit's copies, pip's
/// nvidia wheel in the program's own Python environment (`site_packages`:
/// the folders of the Python packages it has loaded), then the linker's
/// search path.
pub fn find_cupti(driver_cuda: Option<u32>, site_packages: &[String]) -> Option<String> {
    let mut roots: Vec<String> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(v) = std::env::var(var) {
            if !v.is_empty() {
                roots.push(v);
            }
        }
    }
    roots.push("/usr/local/cuda".into());
    let exists = |p: &str| std::path::Path::new(p).exists();
    for soname in cupti_sonames(driver_cuda) {
        for root in &roots {
            for sub in ["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64"] {
                let p = format!("{root}/{sub}/{soname}");
                if exists(&p) {
                    return Some(p);
                }
            }
        }
        let wheel = if soname.ends_with(".12") {
            "nvidia/cuda_cupti/lib"
        } else {
            "nvidia/cu13/lib"
        };
        for dir in site_packages {
            let p = format!("{dir}/{wheel}/{soname}");
            if exists(&p) {
                return Some(p);
            }
        }
    }
    // Let the dynamic linker search its usual path for the versioned name.
    Some(cupti_sonames(driver_cuda)[0].into())
}

#[cfg(test)]
mod cupti_search {
    use super::*;

    #[test]
    fn the_drivers_cuda_major_comes_first() {
        assert_eq!(cupti_sonames(Some(12040))[0], "libcupti.so.12");
        assert_eq!(cupti_sonames(Some(13000))[0], "libcupti.so.13");
        assert_eq!(cupti_sonames(None)[0], "libcupti.so.13");
    }

    /// pip's wheels in the program's environment: CUDA 13's under
    /// nvidia/cu13/lib, CUDA 12's under nvidia/cuda_cupti/lib; with a CUDA
    /// 12 driver the .so.12 is taken though a .so.13 is there too.
    #[test]
    fn the_programs_own_wheels_are_found() {
        let site = std::env::temp_dir().join(format!("gmem-prof-site-{}", std::process::id()));
        for (sub, name) in [
            ("nvidia/cu13/lib", "libcupti.so.13"),
            ("nvidia/cuda_cupti/lib", "libcupti.so.12"),
        ] {
            std::fs::create_dir_all(site.join(sub)).unwrap();
            std::fs::write(site.join(sub).join(name), b"").unwrap();
        }
        let dirs = [site.to_string_lossy().into_owned()];
        // No toolkit in the way.
        if std::path::Path::new("/usr/local/cuda").exists() {
            return;
        }
        let found = |driver| find_cupti(Some(driver), &dirs).unwrap();
        assert!(found(12040).ends_with("nvidia/cuda_cupti/lib/libcupti.so.12"));
        assert!(found(13000).ends_with("nvidia/cu13/lib/libcupti.so.13"));
        let _ = std::fs::remove_dir_all(&site);
    }
}
