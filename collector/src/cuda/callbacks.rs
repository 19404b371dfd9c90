//! The CUPTI callback: driver API calls that allocate or free memory, seen on
//! the calling thread. This is the only place that sees failed allocations.
//! With kernels traced as launches (the default), the launch calls too.
//!
//! We subscribe to the driver API only: runtime calls (cudaMalloc, …) reach
//! the driver's entry points, so one callback per call suffices, and programs
//! that use the driver API directly are covered the same way.

use std::ffi::c_void;
use std::mem::offset_of;

use cudarc::cupti::sys::{self as cs, CUpti_driver_api_trace_cbid as Cb};
use gmem_prof_traces::record::{
    ApiCall, ApiFunc, Bytes, CallDevice, KernelLaunch, Nanos, StringId,
};
use gmem_prof_traces::Record;

use crate::clock::{PartClock, Sample};
use crate::cuda::cupti::{field, SITE_ENTER, SITE_EXIT};
use crate::cuda::watched::{Params, Watched, WATCHED};
use crate::state::Collector;

/// The parts of a launch's cost (`CostMeters::launch_parts`): reading
/// CUPTI's data and the launch's parameters, finding the name's id, the
/// stream's id, queueing the record.
pub const LAUNCH_FIELDS: usize = 0;
pub const LAUNCH_NAME: usize = 1;
pub const LAUNCH_STREAM: usize = 2;
pub const LAUNCH_QUEUE: usize = 3;
pub const LAUNCH_PARTS: [&str; 4] = ["reading the call", "name", "stream", "queueing"];

/// The driver's kernel launch calls, watched with `--kernels launches`
/// (the runtime's launches reach them too). Kernels of a CUDA graph are
/// launched by the graph, not by these: only `--kernels timed` sees them
/// run; a launch into a stream being captured is recorded once, when it is
/// captured.
pub const LAUNCHES: &[Cb] = &[
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
];

pub fn is_launch(cbid: u32) -> bool {
    LAUNCHES.iter().any(|c| *c as u32 == cbid)
}

/// Frees whose release CUPTI's MEMORY2 activity records already carry (with
/// address, size and time). Their callbacks add nothing the report uses
/// unless the user wants free stacks or failed frees (`--free-stacks`), and
/// each one costs about a microsecond on the calling thread, so they are left
/// off by default. VMM, pool and graph calls stay watched: the activity API
/// does not describe them fully, and they are rare.
pub fn release_in_activity(func: ApiFunc) -> bool {
    matches!(
        func,
        ApiFunc::MEM_FREE
            | ApiFunc::MEM_FREE_HOST
            | ApiFunc::MEM_FREE_ASYNC
            | ApiFunc::ARRAY_DESTROY
            | ApiFunc::MIPMAPPED_ARRAY_DESTROY
    )
}

/// Callback ids are small integers: a table indexed by cbid keeps the lookup
/// on the hot path to one load (entry index + 1 in `WATCHED`, 0 for none).
const CBID_TABLE_LEN: usize = 1024;
static WATCHED_BY_CBID: std::sync::LazyLock<[u8; CBID_TABLE_LEN]> =
    std::sync::LazyLock::new(|| {
        let mut t = [0u8; CBID_TABLE_LEN];
        for (i, w) in WATCHED.iter().enumerate() {
            if let Some(slot) = t.get_mut(w.cbid as usize) {
                *slot = u8::try_from(i + 1).expect("WATCHED has fewer than 255 entries");
            }
        }
        t
    });

fn watched_of(cbid: u32) -> Option<&'static Watched> {
    match WATCHED_BY_CBID.get(cbid as usize) {
        Some(&i) if i != 0 => WATCHED.get(usize::from(i) - 1),
        _ => None,
    }
}

