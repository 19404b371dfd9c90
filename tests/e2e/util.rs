//! Helpers: the CLI binary, the collector library, the fake CUPTI, dumps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

pub fn gmem() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gmem-prof"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn sample(name: &str) -> PathBuf {
    repo().join("traces/samples").join(name)
}

/// Every real sample trace (traces/samples/*.bin), in name order.
pub fn all_samples() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(repo().join("traces/samples"))
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "bin").then_some(p)
        })
        .collect();
    found.sort();
    found
}

/// The collector cdylib next to the CLI (where `record` looks for it).
/// `cargo test` does not build cdylibs of other packages, so build it here.
pub fn collector() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "gmem-prof-collector"]);
        if gmem().to_string_lossy().contains("/release/") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build the collector");
        assert!(status.success(), "building the collector failed");
        let path = gmem().with_file_name("libgmem_prof_collector.so");
        assert!(path.is_file(), "{} missing", path.display());
        path
    })
}

pub struct Fake {
    pub cupti: PathBuf,
    pub app: PathBuf,
}

/// Runs the system C compiler (`cc`, or $CC) or, with `cxx`, the C++ one
/// (`c++`, or $CXX) with `args`; a failure stops the test with its output.
fn compile(cxx: bool, args: &[&std::ffi::OsStr]) {
    let (var, default) = if cxx { ("CXX", "c++") } else { ("CC", "cc") };
    let compiler = std::env::var(var).unwrap_or_else(|_| default.into());
    let out = Command::new(&compiler)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("a compiler ({compiler}) is needed: {e}"));
    assert!(
        out.status.success(),
        "{compiler} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles tests/fake_cupti (a stand-in libcupti.so.13 and driver, and a
/// "CUDA program" using it) with the system C compiler, once per test run.
/// Each test process builds the fake driver into a folder of its own
/// (`fake-cupti-PID`: one process's build must not be rewritten while
/// another's programs load it); the folders of processes that have ended
/// are removed here, so that runs do not pile them up.
fn remove_dead_builds(ours: &Path) {
    let Some(parent) = ours.parent() else { return };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("fake-cupti-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub fn fake() -> &'static Fake {
    static FAKE: OnceLock<Fake> = OnceLock::new();
    FAKE.get_or_init(|| {
        let src = repo().join("tests/fake_cupti");
        let dir = gmem().with_file_name(format!("fake-cupti-{}", std::process::id()));
        remove_dead_builds(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cupti = dir.join("libcupti.so.13");
        let app = dir.join("fake_app");
        let (c_cupti, c_app) = (src.join("fake_cupti.c"), src.join("fake_app.c"));
        compile(
            false,
            &[
                "-O2".as_ref(),
                "-g".as_ref(),
                "-shared".as_ref(),
                "-fPIC".as_ref(),
                "-Wl,-soname,libcupti.so.13".as_ref(),
                "-o".as_ref(),
                cupti.as_os_str(),
                c_cupti.as_os_str(),
                "-ldl".as_ref(),
                "-lpthread".as_ref(),
            ],
        );
        compile(
            false,
            &[
                "-O2".as_ref(),
                "-g".as_ref(),
                "-o".as_ref(),
                app.as_os_str(),
                c_app.as_os_str(),
                cupti.as_os_str(),
                "-Wl,-rpath,$ORIGIN".as_ref(),
                "-lpthread".as_ref(),
                "-ldl".as_ref(),
            ],
        );
        Fake { cupti, app }
    })
}

/// The stand-in for NVML (tests/fake_cupti/fake_nvml.c), built once per
/// test run beside the fake CUPTI.
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let lib = fake().cupti.with_file_name("libfake_nvml.so");
        let c = repo().join("tests/fake_cupti/fake_nvml.c");
        compile(
            false,
            &[
                "-O2".as_ref(),
                "-shared".as_ref(),
                "-fPIC".as_ref(),
                "-o".as_ref(),
                lib.as_os_str(),
                c.as_os_str(),
            ],
        );
        lib
    })
}

