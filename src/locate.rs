//! Finding the collector library and libcupti for `record`.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const COLLECTOR_FILE: &str = "libgmem_prof_collector.so";

/// The collector: given explicitly, else next to this executable (as
/// `cargo build` and release archives lay it out), else in ../lib/gmem-prof.
pub fn collector(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return absolute_file(p).ok_or_else(|| format!("collector {} not found", p.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    // Test binaries live in target/<profile>/deps, the collector one level up.
    for cand in [
        dir.join(COLLECTOR_FILE),
        dir.join("../lib/gmem-prof").join(COLLECTOR_FILE),
        dir.join("..").join(COLLECTOR_FILE),
    ] {
        if let Some(p) = absolute_file(&cand) {
            return Ok(p);
        }
    }
    Err(format!(
        "the collector library {COLLECTOR_FILE} is not next to {} \
         (build it with `cargo build --release`, which builds both, copy it beside the \
         gmem-prof executable, or name it with --collector)",
        exe.display()
    ))
}

fn absolute_file(p: &Path) -> Option<PathBuf> {
    let p = std::fs::canonicalize(p).ok()?;
    p.is_file().then_some(p)
}

/// libcupti's sonames, newest CUDA first.
const CUPTI: [&str; 2] = ["libcupti.so.13", "libcupti.so.12"];

/// The CUDA version the installed driver supports (12040 for 12.4,
/// 13000 for 13.0), from libcuda's `cuDriverGetVersion`, which needs no
/// initialization; `None` without a driver.
pub fn driver_cuda_version() -> Option<u32> {
    let name = std::ffi::CString::new("libcuda.so.1").ok()?;
    // SAFETY: dlopen with a NUL-terminated name; the handle is kept (the
    // process loads libcuda's copy anyway when the program starts CUDA).
    let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return None;
    }
    // SAFETY: a live handle and a NUL-terminated symbol name.
    let f = unsafe { libc::dlsym(lib, c"cuDriverGetVersion".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: libcuda's cuDriverGetVersion is `CUresult (int *)`.
    let f: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { std::mem::transmute(f) };
    let mut v = 0i32;
    // SAFETY: v is a valid out pointer.
    (unsafe { f(&mut v) } == 0 && v > 0).then_some(v as u32)
}

/// The sonames of libcupti to look for, in order: the driver's CUDA major
/// first (a CUPTI newer than the driver is refused by it; one of an older
/// major works), then the other.
fn sonames(driver: Option<u32>) -> [&'static str; 2] {
    match driver {
        Some(v) if v < 13_000 => [CUPTI[1], CUPTI[0]],
        _ => CUPTI,
    }
}

/// libcupti: for each soname in `sonames`' order, the toolkit first
/// (CUDA_HOME, CUDA_PATH, /usr/local/cuda, /usr/local/cuda-13* or -12*),
/// then the linker cache, then pip's nvidia wheels of the `python3` on
/// PATH. None if nothing was found.
pub fn cupti() -> Option<PathBuf> {
    sonames(driver_cuda_version())
        .into_iter()
        .find_map(cupti_named)
}

fn cupti_named(soname: &str) -> Option<PathBuf> {
    let major = soname.rsplit('.').next().unwrap_or("13");
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            roots.push(v.into());
        }
    }
    roots.push("/usr/local/cuda".into());
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&format!("cuda-{major}")))
            })
            .collect();
        versioned.sort();
        versioned.reverse();
        roots.extend(versioned);
    }
    for root in &roots {
        for sub in ["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64"] {
            if let Some(p) = absolute_file(&root.join(sub).join(soname)) {
                return Some(p);
            }
        }
    }
    if let Some(p) = from_ldconfig(soname) {
        return Some(p);
    }
    from_python_wheels(soname)
}

fn from_ldconfig(soname: &str) -> Option<PathBuf> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with(soname) && l.contains("x86-64"))
        .find_map(|l| {
            l.rsplit("=> ")
                .next()
                .and_then(|p| absolute_file(Path::new(p.trim())))
        })
}

/// pip's wheels put CUDA 13's in site-packages/nvidia/cu13/lib and CUDA
/// 12's (`nvidia-cuda-cupti-cu12`) in site-packages/nvidia/cuda_cupti/lib.
fn from_python_wheels(soname: &str) -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print('\\n'.join(sys.path))"])
        .output()
        .ok()?;
    let sub = if soname.ends_with(".12") {
        "nvidia/cuda_cupti/lib"
    } else {
        "nvidia/cu13/lib"
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .find_map(|dir| absolute_file(&Path::new(dir).join(sub).join(soname)))
}