pub(crate) const OFF_SITE: usize = offset_of!(cs::CUpti_CallbackData, callbackSite);
pub(crate) const OFF_PARAMS: usize = offset_of!(cs::CUpti_CallbackData, functionParams);
pub(crate) const OFF_RETURN: usize = offset_of!(cs::CUpti_CallbackData, functionReturnValue);
const OFF_CORR_DATA: usize = offset_of!(cs::CUpti_CallbackData, correlationData);
const OFF_CORR_ID: usize = offset_of!(cs::CUpti_CallbackData, correlationId);
pub(crate) const OFF_CONTEXT: usize = offset_of!(cs::CUpti_CallbackData, context);
const OFF_CONTEXT_UID: usize = offset_of!(cs::CUpti_CallbackData, contextUid);
const OFF_SYMBOL: usize = offset_of!(cs::CUpti_CallbackData, symbolName);

/// A launch's geometry and stream, from its parameters.
struct Launch {
    grid: [u32; 3],
    block: [u32; 3],
    dynamic_shared: u32,
    stream: *mut c_void,
    per_thread: bool,
    /// The launched function's handle (`CUfunction`, or a `CUkernel` passed
    /// as one).
    function: usize,
}

/// # Safety
/// `p` must point to the parameter struct CUPTI documents for `cbid`, one
/// of `LAUNCHES`.
unsafe fn launch_params(cbid: u32, p: *const c_void) -> Option<Launch> {
    let per_thread = cbid == Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz as u32
        || cbid == Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz as u32
        || cbid == Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz as u32;
    if cbid == Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx as u32
        || cbid == Cb::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz as u32
    {
        // SAFETY: both forms start with the launch's CUlaunchConfig pointer
        // (the caller's promise about `p`); the config is the call's own
        // argument, readable for the length of the call.
        let (c, function) = unsafe {
            let q = std::ptr::read_unaligned(p as *const cs::cuLaunchKernelEx_params);
            if q.config.is_null() {
                return None;
            }
            (std::ptr::read_unaligned(q.config), q.f as usize)
        };
        return Some(Launch {
            grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
            block: [c.blockDimX, c.blockDimY, c.blockDimZ],
            dynamic_shared: c.sharedMemBytes,
            stream: c.hStream as *mut c_void,
            per_thread,
            function,
        });
    }
    // cuLaunchKernel, cuLaunchCooperativeKernel and their _ptsz forms share
    // their leading fields: function, grid, block, shared memory, stream.
    // SAFETY: the caller's promise about `p`.
    let q = unsafe { std::ptr::read_unaligned(p as *const cs::cuLaunchCooperativeKernel_params) };
    Some(Launch {
        grid: [q.gridDimX, q.gridDimY, q.gridDimZ],
        block: [q.blockDimX, q.blockDimY, q.blockDimZ],
        dynamic_shared: q.sharedMemBytes,
        stream: q.hStream as *mut c_void,
        per_thread,
        function: q.f as usize,
    })
}

/// Name ids by the launched function's handle (0 where the call gave
/// none) and the address of CUPTI's copy of the name.
type NamesByLaunch = std::collections::HashMap<(usize, usize), KnownName, crate::hashing::WordHash>;

/// A kernel name a thread met at an address: its id, and its first bytes to
/// check that the address still holds it. The whole text is not compared:
/// PyTorch's names run to hundreds of bytes, and reading CUPTI's copy and
/// ours on every launch cost ~0.05 µs of the 0.57 a launch cost on the H200
/// (resnet50, three runs each way, 2026-12-04). The driver frees names with
/// their module, so the caches are dropped when a module is unloaded or a
/// context destroyed (`NAMES_EPOCH`); the first bytes catch the rest.
///
/// A launch that names its function (every driver launch call does) is
/// known by the function's handle and the name's address together, and its
/// bytes are not read at all: a loaded function keeps its name, and its
/// handle goes only with its module, which empties the caches. CUPTI's copy
/// of the name is a line of memory a busy host's caches no longer hold by
/// the time the kernel is launched again: on one H200 host, reading it was
/// 54% of what a launch cost (2026-12-07).
struct KnownName {
    id: StringId,
    /// The name's first `NAME_HEAD` bytes, and its terminating NUL if it is
    /// shorter.
    head: [u8; NAME_HEAD],
    /// How many of `head` to compare: `NAME_HEAD`, or the length plus the NUL.
    compare: usize,
}