/// The stand-in for PyTorch's libc10_cuda.so (tests/fake_cupti/fake_torch.cpp),
/// built with the system C++ compiler once per test run, at
/// `<dir>/torch/lib/libc10_cuda.so` beside a `torch/version.py` that says
/// 2.11.0+fake, as in a torch install, and beside the stand-ins for
/// libtorch_cpu.so's autograd engine (fake_autograd.cpp) and
/// libtorch_cuda.so's cuBLASLt workspace (fake_blas.cpp).
pub fn fake_torch() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let f = fake();
        let root = f.cupti.with_file_name("torch");
        std::fs::create_dir_all(root.join("lib")).unwrap();
        std::fs::write(root.join("version.py"), "__version__ = '2.11.0+fake'\n").unwrap();
        // A C++ shared library of tests/fake_cupti, linked with `with`.
        let library = |name: &str, source: &str, with: &[&std::ffi::OsStr]| {
            let out = root.join("lib").join(name);
            let cpp = repo().join("tests/fake_cupti").join(source);
            let mut args: Vec<&std::ffi::OsStr> = ["-O1", "-g", "-shared", "-fPIC", "-o"]
                .iter()
                .map(|a| a.as_ref())
                .collect();
            args.extend([out.as_os_str(), cpp.as_os_str()]);
            args.extend(with);
            compile(true, &args);
            out
        };
        let lib = library("libc10_cuda.so", "fake_torch.cpp", &[f.cupti.as_os_str()]);
        // Beside it, as in a PyTorch install: the autograd engine's part,
        // and cuBLASLt's workspace.
        library("libtorch_cpu.so", "fake_autograd.cpp", &[]);
        library("libtorch_cuda.so", "fake_blas.cpp", &[]);
        lib
    })
}

/// `gmem-prof record FLAGS` of tests/fake_cupti/fake_app.py, run by
/// `python`, over the fake CUPTI and driver.
pub fn record_python(
    dir: &Path,
    output: &str,
    flags: &[&str],
    python: &Path,
    args: &[&std::ffi::OsStr],
) -> Command {
    let mut cmd = record_base(dir, output, flags);
    cmd.arg(python)
        .arg(repo().join("tests/fake_cupti/fake_app.py"))
        .arg(&fake().cupti)
        .args(args)
        .env_remove("PYTHONPATH");
    cmd
}

/// The lines of a file marked with a `line:NAME` comment (the fake
/// programs mark where they allocate).
pub fn marked_lines(path: &Path) -> HashMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = HashMap::new();
    for (i, l) in text.lines().enumerate() {
        if let Some((code, mark)) = l.rsplit_once("# line:") {
            if !code.trim().is_empty() {
                out.insert(mark.trim().to_string(), i as u64 + 1);
            }
        }
    }
    out
}

/// A fresh directory for one test's files, removed when the test passes
/// (kept when it fails, to look at).
pub fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("gmem-prof-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

/// The bytes of the files under `dir`, all levels.
pub fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => dir_bytes(&e.path()),
            false => e.metadata().unwrap().len(),
        })
        .sum()
}

/// See `scratch`.
pub struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `gmem-prof record FLAGS --collector … --cupti FAKE -o OUTPUT --`, the
/// program to come.
fn record_base(dir: &Path, output: &str, flags: &[&str]) -> Command {
    let mut cmd = Command::new(gmem());
    cmd.current_dir(dir)
        .arg("record")
        .args(flags)
        .arg("--collector")
        .arg(collector())
        .arg("--cupti")
        .arg(&fake().cupti)
        .arg("-o")
        .arg(output)
        .arg("--")
        .env_remove("GMEM_PROF_DISABLE")
        .env_remove("FAKE_CUPTI_TAKEN")
        .env_remove("FAKE_CUPTI_VERSION")
        .env_remove("FAKE_CUPTI_SHARES")
        .env_remove("FAKE_DRIVER_CUDA");
    cmd
}

