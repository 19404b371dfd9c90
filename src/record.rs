//! `gmem-prof record -- program args…`: run a program with the collector
//! injected, then merge what each of its CUDA processes wrote into one trace.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::{bail, Context, Result};
use gmem_prof_traces::env;
use gmem_prof_traces::window::WindowPlan;

use crate::cli::RecordArgs;
use crate::{locate, merge, signals};

/// The running program's pid, for the signal forwarder (0 = none yet).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that came before the program's pid was known, to pass on as
/// soon as it is (the program may already be running: `spawn` returns after
/// it started).
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our child.
        unsafe { libc::kill(pid, sig) };
        return;
    }
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
    // The pid may have been stored, and the pending signal looked for,
    // since the load above (on another thread): then pass it on here.
    // Whoever takes the pending signal first passes it on, once.
    pass_on_pending();
}

/// Passes a signal kept while the pid was unknown to the program, once the
/// pid is known. Called by both sides of that race; async-signal-safe.
fn pass_on_pending() {
    let pid = CHILD.load(Ordering::SeqCst);
    if pid > 0 {
        let sig = PENDING_SIGNAL.swap(0, Ordering::SeqCst);
        if sig != 0 {
            // SAFETY: kill is async-signal-safe; pid is our child.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

extern "C" fn ignore_signal(_sig: libc::c_int) {}

/// While the program runs: SIGTERM, SIGHUP and SIGQUIT sent to gmem-prof are
/// passed on to it; SIGINT (Ctrl-C) already reaches it from the terminal, so
/// gmem-prof only survives it, to write the trace. Handlers (not SIG_IGN) so
/// the program starts with default dispositions.
fn install_signal_handlers() {
    signals::set_handler(libc::SIGINT, ignore_signal);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        signals::set_handler(sig, forward_signal);
    }
}

/// The part of the run to record (`--steps`, `--capture-range`,
/// `--delay`/`--duration`, `--window-signal`), or None for all of it.
fn window_plan(a: &RecordArgs) -> Result<Option<WindowPlan>> {
    let millis = |flag: &str, s: Option<f64>| -> Result<Option<u64>> {
        match s {
            None => Ok(None),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some((s * 1e3).round() as u64)),
            Some(s) => bail!("{flag} {s}: give a number of seconds, 0 or more"),
        }
    };
    if let Some(steps) = &a.steps {
        return Ok(Some(
            WindowPlan::steps(steps).map_err(|e| anyhow::anyhow!("--steps: {e}"))?,
        ));
    }
    if let Some(range) = &a.capture_range {
        let Some(name) = range.strip_prefix("nvtx:") else {
            bail!("--capture-range {range:?}: give nvtx:NAME (or nvtx:DOMAIN:NAME)");
        };
        return Ok(Some(
            WindowPlan::range(name).map_err(|e| anyhow::anyhow!("--capture-range: {e}"))?,
        ));
    }
    if a.window_signal {
        return Ok(Some(WindowPlan::Signal));
    }
    let (delay, duration) = (
        millis("--delay", a.delay)?,
        millis("--duration", a.duration)?,
    );
    if delay.is_none() && duration.is_none() {
        return Ok(None);
    }
    if duration == Some(0) {
        bail!("--duration 0 records nothing: give a duration above 0");
    }
    Ok(Some(WindowPlan::Time {
        delay_ms: delay.unwrap_or(0),
        duration_ms: duration,
    }))
}

/// trace.bin, else trace.1.bin, trace.2.bin, …: never an existing file.
fn default_output() -> PathBuf {
    let first = PathBuf::from("trace.bin");
    if !first.exists() {
        return first;
    }
    (1..)
        .map(|n| PathBuf::from(format!("trace.{n}.bin")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => crate::EXIT_FAILURE,
    }
}

pub fn run(a: RecordArgs) -> Result<i32> {
    let output = match &a.output {
        Some(o) => {
            merge::check_output(o, a.force)?;
            o.clone()
        }
        None => default_output(),
    };
    let window = window_plan(&a)?;
    let collector = locate::collector(a.collector.as_deref()).map_err(anyhow::Error::msg)?;
    if let Some(p) = &a.cupti {
        if !p.is_file() {
            bail!("--cupti {}: no such file", p.display());
        }
    }
    let cupti = a
        .cupti
        .as_ref()
        .and_then(|p| std::fs::canonicalize(p).ok())
        .or_else(locate::cupti);
    let program = &a.program[0];
    let mut cmd = Command::new(program);
    cmd.args(&a.program[1..]);

    let Some(cupti) = cupti else {
        eprintln!(
            "gmem-prof: libcupti (libcupti.so.13 or .so.12, of CUDA 13 or 12) not found in \
             CUDA_HOME, /usr/local/cuda, the linker cache or pip's nvidia wheels; running the \
             program without profiling. Name it with --cupti PATH."
        );
        return run_program(cmd, program, false);
    };

    let parts = parts_dir(&output);
    std::fs::create_dir_all(&parts)
        .with_context(|| format!("cannot create {}", parts.display()))?;
    if std::env::var_os("CUDA_INJECTION64_PATH").is_some_and(|v| v != "none" && !v.is_empty()) {
        eprintln!("gmem-prof: warning: replacing CUDA_INJECTION64_PATH set by another tool");
    }
    cmd.env("CUDA_INJECTION64_PATH", &collector)
        .env(env::DIR, &parts)
        .env(env::CUPTI, &cupti)
        .env(
            env::KERNELS,
            if a.no_kernels {
                "off"
            } else {
                a.kernels.env_value()
            },
        )
        .env(env::STACK_DEPTH, a.stack_depth.to_string())
        .env(env::FREE_STACKS, if a.free_stacks { "1" } else { "0" })
        .env(env::FRAMEWORKS, if a.no_frameworks { "0" } else { "1" })
        .env(env::PYTHON, if a.no_python { "0" } else { "1" })
        .env(env::DEVICE_VIEW, if a.no_device_view { "0" } else { "1" })
        .env(env::TENSOR_STACKS, a.tensor_stacks.env_value())
        .env(env::FLUSH_MS, a.flush_ms.to_string())
        .env(env::UNDER_CLI, "1")
        .env(env::NVTX, if a.no_nvtx { "0" } else { "1" })
        .env_remove(env::DISABLE)
        .env_remove(env::WINDOW);
    if let Some(plan) = &window {
        cmd.env(env::WINDOW, plan.to_env());
    }
    nvtx_tool(&mut cmd, &collector, a.no_nvtx);
    put_python_bootstrap(&mut cmd, &parts)?;

    let code = match run_program(cmd, program, a.window_signal) {
        Ok(code) => code,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&parts);
            return Err(e);
        }
    };

    // The program has ended: a Ctrl-C now stops writing the trace (the
    // per-process files are kept, and the message says how to finish).
    signals::stop_on_interrupt();
    let files = crate::inputs::expand(std::slice::from_ref(&parts)).unwrap_or_default();
    if files.is_empty() {
        eprintln!(
            "gmem-prof: no CUDA process ran under the collector (the program never \
             initialized CUDA, or CUDA is not usable here); no trace written"
        );
        let _ = std::fs::remove_dir_all(&parts);
        return Ok(code);
    }
    match merge::merge(&files, &output, a.force) {
        Ok(summary) => {
            merge::print_summary(&output, &summary);
            if a.keep_parts {
                eprintln!("gmem-prof: per-process files kept in {}", parts.display());
            } else {
                let _ = std::fs::remove_dir_all(&parts);
            }
            Ok(code)
        }
        Err(e) => {
            eprintln!(
                "gmem-prof: could not write the trace: {e:#}. The per-process files are in {}; \
                 `gmem-prof symbolize {} -o FILE` merges them.",
                parts.display(),
                parts.display()
            );
            Ok(if code == 0 { crate::EXIT_FAILURE } else { code })
        }
    }
}

