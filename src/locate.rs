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

const CUPTI: &str = "libcupti.so.13";

/// libcupti for CUDA 13: the toolkit first (CUDA_HOME, CUDA_PATH,
/// /usr/local/cuda, /usr/local/cuda-13*), then the linker cache, then pip's
/// nvidia wheels of the `python3` on PATH. None if nothing was found.
pub fn cupti() -> Option<PathBuf> {
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
                    .is_some_and(|n| n.to_string_lossy().starts_with("cuda-13"))
            })
            .collect();
        versioned.sort();
        versioned.reverse();
        roots.extend(versioned);
    }
    for root in &roots {
        for sub in ["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64"] {
            if let Some(p) = absolute_file(&root.join(sub).join(CUPTI)) {
                return Some(p);
            }
        }
    }
    if let Some(p) = from_ldconfig() {
        return Some(p);
    }
    from_python_wheels()
}

fn from_ldconfig() -> Option<PathBuf> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with(CUPTI) && l.contains("x86-64"))
        .find_map(|l| {
            l.rsplit("=> ")
                .next()
                .and_then(|p| absolute_file(Path::new(p.trim())))
        })
}

/// pip's CUDA 13 wheels put it in site-packages/nvidia/cu13/lib.
fn from_python_wheels() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print('\\n'.join(sys.path))"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .find_map(|dir| absolute_file(&Path::new(dir).join("nvidia/cu13/lib").join(CUPTI)))
}