/// `gmem-prof record` of the fake app, with the fake CUPTI.
pub fn record_cmd(dir: &Path, output: &str, app_args: &[&str]) -> Command {
    record_cmd_with(dir, output, &[], app_args)
}

/// `record_cmd` with record options of its own (`flags`).
pub fn record_cmd_with(dir: &Path, output: &str, flags: &[&str], app_args: &[&str]) -> Command {
    let mut cmd = record_base(dir, output, flags);
    cmd.arg(&fake().app).args(app_args);
    cmd
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run gmem-prof")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `gmem-prof report -o dir trace`, which must succeed: its summary.
pub fn report_summary(trace: &Path, dir: &Path) -> String {
    let out = Command::new(gmem())
        .arg("report")
        .arg("-o")
        .arg(dir)
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "report failed: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The analysis of a trace (`export --format json`), written in `dir`.
pub fn export_json(trace: &Path, dir: &Path) -> Value {
    let out = Command::new(gmem())
        .args(["export", "-q", "--format", "json", "-o"])
        .arg(dir.join("analysis.json"))
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "export failed: {}", stderr(&out));
    serde_json::from_slice(&std::fs::read(dir.join("analysis.json")).unwrap()).unwrap()
}

/// Every record of a trace, as `dump --json` prints it.
pub fn dump_json(trace: &Path) -> Vec<Value> {
    let out = Command::new(gmem())
        .arg("dump")
        .arg("--json")
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "dump failed: {}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn of_type<'a>(recs: &'a [Value], ty: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["type"] == ty).collect()
}

/// The text of the `String` record whose id is `id`, if the dump defines it.
pub fn string_text(recs: &[Value], id: &Value) -> Option<String> {
    of_type(recs, "String")
        .into_iter()
        .find(|s| s["id"] == *id)
        .and_then(|s| s["text"].as_str().map(str::to_string))
}

/// The names of the kernels launched, in the order of their `KernelLaunch`
/// records ("" for a name the dump does not define).
pub fn launch_names(recs: &[Value]) -> Vec<String> {
    of_type(recs, "KernelLaunch")
        .iter()
        .map(|k| string_text(recs, &k["name"]).unwrap_or_default())
        .collect()
}

/// Lookups over a dump: stacks and symbols by (stream, id/address), API
/// calls by (stream, correlation id).
pub struct Index<'a> {
    stacks: HashMap<(u64, u64), &'a Value>,
    symbols: HashMap<(u64, u64), &'a Value>,
    calls: HashMap<(u64, u64), &'a Value>,
}

impl<'a> Index<'a> {
    pub fn new(recs: &'a [Value]) -> Self {
        let key =
            |r: &Value, f: &str| (r["trace_stream"].as_u64().unwrap(), r[f].as_u64().unwrap());
        let mut ix = Index {
            stacks: HashMap::new(),
            symbols: HashMap::new(),
            calls: HashMap::new(),
        };
        for r in recs {
            match r["type"].as_str() {
                Some("Stack") => {
                    ix.stacks.insert(key(r, "id"), r);
                }
                Some("Symbol") => {
                    ix.symbols.insert(key(r, "address"), r);
                }
                Some("Api") if r["internal"] == false => {
                    ix.calls.entry(key(r, "correlation")).or_insert(r);
                }
                _ => {}
            }
        }
        ix
    }

    /// Function names (inlined levels included) of a stack, from the
    /// trace's own symbol records.
    pub fn functions(&self, stream: u64, stack: u64) -> Vec<String> {
        let Some(st) = self.stacks.get(&(stream, stack)) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for f in st["frames"].as_array().unwrap() {
            let Some(addr) = f["Native"].as_u64() else {
                continue;
            };
            if let Some(sym) = self.symbols.get(&(stream, addr)) {
                for fr in sym["frames"].as_array().unwrap() {
                    names.push(fr["function"].as_str().unwrap().to_string());
                }
            }
        }
        names
    }