/// The Python bootstrap (`collector/python/sitecustomize.py`): it lets a
/// process that ends with `os._exit` finish its part of the trace, and
/// (unless `--no-frameworks`) reads JAX's and CuPy's own pool figures
/// inside the program and marks PyTorch's optimizer steps. Written beside
/// the per-process files and put first on the program's PYTHONPATH, which
/// its children inherit; it runs the program's own sitecustomize after it.
/// Beside it, the `gmem_prof` module the program may call
/// (`gmem_prof.step()`).
const PYTHON_FILES: [(&str, &str); 2] = [
    (
        "sitecustomize.py",
        include_str!("../collector/python/sitecustomize.py"),
    ),
    (
        "gmem_prof/__init__.py",
        include_str!("../collector/python/gmem_prof/__init__.py"),
    ),
];

/// Makes the collector NVTX's tool: the same path as CUDA's, so that NVTX's
/// loader gets the library CUDA loads (one copy in the process). A tool
/// that set `NVTX_INJECTION64_PATH` before us keeps it.
fn nvtx_tool(cmd: &mut Command, collector: &Path, off: bool) {
    match std::env::var_os(env::NVTX_INJECTION) {
        Some(v) if !v.is_empty() && v != collector.as_os_str() => {
            if !off {
                eprintln!(
                    "gmem-prof: note: {} is set by another tool ({}): NVTX ranges are left to \
                     it and not recorded",
                    env::NVTX_INJECTION,
                    Path::new(&v).display()
                );
            }
        }
        _ if off => {}
        _ => {
            cmd.env(env::NVTX_INJECTION, collector);
        }
    }
}

