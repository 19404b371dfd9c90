//! The sweep: applies events in time order and keeps only what is live, per
//! site and per device, plus bounded curves. Memory is bounded by live
//! allocations, sites and processes, never by trace length.

use std::collections::{BTreeMap, VecDeque};

use gmem_prof_traces::record::{memory_kind, AllocatorAction, ApiFunc};
use gmem_prof_traces::Record;

use crate::events::{EventKind, EventRow};
use crate::fast_map::FastMap;
use crate::framework::{AllocConfig, DriverMemory, FrameworkState};
use crate::holding::{sites_holding, Holding, SiteClass, SiteStats};
use crate::input::RangeBeginEv;
use crate::input::{AllocatorEv, ApiEv, Event, MemoryEv, TimedEvent, TORCH_ASYNC};
use crate::model::{OomOutcome, Role};
use crate::ranges::ProcRanges;
use crate::regions::{PoolBlock, PoolId, Regions};
use crate::roles::{stack_hint, Hint, Phase};
use crate::sites::ProcDefs;
use crate::steps::{FinishedStep, Measured, ProcSteps, Tracker};
use crate::timeline::{Axis, Counts, Curve, Samples};

/// Memory kinds by CUPTI's numbering (0..=7).
pub const KINDS: usize = 8;
/// CUDA_ERROR_OUT_OF_MEMORY.
pub const OUT_OF_MEMORY: u32 = 2;
/// MEMORY2's context id for VMM mappings.
const NO_CONTEXT: u32 = u32::MAX;
/// API calls waiting for their device-side record are dropped once this
/// many are waiting and they are older than `PENDING_AGE_NS` (calls such as
/// cuMemCreate never get one).
const PENDING_LIMIT: usize = 65_536;
const PENDING_AGE_NS: u64 = 10_000_000_000;
/// Stack ids below this are looked up in `ProcState::call_sites` (the
/// table's size is bounded whatever ids a damaged trace holds).
const SITE_CACHE_IDS: u32 = 1 << 20;

/// How many events ahead of the one applied the sweep asks for (see
/// `prefetch_passing`): 16, 1 KB ahead. Against 8, once decoding had got
/// faster (`traces`' wide decoding): 0.96 of the analysis time in two series of
/// paired runs, 0.97 of the report's; 32 gave 0.99.
const PREFETCH_AHEAD: usize = 16;

/// Asks the processor for the cache line at `p` as data read once: the
/// events pass through the sweep once, and the reordering window holds far
/// more of them than the caches do, so fetched the ordinary way they evict
/// what the sweep keeps reusing (live allocations, sites, curves). Fetched
/// as non-temporal, they mostly do not: reports are 3% faster on the 50M
/// trace (three series of paired runs). A hint only: `p` may point
/// anywhere, past the end of the events included.
#[inline(always)]
fn prefetch_passing<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_NTA};
        // SAFETY: SSE, which `_mm_prefetch` needs, is part of x86_64; a
        // prefetch reads nothing the program sees and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_NTA>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How soon after a CUDA library's own allocation on a thread a tensor
/// allocated on that thread is taken for the library's workspace (when it
/// is also kept to the end: `FrameworkAtExit::library_bytes`). Measured on
/// the H200 with torch 2.11: 10 to 140 µs from cuBLAS's allocations in
/// `cublasCreate` to its workspace and cuBLASLt's.
pub const LIBRARY_WORKSPACE_NS: u64 = 1_000_000;

/// The library holding PyTorch's CUDA allocators (both backends).
const TORCH_CUDA_LIBRARY: &str = "libc10_cuda.so";

/// An event of PyTorch's cudaMallocAsync backend, made from a CUDA
/// allocation or free (`Engine::torch_async_alloc`): no private pools, no
/// segments, so no stream to key them by.
fn torch_async_event(
    action: AllocatorAction,
    device: u32,
    stack: u32,
    address: u64,
    bytes: u64,
) -> AllocatorEv {
    AllocatorEv {
        allocator: TORCH_ASYNC,
        action,
        device16: device.min(u32::from(u16::MAX)) as u16,
        stack,
        // Its tensors' stacks are the CUDA calls', whole: what they went
        // through is in their frames, not to be told from the thread.
        tid: 0,
        pool: 0,
        address,
        bytes,
        stream: 0,
    }
}

/// The driver allocations live in one process, for matching a framework's
/// segments with them.
struct LiveMemory<'a> {
    live: &'a FastMap<(u32, u64), Live>,
    proc: u32,
}

