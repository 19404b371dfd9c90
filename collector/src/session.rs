//! The collector's life in one process: start-up inside InitializeInjection,
//! the writer and flush threads, and the end (atexit, fork).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use gmem_prof_traces::record::{device_memory, Bytes, Message, ModuleInfo, Nanos, ProcessInfo};
use gmem_prof_traces::window::WindowPlan;
use gmem_prof_traces::Record;

use crate::clock::{Clock, PartClock, TIMED_EVERY};
use crate::config::{self, Config, KernelMode};
use crate::costs::{
    CostMeters, EVENT_ENTRY, EVENT_NATIVE, EVENT_PARTS, EVENT_PART_COUNT, EVENT_PYTHON, EVENT_QUEUE,
};
use crate::cuda::activity;
use crate::cuda::callbacks::{self, current_tid};
use crate::cuda::cupti::{self, Cupti};
use crate::cuda::names::Names;
use crate::cuda::watched::WATCHED;
use crate::nvml::DeviceView;
use crate::python::Python;
use crate::sink::{Sink, Writer, WriterEnv};
use crate::stacks::unwind::Stacks;
use crate::state::{
    guarded, no_unwind, Collector, EventStack, SubscriberHandle, COLLECTOR, COLLECTOR_THREAD,
};
use crate::switch::Switch;
use crate::torch::async_backend;
use crate::torch::hook::TorchHook;

static STARTED: AtomicBool = AtomicBool::new(false);

/// SIGUSR2s received, for a window opened and closed by signal
/// (`record --window-signal`): the writer looks at it each pass.
static WINDOW_SIGNALS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn on_window_signal(_sig: libc::c_int) {
    // Async-signal-safe: one atomic add.
    WINDOW_SIGNALS.fetch_add(1, Ordering::SeqCst);
}

/// Takes SIGUSR2 for the window, unless the program already handles it
/// (then it says so, and the window stays closed).
fn take_window_signal() -> Result<(), String> {
    // SAFETY: sigaction with a null new action only reads the current one
    // into a zeroed struct; the second call installs a valid handler with
    // an empty mask.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old) != 0 {
            return Err("cannot read SIGUSR2's handler".into());
        }
        if old.sa_sigaction != libc::SIG_DFL {
            return Err(
                "the program handles SIGUSR2 itself: the window cannot open by signal".into(),
            );
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_window_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) != 0 {
            return Err("cannot handle SIGUSR2".into());
        }
    }
    Ok(())
}

thread_local! {
    /// Where an allocator event's stack is captured.
    static EVENT_FRAMES: std::cell::RefCell<Box<[u64; crate::stacks::MAX_FRAMES]>> =
        std::cell::RefCell::new(Box::new([0; crate::stacks::MAX_FRAMES]));
}

/// Prints a message from the collector on the program's stderr, once per
/// message, for errors that could not go into a trace.
fn say(msg: &str) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    eprintln!("gmem-prof[{pid}]: {msg}");
}

/// Entry point, called by the CUDA driver from `InitializeInjection`.
pub fn start() {
    if STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let config = Config::from_env();
    if config.disabled {
        return;
    }
    if let Err(e) = start_with(config.clone()) {
        say(&format!("not profiling this process: {e}"));
    }
}