fn put_python_bootstrap(cmd: &mut Command, parts: &Path) -> Result<()> {
    let dir = parts.join("python");
    for (name, text) in PYTHON_FILES {
        let file = dir.join(name);
        let folder = file.parent().unwrap_or(&dir);
        std::fs::create_dir_all(folder)
            .with_context(|| format!("cannot create {}", folder.display()))?;
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    }
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let mut path = std::ffi::OsString::from(dir);
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    cmd.env("PYTHONPATH", path);
    Ok(())
}

fn parts_dir(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trace".into());
    output.with_file_name(format!("{name}.parts-{}", std::process::id()))
}

/// Runs the program to its end, forwarding signals, and returns the exit
/// code a shell would report.
fn run_program(mut cmd: Command, program: &std::ffi::OsStr, window_signal: bool) -> Result<i32> {
    install_signal_handlers();
    if window_signal {
        signals::set_handler(libc::SIGUSR2, forward_signal);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", Path::new(program).display()))?;
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    pass_on_pending();
    let status = child.wait().context("waiting for the program");
    CHILD.store(0, Ordering::SeqCst);
    let status = status?;
    if let Some(sig) = status.signal() {
        eprintln!("gmem-prof: {}", died_of(sig, status.core_dumped()));
    }
    Ok(exit_code(status))
}

/// What a shell would have said of a program that died of signal `sig`
/// ("Killed", "Segmentation fault (core dumped)"): with gmem-prof between
/// them the shell sees gmem-prof exit with 128+N and says nothing.
fn died_of(sig: libc::c_int, core_dumped: bool) -> String {
    // SAFETY: strsignal returns a valid C string for any number; it is
    // read at once, on this thread, before any other call to it.
    let name = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(sig)) }
        .to_string_lossy()
        .into_owned();
    let core = if core_dumped { " (core dumped)" } else { "" };
    let hint = if sig == libc::SIGKILL {
        "; when nothing else sent it, the kernel's out-of-memory killer did (the host ran out \
         of memory: `dmesg` says)"
    } else {
        ""
    };
    format!("the program died of signal {sig}: {name}{core}{hint}")
}
