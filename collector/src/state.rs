//! The collector's state in one process, which every callback and hook
//! reaches: `Collector` (through `get`), and the guards that keep a
//! callback from recursing into us or unwinding into the program. Its
//! life (start-up, threads, exit) is `session.rs`; what each kind of event
//! records is in the modules of its source (`cuda/`, `stacks/`, `torch/`).
//! Nothing here imports those modules' code, only the state types they
//! keep in `Collector`, so none of them imports back.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{mpsc, Mutex, OnceLock};

use crate::clock::Clock;
use crate::config::Config;
use crate::costs::CostMeters;
use crate::cuda::cupti::{self, Cupti};
use crate::cuda::names::Names;
use crate::nvml::DeviceView;
use crate::python::Python;
use crate::sink::Sink;
use crate::stacks::unwind::Stacks;
use crate::switch::Switch;
use crate::torch::hook::TorchHook;

pub struct Collector {
    pub config: Config,
    pub cupti: Cupti,
    /// Where the loaded CUPTI puts the fields of its records
    /// (`layouts::for_api_version`); `None` when its release is not known,
    /// and then nothing is profiled.
    pub layout: Option<&'static crate::cuda::layouts::CuptiLayout>,
    /// Timestamps on CUPTI's clock, cheaply.
    pub clock: Clock,
    pub sink: Sink,
    pub stacks: Option<Stacks>,
    /// The interpreter, when the process runs Python we can read.
    pub python: Option<Python>,
    pub torch: TorchHook,
    /// Whether PyTorch's trace entries carry the private pool id (2.11+).
    pub(crate) torch_pool_ids: AtomicBool,
    pub names: Mutex<Names>,
    /// What recording costs, measured as it runs.
    pub costs: CostMeters,
    /// The device's own view (NVML) of the devices CUPTI reported.
    pub(crate) device_view: DeviceView,
    pub(crate) pid: u32,
    /// Whether it records now (on, paused, ended).
    pub(crate) switch: Switch,
    /// CUPTI's handle of our subscription, once made.
    pub(crate) subscriber: OnceLock<SubscriberHandle>,
    pub(crate) flush_lock: Mutex<()>,
    pub(crate) cupti_dropped: AtomicU64,
    pub(crate) writer_done: Mutex<Option<mpsc::Receiver<()>>>,
}

/// Which stack a framework allocator's event takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventStack {
    /// None (a free: its allocation's stack is its site).
    None,
    /// As `--tensor-stacks` asks (`Collector::capture_framework_stack`).
    Framework,
    /// The whole stack, native and Python frames, if it runs through a
    /// function that allocates a CUDA library's workspace
    /// (`torch/workspaces.rs`); else as `Framework`.
    Workspace,
}

/// CUPTI's subscriber handle, kept to switch callbacks later.
pub(crate) struct SubscriberHandle(pub(crate) cupti::Subscriber);
// SAFETY: an opaque handle CUPTI accepts from any thread.
unsafe impl Send for SubscriberHandle {}
// SAFETY: as above; it is only passed back to CUPTI.
unsafe impl Sync for SubscriberHandle {}

pub(crate) static COLLECTOR: OnceLock<Collector> = OnceLock::new();

thread_local! {
    static IN_COLLECTOR: Cell<bool> = const { Cell::new(false) };
    pub(crate) static COLLECTOR_THREAD: Cell<bool> = const { Cell::new(false) };
}

pub fn get() -> Option<&'static Collector> {
    COLLECTOR.get()
}

/// True on the collector's own threads.
pub fn on_collector_thread() -> bool {
    COLLECTOR_THREAD.with(|c| c.get())
}

/// For API callbacks: runs `f` unless this thread is already inside one (a
/// CUDA call made while we handle another must not recurse into us), and
/// turns a panic into "profiling off" instead of unwinding into the host.
pub fn guarded<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    let entered = IN_COLLECTOR.with(|c| !c.replace(true));
    if !entered {
        return fallback;
    }
    let r = no_unwind(fallback, f);
    IN_COLLECTOR.with(|c| c.set(false));
    r
}

/// For everything else that runs on foreign terms (buffer callbacks, which
/// CUPTI may call from inside our own flush; exit handlers; our threads):
/// a panic turns profiling off and never unwinds into the host.
pub fn no_unwind<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            if let Some(c) = COLLECTOR.get() {
                if c.switch.turn_off() {
                    c.report(2, "internal error in the collector; profiling is off for the rest of this process".into());
                }
            }
            fallback
        }
    }
}