fn start_with(config: Config) -> Result<(), String> {
    // One libcupti per process: if the program already loaded one (PyTorch
    // links its own copy and loads it at import, before CUDA starts), use
    // that one rather than mapping a second copy beside it.
    let driver_cuda = cupti::driver_cuda_version();
    let sonames = config::cupti_sonames(driver_cuda);
    let already = sonames.iter().find_map(|s| cupti::loaded_path_of(s));
    let path = already
        .clone()
        .or_else(|| config.cupti.clone())
        .or_else(|| config::find_cupti(driver_cuda, &crate::stacks::modules::site_packages()))
        .ok_or("libcupti not found; set GMEM_PROF_CUPTI to its path")?;
    let cupti = Cupti::load(&path).map_err(|e| {
        format!("{e} (set GMEM_PROF_CUPTI, or pass --cupti to gmem-prof record, to name the libcupti.so.13 or .so.12 of your CUDA toolkit, or pip install nvidia-cuda-cupti)")
    })?;
    let version = cupti.version()?;
    let file = open_trace_file(&config.dir)?;
    let stacks = (config.stack_depth > 0).then(|| Stacks::new(config.stack_depth, true));
    let wants_python = stacks.is_some() && config.python;
    let (python, python_problem) = match wants_python.then(Python::detect) {
        Some(Ok(p)) => (p, None),
        Some(Err(e)) => (None, Some(e.0)),
        None => (None, None),
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let clock = Clock::calibrate(&cupti);
    let layout = crate::cuda::layouts::for_api_version(version, config.allow_any_cupti);
    let collector = Collector {
        config,
        cupti,
        layout: layout.as_ref().ok().copied(),
        clock,
        sink: Sink::new(),
        stacks,
        python,
        torch: TorchHook::default(),
        torch_pool_ids: AtomicBool::new(false),
        names: Mutex::new(Names::default()),
        costs: CostMeters::default(),
        device_view: DeviceView::default(),
        pid,
        switch: Switch::default(),
        subscriber: OnceLock::new(),
        flush_lock: Mutex::new(()),
        cupti_dropped: AtomicU64::new(0),
        writer_done: Mutex::new(None),
    };
    let c = match COLLECTOR.set(collector) {
        Ok(()) => COLLECTOR.get().ok_or("collector vanished")?,
        Err(_) => return Err("collector started twice".into()),
    };
    let mut tids = Vec::new();
    tids.push(c.spawn_flusher()?);
    let (writer_tid, done) = c.spawn_writer(file)?;
    tids.push(writer_tid);
    if let Ok(mut d) = c.writer_done.lock() {
        *d = Some(done);
    }
    c.sink.push(Record::Process(c.process_info(version, tids)));
    if let (Some(loaded), Some(asked)) = (&already, &c.config.cupti) {
        if std::fs::canonicalize(loaded).ok() != std::fs::canonicalize(asked).ok() {
            c.report(
                0,
                format!("the program had already loaded {loaded}; using it instead of {asked} (one libcupti per process)"),
            );
        }
    }
    if let Some(problem) = python_problem {
        c.report(1, problem);
    }
    match &c.config.window {
        Some(Err(e)) => c.report(2, format!("{e}: recording the whole run")),
        Some(Ok(WindowPlan::Signal)) => {
            if let Err(e) = take_window_signal() {
                c.report(2, e);
            }
        }
        _ => {}
    }
    // From here on a failure is reported in the trace and the app goes on.
    if let Err(why) = &layout {
        c.report(
            2,
            format!(
                "{}: {why}; not profiling. Point GMEM_PROF_CUPTI (or --cupti) at a CUPTI of \
                 one of those releases, or set GMEM_PROF_ALLOW_ANY_CUPTI=1 to read it with \
                 the newest known layout of its CUDA version.",
                c.cupti.path
            ),
        );
    } else if let Err(e) = c.enable_cupti() {
        c.report(2, format!("{e}{}", c.newer_than_driver()));
    } else {
        c.switch.turn_on();
        crate::nvtx::begin_pending();
    }
    // SAFETY: registers plain extern "C" functions with no arguments.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(in_fork_child));
    }
    Ok(())
}

/// Creates this process's trace file in `dir`, never replacing one.
fn open_trace_file(dir: &Path) -> Result<File, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for n in 0..1000u32 {
        let name = if n == 0 {
            format!("gmem-prof-{pid}.bin")
        } else {
            format!("gmem-prof-{pid}.{n}.bin")
        };
        let p: PathBuf = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", p.display())),
        }
    }
    Err(format!(
        "too many trace files for pid {pid} in {}",
        dir.display()
    ))
}

unsafe extern "C" fn on_api(
    _user: *mut std::ffi::c_void,
    domain: u32,
    cbid: u32,
    data: *const std::ffi::c_void,
) {
    guarded((), || {
        let Some(c) = COLLECTOR.get() else { return };
        if !c.recording() || data.is_null() {
            return;
        }
        if domain == cupti::DOMAIN_DRIVER_API {
            // SAFETY: CUPTI passes a CUpti_CallbackData for driver API callbacks.
            unsafe {
                if callbacks::is_launch(cbid) {
                    c.on_kernel_launch(cbid, data as *const u8)
                } else if cbid == async_backend::MEM_GET_INFO_CBID {
                    c.on_mem_get_info(data as *const u8)
                } else {
                    c.on_driver_call(cbid, data as *const u8)
                }
            };
        } else if domain == cupti::DOMAIN_RESOURCE {
            if cbid == cupti::CBID_RESOURCE_CONTEXT_DESTROY_STARTING {
                // Activity records of a context must be taken before it goes.
                c.flush_activity(0);
                callbacks::forget_stream_handles();
                callbacks::forget_kernel_names();
            } else if cbid == cupti::CBID_RESOURCE_MODULE_UNLOAD_STARTING {
                callbacks::forget_kernel_names();
            } else if cbid == cupti::CBID_RESOURCE_STREAM_DESTROY_STARTING {
                callbacks::forget_stream_handles();
            }
        }
    });
}