const NAME_HEAD: usize = 32;

impl KnownName {
    /// # Safety
    /// `symbol` is a NUL-terminated string.
    unsafe fn new(id: StringId, symbol: *const std::ffi::c_char) -> KnownName {
        let mut k = KnownName {
            id,
            head: [0; NAME_HEAD],
            compare: NAME_HEAD,
        };
        for i in 0..NAME_HEAD {
            // SAFETY: read up to and including the NUL, never past it.
            let b = unsafe { *symbol.add(i) } as u8;
            k.head[i] = b;
            if b == 0 {
                k.compare = i + 1;
                break;
            }
        }
        k
    }

    /// Whether `symbol` starts as this name did.
    ///
    /// # Safety
    /// `symbol` is a NUL-terminated string.
    unsafe fn matches(&self, symbol: *const std::ffi::c_char) -> bool {
        // Byte by byte: a shorter string differs at its NUL at the latest,
        // so nothing past its end is read.
        self.head[..self.compare]
            .iter()
            .enumerate()
            // SAFETY: as above.
            .all(|(i, b)| unsafe { *symbol.add(i) } as u8 == *b)
    }
}

thread_local! {
    /// Kernel names this thread launched, by the launched function and the
    /// address CUPTI gave the name at (the driver's copy, one per
    /// function): a launch finds its name's id without the process-wide
    /// lock. Valid for one `NAMES_EPOCH`
    /// (see `KnownName`).
    static LAUNCH_NAMES: std::cell::RefCell<UntilDestroyed<NamesByLaunch>> =
        std::cell::RefCell::new(UntilDestroyed { epoch: 0, entries: NamesByLaunch::default() });
    /// The device of the context this thread last launched in, by the
    /// context's unique id (CUPTI never reuses one).
    static LAUNCH_DEVICE: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((u32::MAX, 0)) };
    /// CUPTI's ids of the streams this thread launched into, so that a
    /// launch does not call into CUPTI to learn it again.
    static LAUNCH_STREAMS: std::cell::RefCell<UntilDestroyed<StreamIds>> =
        const { std::cell::RefCell::new(UntilDestroyed { epoch: 0, entries: Vec::new() }) };
}

/// Counts streams and contexts destroyed (`forget_stream_handles`): the
/// driver may give a destroyed stream's handle to the next stream created,
/// so a thread's cached stream ids hold only while this has not moved.
static STREAM_HANDLES_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Called when a stream or a context is about to be destroyed: every
/// thread drops its cached stream ids before its next launch.
pub fn forget_stream_handles() {
    STREAM_HANDLES_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// Counts modules unloaded and contexts destroyed (`forget_kernel_names`):
/// the driver's copies of kernel names go with them, and their addresses
/// may then hold other names.
static NAMES_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Called when a module is about to be unloaded or a context destroyed:
/// every thread drops its cached kernel names before its next launch.
pub fn forget_kernel_names() {
    NAMES_EPOCH.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// A thread's cache of what the driver's handles or addresses stand for,
/// good until the driver destroys such things: `epoch` is the count of
/// those destructions (`STREAM_HANDLES_EPOCH`, `NAMES_EPOCH`) the entries
/// were filed under, and they are dropped when the count has moved.
struct UntilDestroyed<T> {
    epoch: u64,
    entries: T,
}

impl<T: Default> UntilDestroyed<T> {
    /// The entries good at `epoch`, the count read before they are used
    /// (or before what is filed was learnt): emptied first if it moved.
    fn at(&mut self, epoch: u64) -> &mut T {
        if self.epoch != epoch {
            self.epoch = epoch;
            self.entries = T::default();
        }
        &mut self.entries
    }
}

/// A thread's stream ids by (context uid, stream handle, per-thread entry
/// point), valid for one `STREAM_HANDLES_EPOCH`. A thread launches into a
/// few streams: a short list searched in order beats hashing.
type StreamIds = Vec<(u32, usize, bool, u32)>;

/// More streams than a thread plausibly cycles through: past it, the list
/// starts over rather than grow without bound.
const MAX_CACHED_STREAMS: usize = 64;

thread_local! {
    static TID: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

pub fn current_tid() -> u32 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions.
            t.set(unsafe { libc::syscall(libc::SYS_gettid) } as u32);
        }
        t.get()
    })
}