    /// The program's API call that caused a memory record.
    pub fn call_of(&self, m: &Value) -> Option<&'a Value> {
        self.calls
            .get(&(m["trace_stream"].as_u64()?, m["correlation"].as_u64()?))
            .copied()
    }
}

pub fn stack_functions(recs: &[Value], stream: u64, stack: u64) -> Vec<String> {
    Index::new(recs).functions(stream, stack)
}

/// Device allocations (MEMORY2 records joined to the API call that made
/// them, by correlation id) whose stack passes through `site`:
/// (count, bytes, freed count, freed bytes).
pub fn site_figures(recs: &[Value], kind: u64, site: &str) -> (u64, u64, u64, u64) {
    let ix = Index::new(recs);
    let mut mem: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "Memory" && r["kind"] == kind)
        .collect();
    mem.sort_by_key(|m| (m["trace_stream"].as_u64(), m["time"].as_u64()));
    let mut site_of_stack: HashMap<(u64, u64), bool> = HashMap::new();
    let mut live = HashMap::new();
    let (mut n, mut bytes, mut freed, mut freed_bytes) = (0, 0, 0, 0);
    for m in mem {
        let stream = m["trace_stream"].as_u64().unwrap();
        let key = (stream, m["address"].as_u64().unwrap());
        if m["alloc"] == true {
            let at_site = ix.call_of(m).is_some_and(|c| {
                let stack = c["stack"].as_u64().unwrap();
                *site_of_stack
                    .entry((stream, stack))
                    .or_insert_with(|| ix.functions(stream, stack).iter().any(|f| f.contains(site)))
            });
            if at_site {
                n += 1;
                bytes += m["bytes"].as_u64().unwrap();
                live.insert(key, m["bytes"].as_u64().unwrap());
            }
        } else if let Some(b) = live.remove(&key) {
            freed += 1;
            freed_bytes += b;
        }
    }
    (n, bytes, freed, freed_bytes)
}

/// The repository's tracked files.
pub fn tracked_files() -> Vec<std::path::PathBuf> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo())
        .output()
        .expect("git lists the repository's files");
    assert!(out.status.success());
    out.stdout
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| repo().join(String::from_utf8_lossy(f).as_ref()))
        .collect()
}

/// Where a Python package a test needs is: the directory `var` names (to
/// put on PYTHONPATH; `.ci/run` installs it there, and the test then fails
/// rather than skips without it), or python3's own packages when it can
/// import it; `None` when neither.
pub fn python_package(var: &str, package: &str) -> Option<Option<PathBuf>> {
    if let Some(dir) = std::env::var_os(var) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join(package).is_dir(),
            "{var}={} holds no {package} package",
            dir.display()
        );
        return Some(Some(dir));
    }
    let importable = Command::new("python3")
        .args(["-c", &format!("import {package}")])
        .output()
        .is_ok_and(|o| o.status.success());
    importable.then_some(None)
}

/// python3 in `dir` with the gmem_prof module of this tree (and `package`,
/// a folder of Python packages, when given) importable, this build's
/// gmem-prof first on PATH, and the fake driver for CUDA: as the pip
/// package's plugin and magics run, with no `record` in front.
pub fn python_with_gmem_prof(dir: &Path, package: Option<PathBuf>) -> Command {
    let mut path = vec![repo().join("collector/python")];
    path.extend(package);
    let bin = gmem().parent().unwrap().to_path_buf();
    let mut cmd = Command::new("python3");
    cmd.current_dir(dir)
        .env("PYTHONPATH", std::env::join_paths(&path).unwrap())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("GMEM_PROF_CUPTI", &fake().cupti)
        .env("FAKE_CUPTI", &fake().cupti)
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("GMEM_PROF_DIR");
    cmd
}