extern "C" fn at_exit() {
    no_unwind((), finish_now);
}

/// At exit, or before an exit that skips the exit handlers
/// (`gmem_prof_finish`).
pub fn finish_now() {
    if let Some(c) = COLLECTOR.get() {
        c.finish();
    }
}

extern "C" fn in_fork_child() {
    // The child has none of our threads and shares our file: it must not
    // record into it. (A CUDA program cannot use CUDA in a fork child anyway;
    // exec'ed children start their own collector.)
    if let Some(c) = COLLECTOR.get() {
        c.switch.turn_off();
        c.switch.begin_end();
    }
}

struct Env<'a>(&'a Collector);

impl WriterEnv for Env<'_> {
    fn now(&self) -> u64 {
        self.0.clock.now()
    }
    fn new_modules(&self, generation: &mut u64, after: u32) -> Vec<ModuleInfo> {
        let Some(s) = &self.0.stacks else {
            return Vec::new();
        };
        let g = s.generation();
        if g == *generation {
            return Vec::new();
        }
        *generation = g;
        s.modules_after(after)
            .into_iter()
            .map(|m| ModuleInfo {
                id: m.id,
                path: m.path,
                bias: m.bias,
                start: m.range.start,
                end: m.range.end,
                build_id: m.build_id,
            })
            .collect()
    }
    fn cupti_dropped(&self) -> u64 {
        self.0.cupti_dropped.load(Ordering::Relaxed)
    }
    fn window_signals(&self) -> u32 {
        WINDOW_SIGNALS.load(Ordering::SeqCst)
    }
    fn window_closed(&self) {
        self.0.stop_after_window();
    }
}

impl Collector {
    /// When the loaded CUPTI is of a newer CUDA major than the driver
    /// supports: the words that say so, to follow a failure to start it. (A
    /// newer minor works: CUPTI 13.1 to 13.5 record on a driver for CUDA
    /// 13.0, measured on the H100.)
    fn newer_than_driver(&self) -> String {
        let (Some(l), Some(driver)) = (self.layout, cupti::driver_cuda_version()) else {
            return String::new();
        };
        let mut parts = l.cupti.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if major <= driver / 1000 {
            return String::new();
        }
        format!(
            ". This CUPTI is CUDA {major}.{minor}'s and the driver supports CUDA {}.{}: a \
             driver refuses a CUPTI of a newer CUDA major version than its own. Use the CUPTI of CUDA {}.{} or \
             older (--cupti, GMEM_PROF_CUPTI, or pip install \"nvidia-cuda-cupti{}=={}.{}.*\"), \
             or update the driver",
            driver / 1000,
            driver % 1000 / 10,
            driver / 1000,
            driver % 1000 / 10,
            if driver / 1000 == 12 { "-cu12" } else { "" },
            driver / 1000,
            driver % 1000 / 10,
        )
    }