impl Collector {
    /// A watched driver call, at entry or exit.
    ///
    /// # Safety
    /// `data` must be the CUpti_CallbackData CUPTI passed for a driver API
    /// callback.
    pub unsafe fn on_driver_call(&self, cbid: u32, data: *const u8) {
        let Some(watched) = watched_of(cbid) else {
            return;
        };
        let func = watched.func;
        // SAFETY: data is a CUpti_CallbackData; the offsets come from its
        // bindgen layout and the fields are plain integers and pointers.
        let (site, params_ptr, ret_ptr, corr_data, corr) = unsafe {
            (
                field::<u32>(data, OFF_SITE),
                field::<*const c_void>(data, OFF_PARAMS),
                field::<*const u32>(data, OFF_RETURN),
                field::<*mut u64>(data, OFF_CORR_DATA),
                field::<u32>(data, OFF_CORR_ID),
            )
        };
        if site == SITE_ENTER {
            if !corr_data.is_null() {
                // SAFETY: CUPTI gives each call an 8-byte slot that it hands
                // back at exit; we keep the entry time there.
                unsafe { *corr_data = self.clock.now() };
            }
            return;
        }
        if site != SITE_EXIT {
            return;
        }
        let now = self.clock.now();
        let entered = if corr_data.is_null() {
            now
        } else {
            // SAFETY: the slot we wrote at entry.
            unsafe { *corr_data }
        };
        // The return value may be absent for some callbacks: never assume it.
        let result = if ret_ptr.is_null() {
            0
        } else {
            // SAFETY: non-null pointer to the call's CUresult.
            unsafe { std::ptr::read_unaligned(ret_ptr) }
        };
        let p = if params_ptr.is_null() {
            Params::default()
        } else {
            // SAFETY: CUPTI's parameter struct for this cbid, the one
            // `watched` reads.
            unsafe { (watched.read)(params_ptr, result == 0) }
        };
        let call = ApiCall {
            time: Nanos(now),
            duration: Nanos(now.saturating_sub(entered)),
            tid: current_tid(),
            func,
            cbid,
            correlation: corr,
            result,
            bytes: Bytes(p.bytes),
            address: p.address,
            handle: p.handle,
            stream: p.stream,
            stack: Default::default(),
            internal: crate::state::on_collector_thread(),
        };
        let failed_allocation = func.allocates() && result != 0;
        if failed_allocation {
            // The Api record does not say which device: charge the failure
            // to the device of this thread's current context.
            // SAFETY: the context field of the same CUpti_CallbackData.
            let context = unsafe { field::<*mut c_void>(data, OFF_CONTEXT) };
            if let Some(device) = self.cupti.device_of(context) {
                // At the call's start: where the analyzer places the call.
                self.sink.push(Record::CallDevice(CallDevice {
                    time: Nanos(entered),
                    tid: call.tid,
                    device,
                }));
            }
        }
        // A copy's stack says nothing the analyzer uses: only where it
        // lands does.
        let wants_stack =
            func.allocates() || result != 0 || (self.config.free_stacks && !func.copies());
        let mut frames = [0u64; crate::stacks::MAX_FRAMES];
        let (n, truncated) = if wants_stack {
            self.capture_stack(&mut frames)
        } else {
            (0, false)
        };
        self.sink.push_api(call, &frames[..n], truncated);
        if failed_allocation {
            // The device as nvidia-smi saw it when the allocation failed.
            self.sample_devices(gmem_prof_traces::record::device_memory::FAILED_ALLOCATION);
        }
        if func.allocates() {
            let caller = self.stacks.is_some().then_some(&frames[..n]);
            self.torch.poll(self, caller);
        }
    }
}