impl DriverMemory for LiveMemory<'_> {
    fn live_at(&self, address: u64) -> Option<u64> {
        self.live.get(&(self.proc, address)).map(|l| l.bytes)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SiteKey {
    proc: u32,
    stack: u32,
    device: u32,
    class: SiteClass,
    /// The API function, so that sites without stacks still differ by call.
    func: u16,
}

#[derive(Clone, Copy, Debug)]
struct Live {
    bytes: u64,
    site: u32,
    device: u32,
    kind: u8,
    /// The process's allocation count (`allocations`) when this was allocated.
    seq: u64,
    /// Its place in the pool it came from, or a VMM mapping.
    pool: Option<PoolBlock>,
    vmm: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct PendingCall {
    time: u64,
    stack: u32,
    func: ApiFunc,
    address: u64,
    internal: bool,
}

impl PendingCall {
    fn caller(&self) -> Caller {
        Caller {
            stack: self.stack,
            func: self.func,
            internal: self.internal,
        }
    }
}

/// What an allocation's site is made of, from the call that caused it.
#[derive(Clone, Copy, Debug)]
struct Caller {
    stack: u32,
    func: ApiFunc,
    internal: bool,
}

/// API calls waiting for their device-side record, by correlation id. The
/// call added last is kept apart from the map: its record usually comes
/// next, and then neither adding nor taking the call hashes. (The map never
/// holds the id of the call kept apart.)
///
/// The call kept apart is held in plain fields rather than as an
/// `Option<(u32, PendingCall)>`: moving that value in and out went through
/// stack copies whose wide reads of narrow writes stalled the processor
/// (store-to-load forwarding fails), at a cost of several percent of the
/// sweep.
#[derive(Default)]
struct PendingCalls {
    has_last: bool,
    last_id: u32,
    last: PendingCall,
    rest: FastMap<u32, PendingCall>,
}

impl PendingCalls {
    #[inline]
    fn insert(&mut self, correlation: u32, call: PendingCall) {
        if !self.has_last && self.rest.is_empty() {
            self.set_last(correlation, call);
        } else {
            self.insert_among_others(correlation, call);
        }
    }

    #[inline(always)]
    fn set_last(&mut self, correlation: u32, call: PendingCall) {
        self.has_last = true;
        self.last_id = correlation;
        // Field by field: `self.last = call` was compiled into a copy
        // through the stack that stalled (see above).
        let PendingCall {
            time,
            stack,
            func,
            address,
            internal,
        } = call;
        self.last.time = time;
        self.last.stack = stack;
        self.last.func = func;
        self.last.address = address;
        self.last.internal = internal;
    }

    #[cold]
    fn insert_among_others(&mut self, correlation: u32, call: PendingCall) {
        if self.has_last && self.last_id != correlation {
            self.rest.insert(self.last_id, self.last);
        }
        if !self.rest.is_empty() {
            self.rest.remove(&correlation);
        }
        self.set_last(correlation, call);
    }

    /// The call kept apart, when it has this id.
    #[inline(always)]
    fn last_with(&self, correlation: u32) -> Option<&PendingCall> {
        (self.has_last && self.last_id == correlation).then_some(&self.last)
    }

    #[inline]
    fn remove(&mut self, correlation: u32) -> Option<PendingCall> {
        if self.last_with(correlation).is_some() {
            self.has_last = false;
            Some(self.last)
        } else if self.rest.is_empty() {
            None
        } else {
            self.rest.remove(&correlation)
        }
    }

    fn contains(&self, correlation: u32) -> bool {
        self.last_with(correlation).is_some() || self.rest.contains_key(&correlation)
    }

    fn len(&self) -> usize {
        self.rest.len() + usize::from(self.has_last)
    }

    fn retain(&mut self, keep: impl Fn(&PendingCall) -> bool) {
        self.has_last = self.has_last && keep(&self.last);
        self.rest.retain(|_, call| keep(call));
    }
}

#[derive(Clone, Debug)]
pub struct KernelSnap {
    pub name: u32,
    pub proc: u32,
    pub start: u64,
    pub end: u64,
    pub cuda_stream: u32,
    /// Seen at its launch on the host (`start` = `end` = the launch), not
    /// as its run on the device.
    pub launch: bool,
}

/// Host memory (pinned, pageable) rather than the device's own. Managed
/// memory is not host memory here: CUPTI does not say where its pages are,
/// and all of it may be on the device at once, so a device budget counts it
/// in full.
pub fn is_host_kind(kind: u8) -> bool {
    use gmem_prof_traces::record::memory_kind::{PAGEABLE, PINNED};
    matches!(kind & 7, PINNED | PAGEABLE)
}

pub struct DeviceState {
    pub live: u64,
    /// Live bytes in the device's own memory: every kind but host memory
    /// (pinned, pageable); managed memory counts in full (`is_host_kind`).
    pub on_device: u64,
    pub on_device_peak: u64,
    pub on_device_peak_time: u64,
    pub by_kind: [u64; KINDS],
    pub reserved: u64,
    pub reserved_peak: u64,
    pub curve: Curve,
    pub kind_curves: [Curve; KINDS],
    pub kind_peaks: [u64; KINDS],
    pub reserved_curve: Curve,
    pub peak: u64,
    pub peak_time: u64,
    pub peak_by_kind: [u64; KINDS],
    /// A new peak was reached and its site breakdown is not copied yet.
    peak_dirty: bool,
    /// (site, bytes, count) at the peak.
    pub peak_sites: Vec<(u32, u64, u64)>,
    /// Raw sites that ever allocated on this device.
    pub sites: Vec<u32>,
    active_kernels: VecDeque<KernelSnap>,
    /// The last kernel launched on each CUDA stream of each process (traced
    /// as launches): at the peak, what the program had just launched.
    last_launches: Vec<KernelSnap>,
    pub kernels_at_peak: Vec<KernelSnap>,
    want_next_kernel: bool,
    pub next_kernel: Option<KernelSnap>,
    frag_dirty: bool,
    pub frag: Samples<u16>,
    pub largest_free: Samples<u64>,
    /// (time, F, free, largest) at the worst sample.
    pub frag_worst: Option<(u64, f64, u64, u64)>,
    /// Used on the device as NVML said (`nvidia-smi`), where sampled.
    pub device_view_used: Samples<u64>,
    /// Kernels started in each bucket.
    pub kernel_counts: Counts,
}

impl DeviceState {
    fn new() -> Self {
        DeviceState {
            live: 0,
            on_device: 0,
            on_device_peak: 0,
            on_device_peak_time: 0,
            by_kind: [0; KINDS],
            reserved: 0,
            reserved_peak: 0,
            curve: Curve::default(),
            kind_curves: Default::default(),
            kind_peaks: [0; KINDS],
            reserved_curve: Curve::default(),
            peak: 0,
            peak_time: 0,
            peak_by_kind: [0; KINDS],
            peak_dirty: false,
            peak_sites: Vec::new(),
            sites: Vec::new(),
            active_kernels: VecDeque::new(),
            last_launches: Vec::new(),
            kernels_at_peak: Vec::new(),
            want_next_kernel: false,
            next_kernel: None,
            frag_dirty: false,
            frag: Samples::default(),
            largest_free: Samples::default(),
            frag_worst: None,
            device_view_used: Samples::default(),
            kernel_counts: Counts::default(),
        }
    }
}

/// What the trace tracked on a device when process `proc` sampled the
/// device's own view at `time` (the sample's own time, to find it again).
#[derive(Clone, Copy, Debug)]
pub struct TrackedAt {
    pub proc: u32,
    pub time: u64,
    pub device: u32,
    /// Device memory live in the trace (every process of the run).
    pub tracked: u64,
    /// What stream-ordered pools on the device held beyond their live
    /// allocations then.
    pub pools_unused: u64,
    /// What framework allocators seen from the inside held in their
    /// segments with no tensor in it then (their cache; part of `tracked`).
    pub framework_free: u64,
}

/// Device states by id. The sweep looks one up for almost every event, and
/// nearly always the one it found last: that one is checked first, so the
/// usual lookup is one comparison rather than a tree search.
#[derive(Default)]
pub struct Devices {
    states: Vec<DeviceState>,
    by_id: BTreeMap<u32, usize>,
    last: Option<(u32, usize)>,
}

impl Devices {
    #[inline]
    fn get_or_insert(&mut self, d: u32) -> &mut DeviceState {
        let i = match self.last {
            Some((id, i)) if id == d => i,
            _ => self.find_or_insert(d),
        };
        &mut self.states[i]
    }

    #[cold]
    fn find_or_insert(&mut self, d: u32) -> usize {
        let next = self.states.len();
        let i = *self.by_id.entry(d).or_insert(next);
        if i == next {
            self.states.push(DeviceState::new());
        }
        self.last = Some((d, i));
        i
    }

    pub fn get(&self, d: u32) -> Option<&DeviceState> {
        self.by_id.get(&d).map(|&i| &self.states[i])
    }

    pub fn get_mut(&mut self, d: u32) -> Option<&mut DeviceState> {
        self.by_id.get(&d).map(|&i| &mut self.states[i])
    }

    /// The device ids, in ascending order.
    pub fn ids(&self) -> Vec<u32> {
        self.by_id.keys().copied().collect()
    }
}

/// A failed allocation as seen during the sweep.
#[derive(Clone, Debug)]
pub struct OomRaw {
    pub time: u64,
    pub proc: u32,
    pub tid: u32,
    pub device: u32,
    pub func: ApiFunc,
    pub bytes: u64,
    pub result: u32,
    pub site: u32,
    pub outcome: OomOutcome,
    pub device_live: u64,
    pub largest_free: Option<u64>,
    pub live_by_site: Vec<(u32, u64, u64)>,
}

/// Ends the open failures of the request (`bytes` on thread `tid`) with
/// `outcome`: the request was later retried, or succeeded. Cheap when none
/// is open (every successful allocation call asks).
fn close_failures(
    open: &mut Vec<(u32, u64, usize)>,
    ooms: &mut [OomRaw],
    tid: u32,
    bytes: u64,
    outcome: OomOutcome,
) {
    if open.is_empty() {
        return;
    }
    open.retain(|&(ftid, fbytes, i)| {
        if ftid == tid && fbytes == bytes {
            ooms[i].outcome = outcome;
            false
        } else {
            true
        }
    });
}

/// Sets `peak_sites` to (site, bytes, count) of every site holding memory
/// on the device now.
fn live_sites(dev: &mut DeviceState, sites: &[SiteStats]) {
    // Into the vector of the previous peak: a growing program reaches a
    // new peak thousands of times, and a new vector each time was grown
    // from nothing.
    dev.peak_sites.clear();
    dev.peak_sites.extend(sites_holding(&dev.sites, sites));
}

pub struct ProcState {
    pub defs: ProcDefs,
    /// (device, site + 1) of call sites by stack id: a cache of `site_index`.
    call_sites: Vec<(u32, u32)>,
    pending: PendingCalls,
    pending_by_address: FastMap<u64, u32>,
    last_device: u32,
    pub allocations: u64,
    pub frees: u64,
    pub failed_calls: u64,
    pub unmatched_frees: u64,
    /// Addresses where memory another process shared (CUDA IPC) was just
    /// mapped, until CUPTI's record of the mapping comes.
    ipc_opened: Vec<u64>,
    /// Mappings of other processes' memory: (address → bytes). Counted in
    /// the process that allocated it, not again here.
    ipc_mapped: FastMap<u64, u64>,
    pub ipc_mapped_bytes: u64,
    pub ipc_mapped_peak: u64,
    pub live: u64,
    pub peak: u64,
    pub peak_time: u64,
    pub curve: Curve,
    /// Its allocations through calls of its own (module globals, which
    /// CUDA registers as it loads modules, left out), counted over time:
    /// the buckets where the count rose are the time it spent allocating,
    /// over which growth is judged (`growth::judged_buckets`).
    pub own_allocations: u64,
    pub own_allocation_curve: Curve,
    /// Per thread, when a CUDA library (cuBLAS, cuDNN, …) last allocated
    /// memory of its own on it: a tensor the framework allocates on that
    /// thread right after is the library's workspace
    /// (`LIBRARY_WORKSPACE_NS`).
    library_allocations: Vec<(u32, u64)>,
    /// Whether a stack passes through a CUDA library, by stack id.
    library_stacks: FastMap<u32, bool>,
    /// What a tensor's stack says it is, by stack id (`roles::stack_hint`).
    role_hints: FastMap<u32, Hint>,
    pub first_time: Option<u64>,
    pub last_time: u64,
    pub ended: Option<u64>,
    /// Failed allocations not yet known to be recovered: (tid, bytes, index
    /// into `Engine::ooms`).
    open_failures: Vec<(u32, u64, usize)>,
    /// The inside of a framework allocator, when the trace holds its events
    /// (or, for PyTorch's cudaMallocAsync backend, they are made here).
    pub framework: Option<Box<FrameworkState>>,
    /// The process may run PyTorch's cudaMallocAsync backend
    /// (`ProcDefs::torch_not_attached`): its tensors are the stream-ordered
    /// allocations from `torch_pools`.
    torch_async: bool,
    /// The CUDA pools PyTorch's tensors came from (the devices' default
    /// pools), known once a tensor was allocated from each.
    torch_pools: Vec<PoolId>,
    /// Per stack id: whether it passes through PyTorch's CUDA allocator.
    torch_stacks: FastMap<u32, bool>,
    /// Its steps, from its first `Step` record on.
    pub steps: Option<Box<ProcSteps>>,
    /// Its ranges and marks, from its first on.
    pub ranges: Option<Box<ProcRanges>>,
    /// The recorded window, when only a part of the run was recorded.
    pub window: Option<WindowState>,
}

/// A process's recorded window: when it opened and closed, and what was
/// live as it opened (CUDA's view, and the tensors').
#[derive(Clone, Copy, Debug)]
pub struct WindowState {
    pub opened: u64,
    pub closed: Option<u64>,
    pub live: u64,
    pub tensors_live: Option<u64>,
}

/// What a tensor's stack says it is (`roles::stack_hint`; a stack through
/// a CUDA library's module is its workspace), once per stack.
fn tensor_hint(cache: &mut FastMap<u32, Hint>, defs: &ProcDefs, stack: u32) -> Hint {
    *cache.entry(stack).or_insert_with(|| {
        if defs.stack_in_cuda_library(stack) {
            Hint::Known(Role::Workspace)
        } else {
            stack_hint(defs, stack)
        }
    })
}

/// Whether a call's device-side record may carry another call's correlation
/// id, so that the call must also be found by address: calls on an address
/// that existed before them (a VMM map, a host registration, …). Allocation
/// calls return a new address, and their records carry their own id (the
/// real samples' sites depend on it); leaving them out saves two hash
/// operations per allocation.
fn also_by_address(func: ApiFunc) -> bool {
    !matches!(
        func,
        ApiFunc::MEM_ALLOC
            | ApiFunc::MEM_ALLOC_PITCH
            | ApiFunc::MEM_ALLOC_MANAGED
            | ApiFunc::MEM_ALLOC_HOST
            | ApiFunc::MEM_HOST_ALLOC
            | ApiFunc::MEM_ALLOC_ASYNC
            | ApiFunc::MEM_ALLOC_FROM_POOL_ASYNC
    )
}

impl ProcState {
    fn new() -> Self {
        ProcState {
            defs: ProcDefs::default(),
            call_sites: Vec::new(),
            pending: PendingCalls::default(),
            pending_by_address: FastMap::default(),
            last_device: 0,
            allocations: 0,
            frees: 0,
            failed_calls: 0,
            unmatched_frees: 0,
            ipc_opened: Vec::new(),
            ipc_mapped: FastMap::default(),
            ipc_mapped_bytes: 0,
            ipc_mapped_peak: 0,
            live: 0,
            peak: 0,
            peak_time: 0,
            curve: Curve::default(),
            own_allocations: 0,
            own_allocation_curve: Curve::default(),
            library_allocations: Vec::new(),
            library_stacks: FastMap::default(),
            role_hints: FastMap::default(),
            first_time: None,
            last_time: 0,
            ended: None,
            open_failures: Vec::new(),
            framework: None,
            torch_async: false,
            torch_pools: Vec::new(),
            torch_stacks: FastMap::default(),
            steps: None,
            ranges: None,
            window: None,
        }
    }

    /// The call that caused a device-side allocation: by correlation id,
    /// checked against the address when the call knew it; else by address
    /// (VMM maps can carry another call's correlation id).
    #[inline(always)]
    fn take_call(&mut self, correlation: u32, address: u64) -> Option<Caller> {
        // Usually the call is the one kept apart, for a new address: it is
        // read in place.
        if let Some(c) = self.pending.last_with(correlation) {
            if c.address == 0 || (c.address == address && !also_by_address(c.func)) {
                let caller = c.caller();
                self.pending.has_last = false;
                return Some(caller);
            }
        }
        self.take_call_among_others(correlation, address)
            .map(|c| c.caller())
    }

    /// `take_call` when the call is not simply the one kept apart (kept out
    /// of line: the sweep's loop is hot and this path is rare in it).
    #[inline(never)]
    fn take_call_among_others(&mut self, correlation: u32, address: u64) -> Option<PendingCall> {
        if let Some(c) = self.pending.remove(correlation) {
            if c.address == 0 || c.address == address {
                if c.address != 0
                    && also_by_address(c.func)
                    && self.pending_by_address.get(&c.address) == Some(&correlation)
                {
                    self.pending_by_address.remove(&c.address);
                }
                return Some(c);
            }
            // The call of another address: it waits for its own record.
            self.pending.insert(correlation, c);
        }
        let corr = self.pending_by_address.remove(&address)?;
        self.pending.remove(corr)
    }

    pub fn pid(&self) -> u32 {
        self.defs.process.as_ref().map_or(0, |p| p.pid)
    }
}

pub struct Engine {
    pub axis: Option<Axis>,
    pub now: u64,
    pub procs: Vec<ProcState>,
    live: FastMap<(u32, u64), Live>,
    pub sites: Vec<SiteStats>,
    site_index: FastMap<SiteKey, u32>,
    pub devices: Devices,
    pub regions: Regions,
    pub ooms: Vec<OomRaw>,
    /// Device memory the trace had live at each sample of the device's own
    /// view, in sweep order.
    pub device_views: Vec<TrackedAt>,
    pub late_events: u64,
    /// Events left out for claiming `EVENT_BYTES_LIMIT` or more.
    pub impossible_sizes: u64,
    pub memory_events: u64,
    pub api_calls: u64,
    pub kernels: u64,
    /// Event rows for an exporter, when one asked (`analyze_with_events`).
    pub rows: Option<Vec<EventRow>>,
    /// The NVTX range whose instances are the steps (`--step-range`):
    /// (domain, name), any domain when `None`.
    pub step_range: Option<(Option<String>, String)>,
}

/// Sizes an event may claim are below this (1 PiB, beyond any GPU's
/// address space). A larger one can only come from a damaged or faulty
/// trace: `Engine::apply` leaves the event out and counts it, so that the
/// sums of sizes (live bytes, reserved, totals) cannot overflow, and the
/// report says why. A framework allocator's out-of-memory error is the
/// exception: a request that failed is in no sum.
pub const EVENT_BYTES_LIMIT: u64 = 1 << 50;

/// Whether an event claims `EVENT_BYTES_LIMIT` bytes or more anywhere.
#[inline(always)]
fn claims_impossible_bytes(e: &Event) -> bool {
    // The limit is a power of two: sizes OR-ed stay below it exactly when
    // each does.
    let bytes = match e {
        Event::Memory(m) => m.bytes | m.pool_size,
        Event::Api(a) => a.bytes,
        // An allocator's out-of-memory error holds nothing: its request,
        // however large (a size computed wrong is a cause worth naming),
        // is only reported.
        Event::Allocator(a) if a.action.has_oom_fields() => 0,
        Event::Allocator(a) => a.bytes,
        Event::Pool { size, .. } => *size,
        _ => 0,
    };
    bytes >= EVENT_BYTES_LIMIT
}

impl Engine {
    pub fn new(procs: u32) -> Self {
        Engine {
            step_range: None,
            axis: None,
            now: 0,
            procs: (0..procs).map(|_| ProcState::new()).collect(),
            live: FastMap::default(),
            sites: Vec::new(),
            site_index: FastMap::default(),
            devices: Devices::default(),
            regions: Regions::default(),
            ooms: Vec::new(),
            device_views: Vec::new(),
            late_events: 0,
            impossible_sizes: 0,
            memory_events: 0,
            api_calls: 0,
            kernels: 0,
            rows: None,
        }
    }

    /// Adds an event row when rows are wanted; `device_live`/`reserved` are
    /// filled from the device's state after the event.
    fn row(&mut self, t: u64, proc: u32, mut r: EventRow) {
        let Some(rows) = &mut self.rows else { return };
        let start = self.axis.as_ref().map_or(t, |a| a.start);
        r.time_ns = t.saturating_sub(start);
        r.end_ns = r.end_ns.saturating_sub(start).max(r.time_ns);
        r.pid = self.procs[proc as usize].pid();
        if let Some(d) = self.devices.get(r.device) {
            r.device_live = d.live;
            r.device_reserved = d.reserved;
        }
        rows.push(r);
    }

    /// A row for a tensor a framework view allocated or freed, when rows
    /// are wanted.
    fn tensor_row(
        &mut self,
        t: u64,
        proc: u32,
        device: u32,
        address: u64,
        change: Option<crate::framework::TensorChange>,
    ) {
        let Some(c) = change.filter(|_| self.rows.is_some()) else {
            return;
        };
        self.row(
            t,
            proc,
            EventRow {
                address,
                bytes: c.bytes,
                tensor_site: Some((proc, c.site)),
                requested: Some(c.requested),
                allocated: Some(c.allocated),
                reserved: Some(c.reserved),
                ..EventRow::new(
                    if c.alloc {
                        EventKind::TensorAlloc
                    } else {
                        EventKind::TensorFree
                    },
                    t,
                    device,
                )
            },
        );
    }

    fn memory_row(what: EventKind, t: u64, m: &MemoryEv, site: Option<u32>) -> EventRow {
        EventRow {
            kind: m.kind,
            address: m.address,
            bytes: m.bytes,
            site,
            correlation: m.correlation,
            ..EventRow::new(what, t, m.device)
        }
    }

    pub fn apply_defs(&mut self, proc: u32, defs: Vec<Record>) {
        let st = &mut self.procs[proc as usize];
        let mut allocator = false;
        for r in defs {
            if let Record::Device(d) = &r {
                self.devices.get_or_insert(d.device);
            }
            allocator |= matches!(r, Record::Allocator(_));
            st.defs.add(r);
        }
        if allocator && !st.torch_async {
            st.torch_async = st.defs.torch_not_attached();
        }
    }

    fn device(&mut self, d: u32) -> &mut DeviceState {
        self.devices.get_or_insert(d)
    }

    #[inline]
    fn site(&mut self, key: SiteKey) -> u32 {
        // Most sites are allocation calls with a stack: a per-proc table
        // by stack id answers them without hashing the whole key.
        let cached = key.class == SiteClass::Call && key.stack != 0 && key.stack < SITE_CACHE_IDS;
        if cached {
            let by_stack = &self.procs[key.proc as usize].call_sites;
            if let Some(&(device, site)) = by_stack.get(key.stack as usize) {
                if site != 0 && device == key.device {
                    return site - 1;
                }
            }
        }
        self.site_not_cached(key, cached)
    }

    #[cold]
    fn site_not_cached(&mut self, key: SiteKey, cache: bool) -> u32 {
        let i = self.site_slow(key);
        if cache {
            let by_stack = &mut self.procs[key.proc as usize].call_sites;
            let at = key.stack as usize;
            if by_stack.len() <= at {
                by_stack.resize(at + 1, (0, 0));
            }
            by_stack[at] = (key.device, i + 1);
        }
        i
    }

    fn site_slow(&mut self, key: SiteKey) -> u32 {
        if let Some(&i) = self.site_index.get(&key) {
            return i;
        }
        let i = self.sites.len() as u32;
        self.sites.push(SiteStats {
            proc: key.proc,
            stack: key.stack,
            device: key.device,
            class: key.class,
            func: ApiFunc(key.func),
            kinds: 0,
            failed: 0,
            held: Holding::default(),
            framework_tensors: false,
        });
        self.site_index.insert(key, i);
        self.device(key.device).sites.push(i);
        i
    }

    /// Applies events of one process, in order (see `apply`).
    pub fn apply_all(&mut self, proc: u32, events: &[TimedEvent]) {
        // One call per run of events rather than per event: `apply` is
        // inlined here, and its entry and exit are paid once.
        let Some(first) = events.first() else { return };
        let first_time = first.time.max(self.now);
        for (i, e) in events.iter().enumerate() {
            prefetch_passing(events.as_ptr().wrapping_add(i + PREFETCH_AHEAD));
            self.apply(proc, e);
        }
        // The process's first and last times, as each event's would set them
        // (`apply` reads neither).
        let st = &mut self.procs[proc as usize];
        st.first_time.get_or_insert(first_time);
        st.last_time = self.now;
    }

    /// Applies one event. Events must come in (time, seq) order; one that
    /// comes later than that is applied at the time already reached.
    #[inline(always)]
    #[expect(
        clippy::too_many_lines,
        reason = "the sweep's per-event dispatch, kept whole on the hot path (see the README's notes on where the time goes)"
    )]
    fn apply(&mut self, proc: u32, e: &TimedEvent) {
        if claims_impossible_bytes(&e.event) {
            self.impossible_sizes += 1;
            return;
        }
        let t = if e.time < self.now {
            self.late_events += 1;
            self.now
        } else {
            e.time
        };
        match &mut self.axis {
            None => self.axis = Some(Axis::new(t)),
            Some(axis) => {
                if axis.leaves_bucket(t) {
                    self.sample_fragmentation();
                }
            }
        }
        if let Some(axis) = &mut self.axis {
            axis.advance(t);
        }
        self.now = t;
        // By reference: the event is read in place, not copied out.
        match &e.event {
            Event::Memory(m) => {
                // Rare: checked only while an IPC mapping is pending or held.
                // A mapping of another process's memory is not one of this
                // process's memory events.
                let st = &self.procs[proc as usize];
                if !(st.ipc_opened.is_empty() && st.ipc_mapped.is_empty())
                    && self.ipc_mapping(proc, m)
                {
                    return;
                }
                self.memory_events += 1;
                if m.alloc {
                    let site = self.alloc(proc, t, m);
                    if self.rows.is_some() {
                        let r = Self::memory_row(EventKind::Alloc, t, m, Some(site));
                        self.row(t, proc, r);
                    }
                } else {
                    let site = self.free(proc, t, m.address);
                    if self.rows.is_some() {
                        let r = Self::memory_row(EventKind::Free, t, m, site);
                        self.row(t, proc, r);
                    }
                }
            }
            Event::Api(call) => {
                self.api_calls += 1;
                self.api(proc, t, call);
            }
            &Event::Pool {
                op,
                address,
                size,
                device,
            } => {
                let size = if op == 2 { 0 } else { size };
                let pool = self.pool_id(proc, device, address);
                self.set_pool_size(device, pool, size);
                if self.procs[proc as usize].torch_async {
                    self.torch_async_change(proc, t, device, pool, None);
                }
            }
            &Event::Kernel {
                end,
                name,
                device,
                stream: cuda_stream,
                launch,
            } => {
                self.kernels += 1;
                let k = KernelSnap {
                    name,
                    proc,
                    start: t,
                    end,
                    cuda_stream,
                    launch,
                };
                let dev = self.devices.get_or_insert(device);
                if let Some(axis) = &self.axis {
                    dev.kernel_counts.add(axis);
                }
                if dev.want_next_kernel && t >= dev.peak_time {
                    dev.want_next_kernel = false;
                    dev.next_kernel = Some(k.clone());
                }
                if launch {
                    let same_stream =
                        |x: &&mut KernelSnap| x.proc == proc && x.cuda_stream == cuda_stream;
                    match dev.last_launches.iter_mut().find(same_stream) {
                        Some(last) => *last = k,
                        None => dev.last_launches.push(k),
                    }
                } else {
                    while dev.active_kernels.front().is_some_and(|f| f.end <= t) {
                        dev.active_kernels.pop_front();
                    }
                    dev.active_kernels.push_back(k);
                }
                if self.rows.is_some() {
                    let st = &self.procs[proc as usize];
                    let text = st.defs.strings.get(&name).cloned();
                    self.row(
                        t,
                        proc,
                        EventRow {
                            end_ns: end,
                            cuda_stream,
                            name: Some(text.unwrap_or_else(|| format!("kernel#{name}"))),
                            ..EventRow::new(EventKind::Kernel, t, device)
                        },
                    );
                }
            }
            Event::Allocator(a) => self.allocator_event(proc, t, a),
            &Event::DeviceView { device, used } => {
                let tracked = self.device(device).on_device;
                let pools_unused = self.regions.pools_unused(device);
                let framework_free = self
                    .procs
                    .iter()
                    .filter_map(|s| s.framework.as_deref())
                    .filter_map(|f| f.devices.get(&device))
                    .filter(|v| v.allocator != TORCH_ASYNC)
                    .map(|v| v.reserved.saturating_sub(v.allocated))
                    .sum();
                self.device_views.push(TrackedAt {
                    proc,
                    time: e.time,
                    device,
                    tracked,
                    pools_unused,
                    framework_free,
                });
                if let Some(axis) = &self.axis {
                    let dev = self.devices.get_or_insert(device);
                    dev.device_view_used.put(axis, axis.current, Some(used));
                }
            }
            &Event::Copy {
                dst,
                src,
                bytes,
                from_host,
            } => {
                self.api_calls += 1;
                let st = &mut self.procs[proc as usize];
                if let (Some(fw), Some(axis)) = (st.framework.as_deref_mut(), self.axis.as_ref()) {
                    fw.copied(axis, dst, src, bytes, from_host);
                }
            }
            &Event::CallDevice { device } => {
                // The failed call that follows is charged to this device.
                self.procs[proc as usize].last_device = device;
            }
            Event::End => self.process_end(proc, t),
            &Event::Step { number, source } if self.step_range.is_none() => {
                self.step(proc, t, number, source);
            }
            Event::Step { .. } => {}
            &Event::Window { open } => self.window_edge(proc, t, open),
            Event::RangeBegin(b) => self.range_begin(proc, t, b),
            &Event::RangeEnd { id } => self.range_end(proc, t, id),
            &Event::Mark { tid, domain, name } => {
                let r = self.procs[proc as usize]
                    .ranges
                    .get_or_insert_with(Box::default);
                r.mark_count += 1;
                if r.marks.len() < gmem_prof_model::MARKS_KEPT {
                    r.marks.push((t, tid, domain, name));
                }
            }
        }
    }

    /// An event inside a framework allocator (rare next to driver events:
    /// kept out of the sweep's loop).
    #[inline(never)]
    fn allocator_event(&mut self, proc: u32, t: u64, a: &AllocatorEv) {
        let axis = self.axis.as_ref().expect("axis set before events");
        let st = &mut self.procs[proc as usize];
        let fw = st.framework.get_or_insert_with(|| {
            if a.allocator == TORCH_ASYNC {
                // Its error before any of its tensors.
                return Box::new(FrameworkState::new(AllocConfig {
                    cuda_malloc_async: true,
                    ..AllocConfig::default()
                }));
            }
            let settings = st
                .defs
                .allocators
                .iter()
                .find(|i| i.allocator == a.allocator)
                .map_or("", |i| i.settings.as_str());
            Box::new(FrameworkState::new(AllocConfig::parse(settings)))
        });
        let driver = LiveMemory {
            live: &self.live,
            proc,
        };
        // PyTorch creates a cuBLAS handle (cuBLAS allocates for itself),
        // then gives it a workspace from its own allocator, on the same
        // thread, within microseconds; the workspace is kept for the
        // process's life. Tensors' stacks hold only Python frames (or the
        // autograd node), so the thread and the moment are the evidence.
        let library = a.action == AllocatorAction::ALLOC
            && st
                .library_allocations
                .iter()
                .any(|&(tid, at)| tid == a.tid && t >= at && t - at <= LIBRARY_WORKSPACE_NS);
        let hint = if library {
            Hint::AfterLibrary
        } else if a.action == AllocatorAction::ALLOC {
            tensor_hint(&mut st.role_hints, &st.defs, a.stack)
        } else {
            Hint::Lifetime
        };
        let change = fw.apply(t, axis, a, hint, &driver);
        if let (Some(c), Some(steps)) = (&change, st.steps.as_deref_mut()) {
            let tensors = steps.tensors.get_or_insert_with(Tracker::default);
            let now = fw.sites[c.site as usize].held.live;
            let (before, live) = if c.alloc {
                (now - c.bytes, tensors.live + c.bytes)
            } else {
                (now + c.bytes, tensors.live.saturating_sub(c.bytes))
            };
            tensors.changed(c.site, before, live, t);
        }
        if let (Some(c), Some(ranges)) = (&change, st.ranges.as_deref_mut()) {
            let now = fw.sites[c.site as usize].held.live;
            let before = if c.alloc {
                now - c.bytes
            } else {
                now + c.bytes
            };
            ranges.tensors_changed(c.site, before, c.bytes, c.alloc, t);
        }
        // A view made after its device reached its peak (the first
        // segment's driver allocation comes before the allocator's record
        // of it) joins that peak.
        if self.devices.get(a.device()).is_some_and(|d| d.peak_dirty) {
            fw.device_peak_joined(a.device(), t);
        }
        self.tensor_row(t, proc, a.device(), a.address, change);
    }

    /// The process finished a step: what it kept, and how high it went.
    fn step(&mut self, proc: u32, t: u64, number: u64, source: u8) {
        let st = &mut self.procs[proc as usize];
        let steps = st.steps.get_or_insert_with(|| {
            // Step 1 began with the process, with nothing live: every site
            // holding memory now kept it in step 1.
            let holding = self
                .sites
                .iter()
                .enumerate()
                .filter(|(_, s)| s.proc == proc && s.held.live > 0)
                .map(|(i, _)| i as u32);
            let driver = Tracker::first(st.live, st.peak, st.peak_time, holding);
            let tensors = st.framework.as_deref().map(|fw| {
                let live = fw.devices.values().map(|d| d.allocated).sum();
                let (peak, peak_time) = fw
                    .devices
                    .values()
                    .map(|d| (d.allocated_peak, d.allocated_peak_time))
                    .max()
                    .unwrap_or_default();
                let holding = fw
                    .sites
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.held.live > 0)
                    .map(|(i, _)| i as u32);
                Tracker::first(live, peak, peak_time, holding)
            });
            Box::new(ProcSteps::new(driver, tensors, st.first_time.unwrap_or(t)))
        });
        let sites = &self.sites;
        let driver = steps.driver.end_step(|i| sites[i as usize].held.live);
        let tensors = match (steps.tensors.as_mut(), st.framework.as_deref()) {
            (Some(tracker), Some(fw)) => Some(tracker.end_step(|i| fw.sites[i as usize].held.live)),
            _ => None,
        };
        if let Some(fw) = st.framework.as_deref_mut() {
            fw.end_step(number);
        }
        steps.count += 1;
        steps.sources |= 1 << (source & 7);
        if steps.measured.len() < crate::steps::STEPS_MEASURED {
            steps.measured.push(Measured {
                peak: driver.peak,
                kept: driver.kept,
                tensors_peak: tensors.as_ref().map_or(0, |x| x.peak),
                tensors_kept: tensors.as_ref().map_or(0, |x| x.kept),
            });
        }
        if steps.done.len() < gmem_prof_model::STEPS_KEPT {
            let start = steps.done.last().map_or(steps.start, |s| s.end);
            steps.done.push(FinishedStep {
                number,
                start,
                end: t,
                driver,
                tensors,
            });
        }
    }

    /// The recorded window opened (what was live then came just before) or
    /// closed. The steps are measured from its opening: the step that
    /// ended as it opened is not in the trace, and the next begins here
    /// with what was live.
    fn window_edge(&mut self, proc: u32, t: u64, open: bool) {
        let st = &mut self.procs[proc as usize];
        if !open {
            if let Some(w) = st.window.as_mut() {
                w.closed = Some(t);
            }
            return;
        }
        let tensors_live = st
            .framework
            .as_deref()
            .map(|fw| fw.devices.values().map(|d| d.allocated).sum::<u64>());
        st.window = Some(WindowState {
            opened: t,
            closed: None,
            live: st.live,
            tensors_live,
        });
        st.steps = Some(Box::new(ProcSteps::new(
            Tracker::starting(st.live, t),
            tensors_live.map(|live| Tracker::starting(live, t)),
            t,
        )));
    }

    /// A range of the program's began: it tracks what is live from here.
    fn range_begin(&mut self, proc: u32, t: u64, b: &RangeBeginEv) {
        let st = &mut self.procs[proc as usize];
        let tensors_live = st
            .framework
            .as_deref()
            .map(|fw| fw.devices.values().map(|d| d.allocated).sum());
        let live = st.live;
        let is_step = self.step_range.as_ref().is_some_and(|(domain, name)| {
            let text = |id: u32| st.defs.strings.get(&id).map_or("", String::as_str);
            text(b.name) == name
                && domain
                    .as_ref()
                    .is_none_or(|d| (if b.domain != 0 { text(b.domain) } else { "" }) == d)
        });
        if let Some(fw) = st.framework.as_deref_mut() {
            let text = |id: u32| st.defs.strings.get(&id).map_or("", String::as_str);
            let domain = if b.domain != 0 { text(b.domain) } else { "" };
            if let Some(phase) = Phase::of_range(domain, text(b.name)) {
                if let Some(axis) = self.axis.as_ref() {
                    fw.phase_begin(axis, b.id, phase);
                }
            }
        }
        let ranges = st.ranges.get_or_insert_with(Box::default);
        ranges.begin(t, b, live, tensors_live, is_step);
    }

    /// A range of the program's ended.
    fn range_end(&mut self, proc: u32, t: u64, id: u64) {
        let st = &mut self.procs[proc as usize];
        if let (Some(fw), Some(axis)) = (st.framework.as_deref_mut(), self.axis.as_ref()) {
            fw.phase_end(axis, id);
        }
        let Some(ranges) = st.ranges.as_deref_mut() else {
            return;
        };
        let sites = &self.sites;
        let fw = st.framework.as_deref();
        let is_step = ranges.end(
            t,
            id,
            |i| sites[i as usize].held.live,
            |i| fw.map_or(0, |fw| fw.sites[i as usize].held.live),
        );
        if is_step {
            let number = st.steps.as_deref().map_or(0, |s| s.count) + 1;
            self.step(proc, t, number, crate::steps::RANGE_SOURCE);
        }
    }

    fn pool_id(&mut self, proc: u32, device: u32, address: u64) -> PoolId {
        let pid = self.procs[proc as usize].pid();
        self.regions.pool_id(proc, pid, device, address)
    }

    /// A pool's size as a record states it.
    #[inline(always)]
    fn set_pool_size(&mut self, device: u32, pool: PoolId, size: u64) {
        let delta = self.regions.set_pool_size(pool, size);
        if delta != 0 {
            let axis = self.axis.as_ref().expect("axis set before events");
            let dev = self.devices.get_or_insert(device);
            dev.reserved = (dev.reserved as i128 + delta).max(0) as u64;
            dev.reserved_peak = dev.reserved_peak.max(dev.reserved);
            dev.reserved_curve.set(axis, dev.reserved);
            dev.frag_dirty = true;
        }
    }

    /// Returns the raw site charged.
    #[expect(
        clippy::too_many_lines,
        reason = "the sweep's hot path for an allocation, kept whole so that it inlines into apply"
    )]
    fn alloc(&mut self, proc: u32, t: u64, m: &MemoryEv) -> u32 {
        let MemoryEv {
            kind,
            address,
            bytes,
            device,
            context,
            correlation,
            ..
        } = *m;
        let pool = m.pool();
        let st = &mut self.procs[proc as usize];
        st.last_device = device;
        let call = st.take_call(correlation, address);
        let call_stack = call.map_or(0, |c| c.stack);
        let static_kind = kind == memory_kind::DEVICE_STATIC || kind == memory_kind::MANAGED_STATIC;
        let key = match call {
            _ if static_kind => SiteKey {
                proc,
                stack: 0,
                device,
                class: SiteClass::Static,
                func: 0,
            },
            Some(c) => SiteKey {
                proc,
                stack: c.stack,
                device,
                class: if c.internal {
                    SiteClass::Profiler
                } else {
                    SiteClass::Call
                },
                func: if c.stack == 0 { c.func.0 } else { 0 },
            },
            None => SiteKey {
                proc,
                stack: 0,
                device,
                class: if address == 0 {
                    SiteClass::GraphPool
                } else {
                    SiteClass::NoCall
                },
                func: 0,
            },
        };
        let own = key.class == SiteClass::Call;
        let site = self.site(key);
        let st = &mut self.procs[proc as usize];
        st.allocations += 1;
        if own {
            st.own_allocations += 1;
            let axis = self.axis.as_ref().expect("axis set before events");
            st.own_allocation_curve.set(axis, st.own_allocations);
        }
        let vmm = context == NO_CONTEXT;
        let pool_id = pool.map(|(a, _)| self.pool_id(proc, device, a));
        let block = pool_id.map(|id| self.regions.pool_alloc(id, address, bytes));
        let st = &mut self.procs[proc as usize];
        let old = self.live.insert(
            (proc, address),
            Live {
                bytes,
                site,
                device,
                kind,
                seq: st.allocations,
                pool: block,
                vmm,
            },
        );
        if let Some(old) = old {
            // The free of the previous occupant was lost: retire it first.
            self.retire(proc, address, old, false);
        }
        if let (Some(id), Some((_, psize))) = (pool_id, pool) {
            self.set_pool_size(device, id, psize);
        }
        if vmm {
            self.regions.map(proc, device, address, bytes);
        }
        let axis = self.axis.as_ref().expect("axis set before events");
        let s = &mut self.sites[site as usize];
        s.kinds |= 1 << (kind & 7);
        let st = &mut self.procs[proc as usize];
        s.held.alloc(bytes, axis);
        st.live += bytes;
        st.curve.set(axis, st.live);
        if st.live > st.peak {
            st.peak = st.live;
            st.peak_time = t;
        }
        if let Some(steps) = st.steps.as_deref_mut() {
            steps.driver.changed(site, s.held.live - bytes, st.live, t);
        }
        if let Some(ranges) = st.ranges.as_deref_mut() {
            ranges.driver_changed(site, s.held.live - bytes, st.live, t);
        }
        let dev = self.devices.get_or_insert(device);
        let k = usize::from(kind & 7);
        dev.live += bytes;
        dev.by_kind[k] += bytes;
        if !is_host_kind(kind) {
            dev.on_device += bytes;
            if dev.on_device > dev.on_device_peak {
                dev.on_device_peak = dev.on_device;
                dev.on_device_peak_time = t;
            }
        }
        dev.curve.set(axis, dev.live);
        dev.kind_curves[k].set(axis, dev.by_kind[k]);
        dev.kind_peaks[k] = dev.kind_peaks[k].max(dev.by_kind[k]);
        if pool.is_none() {
            dev.reserved += bytes;
            dev.reserved_peak = dev.reserved_peak.max(dev.reserved);
            dev.reserved_curve.set(axis, dev.reserved);
        }
        if pool.is_some() || vmm {
            dev.frag_dirty = true;
        }
        if dev.live > dev.peak {
            dev.peak = dev.live;
            dev.peak_time = t;
            dev.peak_by_kind = dev.by_kind;
            dev.peak_dirty = true;
            dev.kernels_at_peak = dev
                .active_kernels
                .iter()
                .filter(|k| k.start <= t && t < k.end)
                .chain(&dev.last_launches)
                .cloned()
                .collect();
            dev.want_next_kernel = true;
            dev.next_kernel = None;
            for st in &mut self.procs {
                if let Some(fw) = st.framework.as_deref_mut() {
                    fw.device_peak_reached(device, t);
                }
            }
        }
        if self.procs[proc as usize].torch_async {
            self.torch_async_alloc(proc, t, m, pool_id, call_stack, site);
        }
        site
    }

    /// Under PyTorch's cudaMallocAsync backend, a stream-ordered allocation
    /// from the pool its tensors come from is a tensor of the backend's
    /// view: PyTorch counts the pool's use and size as its allocated and
    /// reserved memory (`memory_allocated`, `memory_reserved`).
    #[inline(never)]
    fn torch_async_alloc(
        &mut self,
        proc: u32,
        t: u64,
        m: &MemoryEv,
        pool: Option<PoolId>,
        stack: u32,
        site: u32,
    ) {
        let Some(pool) = pool else { return };
        let st = &mut self.procs[proc as usize];
        if stack != 0 {
            let defs = &st.defs;
            let through_torch = *st
                .torch_stacks
                .entry(stack)
                .or_insert_with(|| defs.stack_passes_through(stack, TORCH_CUDA_LIBRARY));
            if through_torch && !st.torch_pools.contains(&pool) {
                st.torch_pools.push(pool);
            }
        }
        if !st.torch_pools.contains(&pool) {
            return;
        }
        self.sites[site as usize].framework_tensors = true;
        let reserved = self.regions.pools_size(&st.torch_pools, m.device);
        let axis = self.axis.as_ref().expect("axis set before events");
        let fw = st.framework.get_or_insert_with(|| {
            Box::new(FrameworkState::new(AllocConfig {
                cuda_malloc_async: true,
                ..AllocConfig::default()
            }))
        });
        fw.set_reserved(t, axis, m.device, TORCH_ASYNC, reserved);
        let driver = LiveMemory {
            live: &self.live,
            proc,
        };
        let ev = torch_async_event(AllocatorAction::ALLOC, m.device, stack, m.address, m.bytes);
        let hint = tensor_hint(&mut st.role_hints, &st.defs, stack);
        let change = fw.apply(t, axis, &ev, hint, &driver);
        self.tensor_row(t, proc, m.device, m.address, change);
    }

    /// The backend's side of a free (`torch_async_alloc`), or of a change
    /// in a pool's size.
    #[inline(never)]
    fn torch_async_change(
        &mut self,
        proc: u32,
        t: u64,
        device: u32,
        pool: PoolId,
        freed: Option<u64>,
    ) {
        let st = &mut self.procs[proc as usize];
        if !st.torch_pools.contains(&pool) {
            return;
        }
        let Some(fw) = st.framework.as_deref_mut() else {
            return;
        };
        let axis = self.axis.as_ref().expect("axis set before events");
        let driver = LiveMemory {
            live: &self.live,
            proc,
        };
        let change = freed.and_then(|address| {
            let ev = torch_async_event(AllocatorAction::FREE, device, 0, address, 0);
            fw.apply(t, axis, &ev, Hint::Lifetime, &driver)
        });
        let reserved = self.regions.pools_size(&st.torch_pools, device);
        fw.set_reserved(t, axis, device, TORCH_ASYNC, reserved);
        self.tensor_row(t, proc, device, freed.unwrap_or(0), change);
    }

    /// Takes CUPTI's record of a mapping of another process's memory
    /// (opened through CUDA IPC), or of its unmapping, out of this
    /// process's figures: that memory is counted where it was allocated.
    #[cold]
    fn ipc_mapping(&mut self, proc: u32, m: &MemoryEv) -> bool {
        let st = &mut self.procs[proc as usize];
        if m.alloc {
            let Some(i) = st.ipc_opened.iter().position(|&a| a == m.address) else {
                return false;
            };
            st.ipc_opened.swap_remove(i);
            st.ipc_mapped.insert(m.address, m.bytes);
            st.ipc_mapped_bytes += m.bytes;
            st.ipc_mapped_peak = st.ipc_mapped_peak.max(st.ipc_mapped_bytes);
            true
        } else {
            let Some(bytes) = st.ipc_mapped.remove(&m.address) else {
                return false;
            };
            st.ipc_mapped_bytes = st.ipc_mapped_bytes.saturating_sub(bytes);
            true
        }
    }

    /// Returns the raw site of the allocation freed, if it was seen.
    fn free(&mut self, proc: u32, t: u64, address: u64) -> Option<u32> {
        let st = &mut self.procs[proc as usize];
        st.frees += 1;
        let torch_async = st.torch_async;
        match self.live.remove(&(proc, address)) {
            Some(l) => {
                self.retire(proc, address, l, true);
                if let (true, Some(p)) = (torch_async, l.pool) {
                    self.torch_async_change(proc, t, l.device, p.pool, Some(address));
                }
                Some(l.site)
            }
            None => {
                st.unmatched_frees += 1;
                None
            }
        }
    }

    /// Copies the site breakdown of a device's latest peak before the live
    /// set goes down from it.
    fn settle_peak(dev: &mut DeviceState, sites: &[SiteStats]) {
        if dev.peak_dirty {
            dev.peak_dirty = false;
            live_sites(dev, sites);
        }
    }

    /// Removes a live allocation from every total (a free, or the process's
    /// end when `counted` is false).
    fn retire(&mut self, proc: u32, address: u64, l: Live, counted: bool) {
        if self.devices.get_or_insert(l.device).peak_dirty {
            for st in &mut self.procs {
                if let Some(fw) = st.framework.as_deref_mut() {
                    fw.device_peak_left(l.device);
                }
            }
        }
        let axis = self.axis.as_ref().expect("axis set before events");
        let dev = self.devices.get_or_insert(l.device);
        Self::settle_peak(dev, &self.sites);
        let k = usize::from(l.kind & 7);
        dev.live -= l.bytes;
        dev.by_kind[k] -= l.bytes;
        if !is_host_kind(l.kind) {
            dev.on_device -= l.bytes;
        }
        dev.curve.set(axis, dev.live);
        dev.kind_curves[k].set(axis, dev.by_kind[k]);
        if l.pool.is_none() {
            dev.reserved -= l.bytes;
            dev.reserved_curve.set(axis, dev.reserved);
        }
        if l.pool.is_some() || l.vmm {
            dev.frag_dirty = true;
        }
        if let Some(p) = l.pool {
            self.regions.pool_free(p, l.bytes);
        }
        if l.vmm {
            self.regions.unmap(proc, address);
        }
        let st = &mut self.procs[proc as usize];
        st.live -= l.bytes;
        st.curve.set(axis, st.live);
        let s = &mut self.sites[l.site as usize];
        let before = s.held.live;
        s.held.release(l.bytes, axis);
        if let Some(steps) = st.steps.as_deref_mut() {
            steps.driver.changed(l.site, before, st.live, self.now);
        }
        if let Some(ranges) = st.ranges.as_deref_mut() {
            ranges.driver_changed(l.site, before, st.live, self.now);
        }
        if counted && st.allocations == l.seq {
            s.held.temporaries += 1;
        }
    }

    fn api(&mut self, proc: u32, t: u64, call: &ApiEv) {
        let ApiEv {
            func,
            result,
            bytes,
            address,
            tid,
            correlation,
            stack,
            internal,
        } = *call;
        let st = &mut self.procs[proc as usize];
        if !func.allocates() {
            if func == ApiFunc::IPC_OPEN_MEM_HANDLE && result == 0 && address != 0 {
                st.ipc_opened.push(address);
            }
            if func == ApiFunc::MEM_ADDRESS_FREE && result == 0 {
                if let Some(d) = self.regions.unreserve(proc, address, self.axis.as_ref()) {
                    self.device(d).frag_dirty = true;
                }
            }
            return;
        }
        if result != 0 {
            st.failed_calls += 1;
            if result == OUT_OF_MEMORY {
                self.out_of_memory(proc, t, call);
            }
            return;
        }
        // A success for the same request on the same thread: the allocator
        // recovered from the failures before it.
        close_failures(
            &mut st.open_failures,
            &mut self.ooms,
            tid,
            bytes,
            OomOutcome::Recovered,
        );
        if stack != 0 {
            let defs = &st.defs;
            let library = *st
                .library_stacks
                .entry(stack)
                .or_insert_with(|| defs.stack_in_cuda_library(stack));
            if library {
                match st.library_allocations.iter_mut().find(|(th, _)| *th == tid) {
                    Some(last) => last.1 = t,
                    None => st.library_allocations.push((tid, t)),
                }
            }
        }
        if func == ApiFunc::MEM_ADDRESS_RESERVE {
            let pid = st.pid();
            self.regions.reserve(proc, pid, address, bytes);
            return;
        }
        if st.pending.len() >= PENDING_LIMIT {
            st.pending
                .retain(|c| t.saturating_sub(c.time) < PENDING_AGE_NS);
            let pending = &st.pending;
            st.pending_by_address
                .retain(|_, corr| pending.contains(*corr));
        }
        st.pending.insert(
            correlation,
            PendingCall {
                time: t,
                stack,
                func,
                address,
                internal,
            },
        );
        if address != 0 && also_by_address(func) {
            st.pending_by_address.insert(address, correlation);
        }
    }

    fn out_of_memory(&mut self, proc: u32, t: u64, call: &ApiEv) {
        let ApiEv {
            func,
            result,
            bytes,
            tid,
            stack,
            internal,
            ..
        } = *call;
        let device = self.procs[proc as usize].last_device;
        let site = self.site(SiteKey {
            proc,
            stack,
            device,
            class: if internal {
                SiteClass::Profiler
            } else {
                SiteClass::Call
            },
            func: if stack == 0 { func.0 } else { 0 },
        });
        self.sites[site as usize].failed += 1;
        let dev = self.devices.get_or_insert(device);
        let mut live_by_site: Vec<(u32, u64, u64)> =
            sites_holding(&dev.sites, &self.sites).collect();
        live_by_site.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let device_live = dev.live;
        let largest_free = self.regions.device_largest_free(device);
        let index = self.ooms.len();
        let st = &mut self.procs[proc as usize];
        // An earlier failure of the same request on this thread was retried.
        close_failures(
            &mut st.open_failures,
            &mut self.ooms,
            tid,
            bytes,
            OomOutcome::Retried,
        );
        st.open_failures.push((tid, bytes, index));
        if self.rows.is_some() {
            let r = EventRow {
                bytes,
                site: Some(site),
                correlation: call.correlation,
                name: Some(func.name().unwrap_or("?").to_string()),
                ..EventRow::new(EventKind::Failed, t, device)
            };
            self.row(t, proc, r);
        }
        self.ooms.push(OomRaw {
            time: t,
            proc,
            tid,
            device,
            func,
            bytes,
            result,
            site,
            outcome: OomOutcome::ReachedProgram,
            device_live,
            largest_free,
            live_by_site,
        });
    }

    /// The process ended: what it still holds is accounted to its sites as
    /// "at exit" and leaves the device's live set (the driver frees it).
    fn process_end(&mut self, proc: u32, t: u64) {
        let st = &mut self.procs[proc as usize];
        st.ended = Some(t);
        if let (Some(fw), Some(axis)) = (&mut st.framework, &self.axis) {
            fw.finish(axis, t);
        }
        self.settle_exit(proc, Some(t));
    }

    /// Accounts what `proc` still holds as "at exit"; when the process
    /// ended (at `ended`), also removes it from the live set.
    fn settle_exit(&mut self, proc: u32, ended: Option<u64>) {
        let mut left: Vec<(u64, Live)> = self
            .live
            .iter()
            .filter(|((s, _), _)| *s == proc)
            .map(|(&(_, a), &l)| (a, l))
            .collect();
        left.sort_by_key(|&(a, _)| a);
        for &(address, l) in &left {
            let s = &mut self.sites[l.site as usize];
            s.held.at_exit += l.bytes;
            s.held.at_exit_count += 1;
            if let Some(t) = ended {
                self.live.remove(&(proc, address));
                self.retire(proc, address, l, false);
                if self.rows.is_some() {
                    let r = EventRow {
                        kind: l.kind,
                        address,
                        bytes: l.bytes,
                        site: Some(l.site),
                        ..EventRow::new(EventKind::Exit, t, l.device)
                    };
                    self.row(t, proc, r);
                }
            }
        }
    }

    /// Records fragmentation at the end of the current bucket for devices
    /// whose regions changed in it.
    fn sample_fragmentation(&mut self) {
        let Some(axis) = &self.axis else { return };
        let now = self.now;
        for st in &mut self.procs {
            if let (Some(fw), None) = (&mut st.framework, st.ended) {
                fw.sample(axis, now);
            }
        }
        for (&d, &i) in &self.devices.by_id {
            let dev = &mut self.devices.states[i];
            if !dev.frag_dirty {
                continue;
            }
            dev.frag_dirty = false;
            let ext = self.regions.sample_device(d, now, axis);
            dev.frag.put(
                axis,
                axis.current,
                ext.map(|e| (e.fragmentation() * 1000.0).round() as u16),
            );
            dev.largest_free
                .put(axis, axis.current, ext.map(|e| e.largest));
            // With no free space there is nothing to fragment: not a sample
            // worth calling the worst.
            if let Some(e) = ext.filter(|e| e.free > 0) {
                let f = e.fragmentation();
                if dev.frag_worst.is_none_or(|w| f > w.1) {
                    dev.frag_worst = Some((now, f, e.free, e.largest));
                }
            }
        }
    }

    /// Ends the sweep: settles pending peaks and what processes that never
    /// ended still hold.
    pub fn finish(&mut self) {
        if self.axis.is_none() {
            return;
        }
        self.sample_fragmentation();
        for dev in &mut self.devices.states {
            Self::settle_peak(dev, &self.sites);
        }
        for s in 0..self.procs.len() as u32 {
            if self.procs[s as usize].ended.is_none() {
                let now = self.now;
                if let (Some(fw), Some(axis)) = (&mut self.procs[s as usize].framework, &self.axis)
                {
                    fw.finish(axis, now);
                }
                self.settle_exit(s, None);
            }
        }
        for &state in self.devices.by_id.values() {
            for &(i, b, c) in &self.devices.states[state].peak_sites {
                let s = &mut self.sites[i as usize];
                s.held.at_peak += b;
                s.held.at_peak_count += c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn call(time: u64) -> PendingCall {
        PendingCall {
            time,
            stack: 0,
            func: ApiFunc::MEM_ALLOC,
            address: 0,
            internal: false,
        }
    }

    /// `ProcState::take_call` as it was written over plain maps, before
    /// the call kept apart got a path of its own: the reference.
    fn take_call_reference(
        pending: &mut HashMap<u32, PendingCall>,
        by_address: &mut HashMap<u64, u32>,
        correlation: u32,
        address: u64,
    ) -> Option<PendingCall> {
        if let Some(c) = pending.remove(&correlation) {
            if c.address == 0 || c.address == address {
                if c.address != 0
                    && also_by_address(c.func)
                    && by_address.get(&c.address) == Some(&correlation)
                {
                    by_address.remove(&c.address);
                }
                return Some(c);
            }
            pending.insert(correlation, c);
        }
        let corr = by_address.remove(&address)?;
        pending.remove(&corr)
    }

    proptest::proptest! {
        /// Calls are matched to their device-side records as the reference
        /// matches them, whatever mix of calls that know their address, calls
        /// found by address (VMM maps) and records of other addresses.
        #[test]
        fn take_call_matches_the_reference(
            ops in proptest::collection::vec(
                (proptest::bool::ANY, 0u32..4, 0u64..3, proptest::bool::ANY), 0..200),
        ) {
            let mut st = ProcState::new();
            let mut pending: HashMap<u32, PendingCall> = HashMap::new();
            let mut by_address: HashMap<u64, u32> = HashMap::new();
            for (i, &(is_call, id, a, by_map)) in ops.iter().enumerate() {
                let address = a * 0x20_0000;
                if is_call {
                    let func = if by_map { ApiFunc::MEM_MAP } else { ApiFunc::MEM_ALLOC };
                    let c = PendingCall { stack: i as u32, func, address, ..call(i as u64) };
                    st.pending.insert(id, c);
                    pending.insert(id, c);
                    if address != 0 && also_by_address(func) {
                        st.pending_by_address.insert(address, id);
                        by_address.insert(address, id);
                    }
                } else {
                    let record_address = address + 0x20_0000;
                    let got = st.take_call(id, record_address).map(|c| (c.stack, c.func));
                    let want = take_call_reference(&mut pending, &mut by_address, id, record_address)
                        .map(|c| (c.stack, c.func));
                    proptest::prop_assert_eq!(got, want);
                }
                proptest::prop_assert_eq!(st.pending.len(), pending.len());
                proptest::prop_assert_eq!(st.pending_by_address.len(), by_address.len());
            }
        }

        /// `PendingCalls` answers as a plain map would, whatever the order
        /// of insertions, removals and pruning, repeated ids included.
        #[test]
        fn pending_calls_behave_as_a_map(
            ops in proptest::collection::vec((0u8..4, 0u32..6), 0..200),
        ) {
            let mut pending = PendingCalls::default();
            let mut model: HashMap<u32, PendingCall> = HashMap::new();
            for (i, &(op, id)) in ops.iter().enumerate() {
                let t = i as u64;
                match op {
                    0 | 1 => {
                        pending.insert(id, call(t));
                        model.insert(id, call(t));
                    }
                    2 => {
                        let got = pending.remove(id).map(|c| c.time);
                        proptest::prop_assert_eq!(got, model.remove(&id).map(|c| c.time));
                    }
                    _ => {
                        // Keep the calls of even times only.
                        pending.retain(|c| c.time % 2 == 0);
                        model.retain(|_, c| c.time % 2 == 0);
                    }
                }
                proptest::prop_assert_eq!(pending.len(), model.len());
                for k in 0..6 {
                    proptest::prop_assert_eq!(pending.contains(k), model.contains_key(&k));
                }
            }
        }
    }
}