    fn enable_cupti(&self) -> Result<(), String> {
        let v2 = self.layout.and_then(|l| l.subscribe_v2.as_ref());
        let can_share = v2.is_some_and(|l| l.allow_multiple_subscribers.is_some());
        let mut sub = self.cupti.subscribe(on_api, v2, can_share);
        // A CUPTI that can share (13.2 and later) may still refuse to, with
        // the same code as "another client holds it" but naming no holder:
        // CUPTI 13.4 and 13.5 on a CUDA 13.0 driver do, with no other client
        // in the process. Asked to hold CUPTI alone, they subscribe; where
        // another client does hold it, the second answer says so again.
        let refused_to_share = can_share
            && matches!(&sub, Err(e) if e.code == cupti::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                && e.holder.is_none());
        if refused_to_share {
            sub = self.cupti.subscribe(on_api, v2, false);
        }
        let sub = sub.map_err(|e| {
            if e.code == cupti::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED {
                let who = match &e.holder {
                    Some(h) => format!("another CUPTI client ({h})"),
                    None => "another CUPTI client (Nsight Systems, Nsight Compute, \
                             compute-sanitizer, torch.profiler/Kineto, …)"
                        .to_string(),
                };
                let shared = if can_share {
                    "and does not share it"
                } else {
                    "and this CUPTI allows only one (CUPTI 13.2 and later can share it with \
                     a client that allows it)"
                };
                format!(
                    "{who} already holds CUPTI in this process {shared}, so gmem-prof is \
                     not profiling it. The program runs on."
                )
            } else {
                format!(
                    "cuptiSubscribe failed: {} ({}); not profiling",
                    e.text, e.code
                )
            }
        })?;
        if !can_share || refused_to_share {
            let why = if can_share {
                "this CUPTI would not share it here"
            } else {
                "CUPTI before 13.2 serves one client"
            };
            self.report(
                0,
                format!(
                    "gmem-prof holds CUPTI in this process alone ({why}): a CUPTI client \
                     started later in it, such as torch.profiler's CUDA activities, is \
                     refused and sees no GPU activity, while gmem-prof records on"
                ),
            );
        }
        let _ = self.subscriber.set(SubscriberHandle(sub));
        for cbid in self.event_callbacks() {
            self.cupti
                .enable_callback(sub, cupti::DOMAIN_DRIVER_API, cbid)?;
        }
        self.cupti.enable_callback(
            sub,
            cupti::DOMAIN_RESOURCE,
            cupti::CBID_RESOURCE_CONTEXT_DESTROY_STARTING,
        )?;
        self.cupti
            .register_buffers(activity::buffer_requested, activity::buffer_completed)?;
        self.cupti.activity_enable(cupti::KIND_MEMORY2)?;
        self.cupti.activity_enable(cupti::KIND_MEMORY_POOL)?;
        self.cupti.activity_enable(cupti::KIND_DEVICE)?;
        match self.config.kernels {
            KernelMode::Off => {}
            KernelMode::Launches => {
                // Launches keep stream ids by handle and kernel names by
                // address (cuda/callbacks.rs).
                for cbid in [
                    cupti::CBID_RESOURCE_STREAM_DESTROY_STARTING,
                    cupti::CBID_RESOURCE_MODULE_UNLOAD_STARTING,
                ] {
                    self.cupti
                        .enable_callback(sub, cupti::DOMAIN_RESOURCE, cbid)?;
                }
            }
            KernelMode::Timed => self.cupti.activity_enable(cupti::KIND_CONCURRENT_KERNEL)?,
        }
        Ok(())
    }