impl Collector {
    /// A kernel launch (`LAUNCHES`), at entry or exit: at exit, a launch
    /// that succeeded becomes a `KernelLaunch` record at its entry time.
    ///
    /// # Safety
    /// `data` must be the CUpti_CallbackData CUPTI passed for a driver API
    /// callback of one of `LAUNCHES`.
    pub unsafe fn on_kernel_launch(&self, cbid: u32, data: *const u8) {
        // SAFETY: data is a CUpti_CallbackData (the caller's promise); the
        // offsets come from its bindgen layout.
        let (site, params_ptr, ret_ptr, corr_data) = unsafe {
            (
                field::<u32>(data, OFF_SITE),
                field::<*const c_void>(data, OFF_PARAMS),
                field::<*const u32>(data, OFF_RETURN),
                field::<*mut u64>(data, OFF_CORR_DATA),
            )
        };
        if site == SITE_ENTER {
            if !corr_data.is_null() {
                // SAFETY: CUPTI's 8-byte slot for this call, handed back at exit.
                unsafe { *corr_data = self.clock.now() };
            }
            return;
        }
        if site != SITE_EXIT || params_ptr.is_null() || corr_data.is_null() {
            return;
        }
        // SAFETY: a non-null pointer to the call's CUresult.
        if !ret_ptr.is_null() && unsafe { std::ptr::read_unaligned(ret_ptr) } != 0 {
            return; // not launched
        }
        let sample = self.costs.launches.count();
        let timed = sample == Sample::Timed;
        let started = if timed { self.clock.now() } else { 0 };
        let mut parts = (sample == Sample::Parts).then(PartClock::<4>::start);
        // SAFETY: the slot written at entry; the rest are fields of the same
        // CUpti_CallbackData and, for the parameters, the struct of this
        // cbid.
        let (time, context, context_uid, symbol, correlation, launch) = unsafe {
            (
                *corr_data,
                field::<*mut c_void>(data, OFF_CONTEXT),
                field::<u32>(data, OFF_CONTEXT_UID),
                field::<*const std::ffi::c_char>(data, OFF_SYMBOL),
                field::<u32>(data, OFF_CORR_ID),
                launch_params(cbid, params_ptr),
            )
        };
        let Some(launch) = launch else { return };
        let device = LAUNCH_DEVICE.with(|d| {
            let (uid, device) = d.get();
            if uid == context_uid {
                return device;
            }
            let device = self.cupti.device_of(context).unwrap_or(0);
            d.set((context_uid, device));
            device
        });
        let mut mark = |part| {
            if let Some(p) = parts.as_mut() {
                p.mark(part);
            }
        };
        mark(LAUNCH_FIELDS);
        // SAFETY: CUPTI's name of the launched kernel, NUL-terminated, or
        // NULL.
        let name = unsafe { self.launch_name(symbol, launch.function) };
        mark(LAUNCH_NAME);
        let stream = self.launch_stream(context, context_uid, &launch);
        mark(LAUNCH_STREAM);
        let record = KernelLaunch {
            time: Nanos(time),
            tid: current_tid(),
            name,
            device,
            context: context_uid,
            stream,
            correlation,
            grid: launch.grid,
            block: launch.block,
            dynamic_shared: launch.dynamic_shared,
        };
        self.sink
            .push(gmem_prof_traces::Record::KernelLaunch(record));
        mark(LAUNCH_QUEUE);
        if timed {
            self.costs.launches.timed(started, self.clock.now());
        }
        if let Some(parts) = parts {
            self.costs.launch_parts.add(&parts);
        }
    }