    fn process_info(&self, cupti_version: u32, collector_tids: Vec<u32>) -> ProcessInfo {
        let cmdline = std::fs::read("/proc/self/cmdline")
            .map(|b| {
                b.split(|c| *c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let device_buffer = self
            .cupti
            .attribute_usize(cupti::ATTR_DEVICE_BUFFER_SIZE)
            .unwrap_or(0)
            * self
                .cupti
                .attribute_usize(cupti::ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE)
                .unwrap_or(0);
        ProcessInfo {
            pid: self.pid,
            // SAFETY: getppid has no preconditions.
            ppid: unsafe { libc::getppid() } as u32,
            start: Nanos(self.clock.now()),
            hostname: hostname(),
            exe: std::fs::read_link("/proc/self/exe")
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            cmdline,
            collector_version: env!("CARGO_PKG_VERSION").into(),
            cupti_api_version: cupti_version,
            cupti_path: std::fs::canonicalize(&self.cupti.path)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| self.cupti.path.clone()),
            driver_version: driver_version(),
            kernels_traced: self.config.kernels != KernelMode::Off,
            stacks_captured: self.stacks.is_some(),
            cupti_device_buffer_bytes: Bytes(device_buffer as u64),
            collector_tids,
            kernels_timed: self.config.kernels == KernelMode::Timed,
        }
    }

    /// Whether events are being recorded (off at exit, in a fork child, and
    /// when CUPTI could not be set up).
    #[inline]
    pub fn recording(&self) -> bool {
        self.switch.recording()
    }

    /// Pauses or resumes recording, for benchmarks that alternate recorded
    /// and unrecorded steps in one process (`gmem_prof_set_recording`):
    /// while paused, CUPTI's callbacks on the watched calls and launches
    /// are off and the allocator hooks return at once, so the program runs
    /// as it would unrecorded but for CUPTI being loaded and the trackers
    /// attached. What happens meanwhile is missing from the trace: this is
    /// not a way to profile a region. Switch between steps, with no CUDA
    /// call in flight on another thread: a call whose entry callback came
    /// while paused and whose exit came after would be recorded with a
    /// wrong start. Returns whether it took effect.
    pub fn set_paused(&self, paused: bool) -> bool {
        let Some(all_set) = self.switch_callbacks(paused) else {
            return false;
        };
        self.report(
            0,
            format!(
                "recording {} by the program{}",
                if paused { "paused" } else { "resumed" },
                if all_set {
                    ""
                } else {
                    " (some of CUPTI's callbacks could not be switched)"
                }
            ),
        );
        true
    }

    /// The recorded window closed (window.rs): the watched calls' callbacks
    /// and the hooks stop, as when paused, so the rest of the run costs
    /// next to nothing. Called on the writer thread, which makes no CUDA
    /// call.
    pub fn stop_after_window(&self) {
        if self.switch_callbacks(true).is_some() {
            self.report(0, "the recorded window closed: recording stopped".into());
        }
    }

    /// Pauses or resumes the switch and CUPTI's callbacks with it
    /// (`Switch::set_paused`).
    fn switch_callbacks(&self, paused: bool) -> Option<bool> {
        let sub = self.subscriber.get()?;
        self.switch.set_paused(paused, || {
            self.event_callbacks().into_iter().all(|cbid| {
                self.cupti
                    .set_callback(sub.0, cupti::DOMAIN_DRIVER_API, cbid, !paused)
                    .is_ok()
            })
        })
    }

    /// Whether the recorded window opens as step `number` ends: CUPTI's
    /// buffered records are then handed over first, so that what the
    /// window begins with is complete when it opens.
    pub fn window_opens_after_step(&self, number: u64) -> bool {
        matches!(&self.config.window, Some(Ok(WindowPlan::Steps { first, .. })) if number + 1 == *first)
    }

    /// The driver API callbacks that record events: the watched calls
    /// (ordinary frees only with --free-stacks) and, when kernels are traced
    /// as launches, the launch calls.
    fn event_callbacks(&self) -> Vec<u32> {
        let mut cbids: Vec<u32> = WATCHED
            .iter()
            .filter(|w| !callbacks::release_in_activity(w.func) || self.config.free_stacks)
            .map(|w| w.cbid as u32)
            .collect();
        if self.config.kernels == KernelMode::Launches {
            cbids.extend(callbacks::LAUNCHES.iter().map(|cbid| *cbid as u32));
        }
        if self.config.frameworks {
            // Rare, and quick to leave when not PyTorch's error path.
            cbids.push(async_backend::MEM_GET_INFO_CBID);
        }
        cbids
    }

    pub fn torch_pool_ids(&self) -> bool {
        self.torch_pool_ids.load(Ordering::Relaxed)
    }

    pub fn set_torch_pool_ids(&self, yes: bool) {
        self.torch_pool_ids.store(yes, Ordering::Relaxed);
    }

    /// A framework allocator's event, with the calling thread's stack as
    /// `stack` asks. `parts`: for an event being timed, its parts so far
    /// (the stack's and the queueing's are marked here).
    pub fn push_allocator_event(
        &self,
        event: gmem_prof_traces::record::AllocatorEvent,
        stack: EventStack,
        mut parts: Option<&mut PartClock<EVENT_PART_COUNT>>,
    ) {
        if let Some(p) = parts.as_mut() {
            p.mark(EVENT_ENTRY);
        }
        let mut push = |event, frames: &[u64], truncated| {
            if let Some(p) = parts.as_mut() {
                let python = frames
                    .first()
                    .is_some_and(|f| crate::python::decode_frame(*f).is_some());
                p.mark(if python { EVENT_PYTHON } else { EVENT_NATIVE });
            }
            self.sink.push_allocator(event, frames, truncated);
            if let Some(p) = parts.as_mut() {
                p.mark(EVENT_QUEUE);
            }
        };
        if stack == EventStack::None {
            push(event, &[], false);
            return;
        }
        // The thread's own buffer: zeroing 4 KiB on the stack for every
        // event was a measurable part of its cost.
        let mut event = Some(event);
        EVENT_FRAMES.with(|frames| {
            if let Ok(mut frames) = frames.try_borrow_mut() {
                let (n, truncated) = self.capture_event_stack(stack, &mut frames);
                if let Some(event) = event.take() {
                    push(event, &frames[..n], truncated);
                }
            }
        });
        if let Some(event) = event {
            let mut frames = [0u64; crate::stacks::MAX_FRAMES];
            let (n, truncated) = self.capture_event_stack(stack, &mut frames);
            push(event, &frames[..n], truncated);
        }
    }

    /// The stack `push_allocator_event` records: a likely workspace's
    /// whole stack when the walk confirms it (`torch/workspaces.rs`), else
    /// the framework's choice.
    fn capture_event_stack(
        &self,
        stack: EventStack,
        out: &mut [u64; crate::stacks::MAX_FRAMES],
    ) -> (usize, bool) {
        if stack == EventStack::Workspace {
            let whole = self.capture_stack(out);
            let workspaces = self.torch.workspaces.get().and_then(|w| w.as_ref().ok());
            if workspaces.is_some_and(|w| w.confirm(&out[..whole.0])) {
                return whole;
            }
        }
        self.capture_framework_stack(out)
    }

    /// A message for the trace (and for stderr when no CLI will show it).
    pub fn report(&self, level: u8, text: String) {
        if !self.config.under_cli && level >= 1 {
            say(&text);
        }
        self.sink.push(Record::Message(Message {
            time: Nanos(self.clock.now()),
            level,
            text,
        }));
    }

    /// Opens NVML for the device view, on the flush thread only
    /// (`DeviceView` says why).
    fn open_nvml(&self) {
        let path = self
            .config
            .device_view
            .then_some(self.config.nvml.as_deref());
        if let Err(e) = self.device_view.open(path) {
            self.report(0, format!("no device view (nvidia-smi's figures): {e}"));
        }
    }

    /// A device CUPTI reported: the device view samples it from now on.
    pub fn device_seen(&self, device: u32, uuid: [u8; 16]) {
        self.device_view.device_seen(device, uuid);
    }

    /// Records the device view of every known device (`reason`:
    /// `device_memory::*`), once NVML is open.
    pub fn sample_devices(&self, reason: u8) {
        let (samples, errors) = self.device_view.sample(|| self.clock.now(), reason);
        for e in errors {
            self.report(1, e);
        }
        self.sink
            .push_records(samples.into_iter().map(Record::DeviceMemory).collect());
    }

    pub fn note_cupti_drops(&self) {
        let n = self.cupti.dropped_records();
        if n > 0 {
            self.cupti_dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn flush_activity(&self, flags: u32) {
        if let Ok(_g) = self.flush_lock.lock() {
            self.cupti.flush_all(flags);
        }
    }

    fn spawn_flusher(&'static self) -> Result<u32, String> {
        let (tx, rx) = mpsc::channel();
        let period = Duration::from_millis(self.config.flush_ms);
        std::thread::Builder::new()
            .name("gmem-prof-flush".into())
            .spawn(move || {
                COLLECTOR_THREAD.with(|c| c.set(true));
                let _ = tx.send(current_tid());
                // NVML is opened here, off the program's threads, as soon
                // as profiling runs (a short program's exit sample needs
                // it; nvmlInit can take tens of milliseconds).
                let step = Duration::from_millis(5);
                let mut waited = Duration::ZERO;
                while !self.switch.is_on() && !self.switch.ending() && waited < period {
                    std::thread::sleep(step);
                    waited += step;
                }
                if self.switch.is_on() {
                    no_unwind((), || self.open_nvml());
                }
                while !self.switch.ending() {
                    std::thread::sleep(period);
                    if self.switch.is_on() {
                        no_unwind((), || {
                            self.flush_activity(0);
                            self.note_cupti_drops();
                            self.open_nvml();
                            self.sample_devices(device_memory::TICK);
                        });
                    }
                }
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        rx.recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the flush thread did not start".to_string())
    }

    fn spawn_writer(&'static self, file: File) -> Result<(u32, mpsc::Receiver<()>), String> {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let mut writer =
            Writer::create(file).map_err(|e| format!("cannot write the trace file: {e}"))?;
        if let Some(Ok(plan)) = &self.config.window {
            writer = writer.with_window(plan.clone(), self.clock.now());
        }
        let period = Duration::from_millis(self.config.flush_ms);
        std::thread::Builder::new()
            .name("gmem-prof-writer".into())
            .spawn(move || {
                COLLECTOR_THREAD.with(|c| c.set(true));
                let _ = tx.send(current_tid());
                let env = Env(self);
                let w = writer.run(&env, &self.sink, period);
                if let Some(e) = &w.failed {
                    say(&format!(
                        "writing the trace failed: {e}; data after that point is lost"
                    ));
                }
                let _ = done_tx.send(());
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        let tid = rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "the writer thread did not start".to_string())?;
        Ok((tid, done_rx))
    }

    /// At exit: take CUPTI's last records, let the writer finish the file.
    fn finish(&self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } as u32 != self.pid {
            return;
        }
        if self.switch.begin_end() {
            return;
        }
        if self.switch.turn_off() {
            self.flush_activity(cupti::FLUSH_FORCED);
            self.note_cupti_drops();
            // What the process still holds as it ends, as nvidia-smi shows it.
            self.sample_devices(device_memory::EXIT);
        }
        let ((stacked, with), (bare, without)) = (
            self.torch.with_stack.summary(),
            self.torch.without_stack.summary(),
        );
        let events = stacked + bare;
        if events > 0 {
            let mean = (stacked as f64 * with + bare as f64 * without) / events as f64;
            self.report(
                0,
                format!(
                    "PyTorch allocator: {events} events recorded, {mean:.2} µs per event on \
                     average: {stacked} with a stack (allocations, segments) at {with:.2} µs \
                     ({}), {bare} without (frees) at {without:.2} µs ({}) (one event in \
                     {TIMED_EVERY} of each timed, drawn at random); parts (another one in \
                     {TIMED_EVERY}): {}",
                    self.torch.with_stack.describe_spread(),
                    self.torch.without_stack.describe_spread(),
                    self.costs.event_parts.describe(EVENT_PARTS)
                ),
            );
        }
        match self.torch.workspaces.get() {
            Some(Ok(w)) => {
                if let Some(found) = w.describe() {
                    self.report(0, found);
                }
            }
            Some(Err(why)) => self.report(
                0,
                format!(
                    "CUDA library workspaces among PyTorch's blocks are told apart only by \
                     the library's own allocation just before: {why}"
                ),
            ),
            None => {}
        }
        let (launches, micros) = self.costs.launches.summary();
        if launches > 0 {
            self.report(
                0,
                format!(
                    "kernel launches: {launches} recorded, {micros:.2} µs per launch on average in the \
                     collector, {} (one in {TIMED_EVERY} timed, drawn at random; CUPTI's \
                     callbacks around it not included); parts (another one in {TIMED_EVERY}): {}",
                    self.costs.launches.describe_spread(),
                    self.costs.launch_parts.describe(crate::cuda::callbacks::LAUNCH_PARTS)
                ),
            );
        }
        self.report(
            0,
            format!(
                "clock: CUPTI's timestamps are CLOCK_REALTIME {:+} ns; a cuptiGetTimestamp call \
                 took {} ns",
                self.clock.offset, self.clock.cupti_call_ns
            ),
        );
        if let Some(stats) = self.stacks.as_ref().map(Stacks::stats) {
            if stats.captures > 0 {
                let per = |n: u64| n as f64 / stats.captures as f64;
                self.report(
                    0,
                    format!(
                        "stack capture: {} walks, {:.2} µs per walk on average, {}; per walk {:.1} frames \
                         unwound by CFI rules ({:.1} of them missed the rule cache), {:.1} \
                         reused from the thread's earlier walks; {} walks met an address \
                         outside every known module",
                        stats.captures,
                        per(stats.nanos) / 1000.0,
                        stats.spread,
                        per(stats.unwound),
                        per(stats.rule_misses),
                        per(stats.reused),
                        stats.unknown
                    ),
                );
            }
        }
        self.sink.close();
        let done = self.writer_done.lock().ok().and_then(|mut d| d.take());
        if let Some(done) = done {
            // Bounded: exiting must never hang on us.
            let _ = done.recv_timeout(Duration::from_secs(10));
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// "580.159.04" from /proc/driver/nvidia/version, if present.
fn driver_version() -> String {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").unwrap_or_default();
    text.lines()
        .next()
        .and_then(|l| {
            l.split_whitespace()
                .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        })
        .unwrap_or("")
        .to_string()
}