    /// CUPTI's id of the stream a launch went into, from the thread's cache
    /// when it knows the stream (see `StreamIds`).
    fn launch_stream(&self, context: *mut c_void, context_uid: u32, launch: &Launch) -> u32 {
        let key = (context_uid, launch.stream as usize, launch.per_thread);
        let epoch = STREAM_HANDLES_EPOCH.load(std::sync::atomic::Ordering::Acquire);
        let cached = LAUNCH_STREAMS.with(|s| {
            s.try_borrow_mut()
                .ok()?
                .at(epoch)
                .iter()
                .find(|(c, h, p, _)| (*c, *h, *p) == key)
                .map(|k| k.3)
        });
        if let Some(id) = cached {
            return id;
        }
        let id = self
            .cupti
            .stream_id(context, launch.stream, launch.per_thread);
        if id != 0 {
            LAUNCH_STREAMS.with(|s| {
                if let Ok(mut s) = s.try_borrow_mut() {
                    // Filed under the epoch read before asking CUPTI: a
                    // stream destroyed since then clears it at the next
                    // launch.
                    let known = s.at(epoch);
                    if known.len() >= MAX_CACHED_STREAMS {
                        known.clear();
                    }
                    known.push((key.0, key.1, key.2, id));
                }
            });
        }
        id
    }

    /// The id of a launched kernel's name, defined in the trace the first
    /// time the process meets it. `function`: the launched function's
    /// handle, 0 if the call gave none (see `KnownName`).
    ///
    /// # Safety
    /// `symbol` is NULL or a NUL-terminated string.
    unsafe fn launch_name(&self, symbol: *const std::ffi::c_char, function: usize) -> StringId {
        if symbol.is_null() {
            return StringId(0);
        }
        let key = (function, symbol as usize);
        let epoch = NAMES_EPOCH.load(std::sync::atomic::Ordering::Acquire);
        let known = LAUNCH_NAMES.with(|m| {
            m.try_borrow_mut()
                .ok()?
                .at(epoch)
                .get(&key)
                // SAFETY: NUL-terminated (the caller's promise).
                .filter(|k| function != 0 || unsafe { k.matches(symbol) })
                .map(|k| k.id)
        });
        if let Some(id) = known {
            return id;
        }
        // SAFETY: the caller's promise.
        let text = unsafe { std::ffi::CStr::from_ptr(symbol) };
        let mut defs = Vec::new();
        let id = match self.names.lock() {
            Ok(mut names) => names.intern(&text.to_string_lossy(), &mut defs),
            Err(_) => return StringId(0),
        };
        for d in defs {
            self.sink.push(d);
        }
        LAUNCH_NAMES.with(|m| {
            if let Ok(mut m) = m.try_borrow_mut() {
                // Filed under the epoch read before the lookup: a module
                // unloaded since clears it at the next launch.
                // SAFETY: the caller's promise.
                m.at(epoch)
                    .insert(key, unsafe { KnownName::new(id, symbol) });
            }
        });
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_are_told_apart_from_watched_calls() {
        for cbid in LAUNCHES {
            assert!(is_launch(*cbid as u32));
            assert!(
                watched_of(*cbid as u32).is_none(),
                "{cbid:?} is also watched"
            );
        }
        for w in WATCHED {
            assert!(!is_launch(w.cbid as u32), "{:?}", w.cbid);
        }
    }

    #[test]
    fn every_watched_cbid_maps_to_its_function() {
        for w in WATCHED {
            assert!(
                (w.cbid as usize) < CBID_TABLE_LEN,
                "{:?} beyond the table",
                w.cbid
            );
            let found = watched_of(w.cbid as u32).unwrap();
            assert_eq!((found.cbid, found.func), (w.cbid, w.func));
        }
        assert!(watched_of(0).is_none());
        assert!(watched_of(u32::MAX).is_none());
    }

    /// The fake CUPTI used by the CLI tests writes records with these
    /// offsets (tests/fake_cupti/fake_cupti.c); keep them in step with the
    /// bindings the collector reads.
    #[test]
    fn record_layouts_match_the_fake_cupti() {
        use std::mem::offset_of;
        type K = cs::CUpti_ActivityKernel10;
        assert_eq!(offset_of!(K, start), 16);
        assert_eq!(offset_of!(K, correlationId), 92);
        assert_eq!(offset_of!(K, name), 104);
        type M = cs::CUpti_ActivityMemory4;
        assert_eq!(offset_of!(M, address), 16);
        assert_eq!(offset_of!(M, memoryPoolConfig), 80);
        assert_eq!(offset_of!(cs::CUpti_CallbackData, correlationId), 64);
    }
}
