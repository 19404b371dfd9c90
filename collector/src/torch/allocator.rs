//! PyTorch's CUDA caching allocator, from the inside.
//!
//! With its default (`native`) backend PyTorch obtains segments from CUDA
//! (the driver calls the rest of the collector sees) and hands out tensors
//! from inside them, which CUDA never sees. The allocator itself reports
//! every step to "trace trackers" (`attachAllocatorTraceTracker`, the hook
//! NCCL's memory registration uses) and every out-of-memory error to "OOM
//! observers", synchronously, on the thread that caused it. The collector
//! attaches one of each, with no change to the program and no Python code.
//!
//! Those methods are C++ virtual functions of `NativeCachingAllocator`,
//! which libc10_cuda.so does not export; its symbol table (`.symtab`, in the
//! file) names them. Before calling anything the collector checks, from
//! that table: that the allocator object in use (`CUDACachingAllocator::
//! allocator`) is a `NativeCachingAllocator` (its vtable pointer), that the
//! vtable holds the functions found, and, from their mangled names, that
//! they take `std::function`s of the signatures used here. Anything else
//! (the cudaMallocAsync backend, a custom allocator, an unknown build)
//! leaves the allocator alone and says why in the trace.
//!
//! The `std::function` values are built by hand in libstdc++'s layout (two
//! words of storage, a manager and an invoker), the ABI of every GCC since
//! 4.x, and torch's `TraceEntry` is read at the offsets of its leading
//! fields, which have not moved since torch 2.1 (action, device, address,
//! stream, size). Trackers are called with the allocator's lock held: the
//! tracker takes no Python lock and makes no CUDA call.

use std::ffi::c_int;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::Ordering;

use gmem_prof_traces::record::{
    allocator, AllocatorAction, AllocatorEvent, AllocatorInfo, Bytes, Nanos,
};
use gmem_prof_traces::Record;

use crate::clock::{PartClock, Sample};
use crate::config::TensorStacks;
use crate::costs::{EVENT_PART_COUNT, EVENT_WORKSPACE};
use crate::cuda::callbacks::current_tid;
use crate::stacks::elf::{self, FileSymbol};
use crate::stacks::modules;
use crate::stacks::unwind::thread_stack_end;
use crate::state::{self, Collector, EventStack};
use crate::torch::autograd::Autograd;
use crate::torch::hook::AsyncBackend;
use crate::torch::workspaces::Workspaces;

const LIBRARY: &str = "libc10_cuda.so";

/// Where attaching stands in this process.
use crate::torch::hook::{TorchHook, ATTACHED, DONE, WAITING};

/// The symbols the hook needs, by slot.
const SYM_ALLOCATOR: usize = 0;
const SYM_VTABLE: usize = 1;
const SYM_TRACKER: usize = 2;
const SYM_OOM: usize = 3;
const SYM_INITIALIZED: usize = 4;
// The cudaMallocAsync backend's (`async_backend.rs`, beside this file).
const SYM_ASYNC_VTABLE: usize = 5;
const SYM_ASYNC_MALLOC: usize = 6;
const SYM_ASYNC_MALLOC_COLD: usize = 7;
const SYM_ASYNC_LIMITS: usize = 8;
const SYMBOLS: usize = 9;

/// The backend's namespace; `mallocAsync` and the limits sit in an
/// anonymous one inside it.
const ASYNC: &[u8] = b"_ZN3c104cuda20CUDACachingAllocator15CudaMallocAsync";

const CLASS: &[u8] = b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator";

fn pick(name: &[u8]) -> Option<usize> {
    if name == b"_ZN3c104cuda20CUDACachingAllocator9allocatorE" {
        return Some(SYM_ALLOCATOR);
    }
    if name == b"_ZTVN3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE" {
        return Some(SYM_ASYNC_VTABLE);
    }
    if let Some(inner) = name
        .strip_prefix(ASYNC)
        .and_then(|n| n.strip_prefix(b"12_GLOBAL__N_1"))
    {
        if inner == b"21pytorch_memory_limitsE" {
            return Some(SYM_ASYNC_LIMITS);
        }
        // mallocAsync(void**, DeviceIndex, size_t, cudaStream_t), and the
        // part the compiler moved its error path to.
        if inner.starts_with(b"11mallocAsyncE") {
            return Some(if inner.ends_with(b".cold") {
                SYM_ASYNC_MALLOC_COLD
            } else {
                SYM_ASYNC_MALLOC
            });
        }
    }
    if name == b"_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE" {
        return Some(SYM_VTABLE);
    }
    let method = name.strip_prefix(CLASS)?;
    // void(const TraceEntry&): the entry's namespace moved over versions.
    if let Some(args) = method.strip_prefix(b"27attachAllocatorTraceTrackerESt8functionIFvRK") {
        return args.ends_with(b"10TraceEntryEEE").then_some(SYM_TRACKER);
    }
    // void(long device, size_t alloc_size, size_t limit, size_t free)
    if method == b"25attachOutOfMemoryObserverESt8functionIFvlmmmEE" {
        return Some(SYM_OOM);
    }
    (method == b"11initializedEv").then_some(SYM_INITIALIZED)
}

/// libstdc++'s `std::function<R(Args...)>`: storage for a small functor,
/// then the manager (copy, destroy, type queries) and the invoker.
#[repr(C)]
struct StdFunction {
    storage: [usize; 2],
    manager: Option<Manager>,
    invoker: usize,
}

type Manager =
    unsafe extern "C" fn(dest: *mut [usize; 2], src: *const [usize; 2], op: c_int) -> bool;

/// `_M_manager` for a functor that is plain data (we store nothing): copies
/// the storage when asked to clone it; type queries get null (as libstdc++
/// built without RTTI answers).
unsafe extern "C" fn manager(dest: *mut [usize; 2], src: *const [usize; 2], op: c_int) -> bool {
    const GET_TYPE_INFO: c_int = 0;
    const GET_FUNCTOR_PTR: c_int = 1;
    const CLONE: c_int = 2;
    // SAFETY: libstdc++ passes two valid `_Any_data` (16-byte) locations.
    unsafe {
        match op {
            GET_TYPE_INFO => (*dest)[0] = 0,
            GET_FUNCTOR_PTR => (*dest)[0] = src as usize,
            CLONE => *dest = *src,
            _ => {}
        }
    }
    false
}

/// Where each field of torch's `TraceEntry` the tracker reads lies (every
/// release from 2.4 to 2.15 has them there: collector/layouts/torch.json,
/// from each release's own headers).
const ENTRY_ACTION: usize = 0;
const ENTRY_DEVICE: usize = 4;
const ENTRY_ADDRESS: usize = 8;
const ENTRY_STREAM: usize = 32;
const ENTRY_SIZE: usize = 40;
/// `mempool_`, a pair of ids, where the release has it.
const ENTRY_POOL: usize = 48;

/// Whether torch `major.minor`'s `TraceEntry` carries the memory pool's
/// ids (`mempool_`: 2.8 and later, torch.json).
fn trace_entry_has_pool_ids(major: u32, minor: u32) -> bool {
    (major, minor) >= (2, 8)
}

/// Invoker of the trace tracker: `void(const TraceEntry&)`.
unsafe extern "C" fn on_trace_entry(_functor: *const [usize; 2], entry: *const u8) {
    state::guarded((), || {
        let Some(c) = state::get() else { return };
        if !c.recording() || entry.is_null() {
            return;
        }
        // SAFETY: torch passes its TraceEntry; these leading fields sit at
        // the same offsets in every version we attach to (`ENTRY_*`, from
        // each release's headers): action (int), device (int8), address,
        // stream, size, and (2.8 and later) the pool id pair:
        // `MempoolId_t` is {graph's pool id, user pool id}, one of them 0
        // (a pool a CUDA graph made for itself counts the first,
        // `torch.cuda.MemPool` and `graph_pool_handle()` the second, each
        // from 1), so both fit one u64 apart (FORMAT.md).
        let (action, device, address, stream, size, pool) = unsafe {
            let field = |off: usize| std::ptr::read_unaligned(entry.add(off) as *const u64);
            (
                std::ptr::read_unaligned(entry.add(ENTRY_ACTION) as *const i32),
                std::ptr::read(entry.add(ENTRY_DEVICE) as *const i8),
                field(ENTRY_ADDRESS),
                field(ENTRY_STREAM),
                field(ENTRY_SIZE),
                if c.torch_pool_ids() {
                    (field(ENTRY_POOL) & 0xffff_ffff) | (field(ENTRY_POOL + 8) << 32)
                } else {
                    0
                },
            )
        };
        // torch's TraceEntry::Action, in order.
        let (action, stack) = match action {
            0 => (AllocatorAction::ALLOC, true),
            // The free's own stack only when frees are watched
            // (--free-stacks): the allocation's is the site.
            1 => (AllocatorAction::FREE_REQUESTED, c.config.free_stacks),
            2 => (AllocatorAction::FREE_COMPLETED, false),
            3 => (AllocatorAction::SEGMENT_ALLOC, true),
            4 => (AllocatorAction::SEGMENT_FREE, true),
            5 => (AllocatorAction::SEGMENT_MAP, true),
            6 => (AllocatorAction::SEGMENT_UNMAP, true),
            7 => (AllocatorAction::SNAPSHOT, false),
            8 => (AllocatorAction::OOM, true),
            _ => return,
        };
        let oom = action == AllocatorAction::OOM;
        let started = c.clock.now();
        // Counting is part of what an event costs: inside the time taken.
        let timer = if stack {
            &c.torch.with_stack
        } else {
            &c.torch.without_stack
        };
        let sample = timer.count();
        let timed = sample == Sample::Timed;
        let mut parts = (sample == Sample::Parts).then(PartClock::<EVENT_PART_COUNT>::start);
        let stack = if !stack {
            EventStack::None
        } else if action == AllocatorAction::ALLOC && c.torch.workspace_on_stack(c, entry) {
            EventStack::Workspace
        } else {
            EventStack::Framework
        };
        if let Some(p) = parts.as_mut() {
            p.mark(EVENT_WORKSPACE);
        }
        let event = AllocatorEvent {
            time: Nanos(started),
            allocator: allocator::TORCH_CACHING,
            action,
            device: device.max(0) as u32,
            // An OOM entry's address field holds the device's free bytes.
            address: if oom { 0 } else { address },
            bytes: Bytes(size),
            stream,
            pool,
            tid: current_tid(),
            stack: Default::default(),
            device_free: if oom { address } else { 0 },
            limit: 0,
        };
        c.push_allocator_event(event, stack, parts.as_mut());
        if timed {
            timer.timed(started, c.clock.now());
        }
        if let Some(parts) = parts {
            c.costs.event_parts.add(&parts);
        }
    });
}

/// Invoker of the OOM observer: `void(long, size_t, size_t, size_t)`,
/// arguments passed by reference (`std::function` forwards them).
unsafe extern "C" fn on_oom(
    _functor: *const [usize; 2],
    device: *const i64,
    alloc_size: *const u64,
    limit: *const u64,
    free: *const u64,
) {
    state::guarded((), || {
        let Some(c) = state::get() else { return };
        if !c.recording()
            || device.is_null()
            || alloc_size.is_null()
            || limit.is_null()
            || free.is_null()
        {
            return;
        }
        // SAFETY: four valid references, as std::function passes them.
        let (device, alloc_size, limit, free) = unsafe { (*device, *alloc_size, *limit, *free) };
        let event = AllocatorEvent {
            time: Nanos(c.clock.now()),
            allocator: allocator::TORCH_CACHING,
            action: AllocatorAction::OOM_REPORT,
            device: device.max(0) as u32,
            address: 0,
            bytes: Bytes(alloc_size),
            stream: 0,
            pool: 0,
            tid: current_tid(),
            stack: Default::default(),
            device_free: free,
            limit,
        };
        c.push_allocator_event(event, EventStack::Framework, None);
        c.sample_devices(gmem_prof_traces::record::device_memory::FAILED_ALLOCATION);
    });
}

/// torch's version from `torch/version.py` beside the library
/// (`.../torch/lib/libc10_cuda.so`): "2.11.0+cu130" → (2, 11).
fn torch_version(library: &str) -> Option<(u32, u32, String)> {
    let dir = Path::new(library).parent()?.parent()?;
    let text = std::fs::read_to_string(dir.join("version.py")).ok()?;
    let line = text.lines().find(|l| l.starts_with("__version__"))?;
    let v = line.split(['\'', '"']).nth(1)?.to_string();
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor, v))
}

/// What an attempt came to.
enum Attempt {
    /// Not yet possible (library not loaded, allocator not initialized).
    Later,
    Attached {
        detail: String,
        pool_ids: bool,
    },
    /// The cudaMallocAsync backend is in use: not attached, but its
    /// memory-fraction errors can be seen (`async_backend.rs`, beside this file).
    Async(AsyncBackend),
    /// Never in this process; why.
    No(String),
}

impl TorchHook {
    /// Tries to attach if that has not been settled yet, from the exit of
    /// an allocation call whose native stack is `caller` (`None` when stacks
    /// are off). Cheap once settled, and while libc10_cuda is not loaded
    /// (one loader query).
    ///
    /// With a stack, it attaches only from a call made by libc10_cuda
    /// itself (the caching allocator obtaining a segment): then the
    /// allocator's initialization is complete (its list of per-device
    /// allocators is not being filled by another thread, which attaching
    /// walks), and this thread holds no driver lock (the call returned), so
    /// waiting for the other devices' allocator locks cannot deadlock; its
    /// own device's lock, held up the stack, is recursive. The first
    /// segment's own events come after the call returns: nothing is
    /// missed.
    pub fn poll(&self, c: &Collector, caller: Option<&[u64]>) {
        if self.state.load(Ordering::Acquire) != WAITING {
            return;
        }
        if !c.config.frameworks {
            self.state.store(DONE, Ordering::Release);
            return;
        }
        let Some(range) = self.library_range() else {
            return;
        };
        if caller.is_some_and(|frames| !frames.iter().any(|a| range.contains(a))) {
            return;
        }
        // One thread attaches; the others go on.
        if self
            .state
            .compare_exchange(WAITING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let Some(loaded) = modules::find_loaded(LIBRARY) else {
            // Unloaded in between: wait for it to come back.
            self.state.store(WAITING, Ordering::Release);
            return;
        };
        let (library, bias) = (loaded.path, loaded.bias);
        let settings = std::env::var("PYTORCH_CUDA_ALLOC_CONF").unwrap_or_default();
        let info = |attached: bool, detail: String| AllocatorInfo {
            time: Nanos(c.clock.now()),
            allocator: allocator::TORCH_CACHING,
            library: library.clone(),
            settings: settings.clone(),
            attached,
            detail,
        };
        match attach(&library, bias) {
            Attempt::Later => {
                // Try again at the next allocation call.
                self.state.store(WAITING, Ordering::Release);
            }
            Attempt::Attached { detail, pool_ids } => {
                c.set_torch_pool_ids(pool_ids);
                // Events other threads record before this is set take
                // their native stack.
                self.autograd.get_or_init(Autograd::find);
                self.workspaces
                    .get_or_init(|| Workspaces::find(&library, bias));
                self.state.store(ATTACHED, Ordering::Release);
                c.sink.push(Record::Allocator(info(true, detail)));
            }
            Attempt::Async(backend) => {
                let _ = self.async_backend.set(backend);
                let why = "the cudaMallocAsync backend: every tensor is a CUDA allocation the \
                           trace sees directly, and its errors against the memory fraction \
                           are seen when it asks CUDA for the free memory";
                c.sink.push(Record::Allocator(info(false, why.into())));
            }
            Attempt::No(why) => {
                c.sink.push(Record::Allocator(info(false, why.clone())));
                c.report(1, format!("PyTorch's caching allocator: {why}"));
            }
        }
    }
}

impl TorchHook {
    /// Whether an allocation whose trace entry lies at `entry` is likely a
    /// CUDA library's workspace (`workspaces.rs`). Only by default
    /// (`--tensor-stacks auto`) and where Python runs: `all` walks every
    /// stack anyway, `python` asked for no native frames, and without
    /// Python every tensor's stack is native.
    fn workspace_on_stack(&self, c: &Collector, entry: *const u8) -> bool {
        if c.config.tensor_stacks != TensorStacks::Auto || c.python.is_none() {
            return false;
        }
        let Some(w) = self.workspaces.get().and_then(|w| w.as_ref().ok()) else {
            return false;
        };
        let entry = entry as u64;
        if w.learning() {
            if let Some(stacks) = &c.stacks {
                w.learn(entry, |out, sps| stacks.capture_with_sps(out, sps).0);
            }
        }
        w.on_stack(entry, thread_stack_end())
    }

    /// Whether attaching is still to be tried.
    pub fn waiting(&self) -> bool {
        self.state.load(Ordering::Acquire) == WAITING
    }

    /// Where libc10_cuda is mapped now, from the cache while the loader's
    /// list is unchanged. A thread that finds the cache busy walks the list
    /// itself rather than wait.
    fn library_range(&self) -> Option<Range<u64>> {
        let changes = modules::loader_changes();
        let mut cache = self.looked_at.try_lock().ok();
        if let Some(Some((at, range))) = cache.as_deref() {
            if *at == changes {
                return range.clone();
            }
        }
        let range = modules::find_loaded(LIBRARY).map(|l| l.range);
        if let Some(cache) = cache.as_deref_mut() {
            *cache = Some((changes, range.clone()));
        }
        range
    }
}

fn attach(library: &str, bias: u64) -> Attempt {
    // Set to anything, even "0" (torch's own test is getenv != NULL), it
    // sends every tensor straight to cudaMalloc and cudaFree: the caching
    // allocator, and its trackers, never see them.
    if std::env::var_os("PYTORCH_NO_CUDA_MEMORY_CACHING").is_some() {
        return Attempt::No(
            "caching is off (PYTORCH_NO_CUDA_MEMORY_CACHING is set): each tensor is a \
             cudaMalloc of its own, seen among the device's allocations, not as a tensor"
                .into(),
        );
    }
    let file = match std::fs::read(library) {
        Ok(f) => f,
        Err(e) => {
            return Attempt::No(format!(
                "cannot read {library}: {e}; tensors are not seen, only segments"
            ))
        }
    };
    let found = match elf::find_symbols(&file, SYMBOLS, pick) {
        Ok(f) => f,
        Err(e) => {
            return Attempt::No(format!(
                "{library}: {e}; tensors are not seen, only segments"
            ))
        }
    };
    drop(file);
    let at = |slot: usize| found[slot].map(|s: FileSymbol| bias.wrapping_add(s.value));
    let (Some(global), Some(vtable), Some(tracker)) =
        (at(SYM_ALLOCATOR), at(SYM_VTABLE), at(SYM_TRACKER))
    else {
        return Attempt::No(format!(
            "{library} does not have the symbols this gmem-prof attaches to (a PyTorch build \
             it does not know); tensors are not seen, only segments"
        ));
    };
    let version = torch_version(library);
    if version
        .as_ref()
        .is_some_and(|(major, minor, _)| (*major, *minor) < (2, 1))
    {
        return Attempt::No(
            "PyTorch before 2.1 is not supported; tensors are not seen, only segments".into(),
        );
    }
    // SAFETY: `allocator` is a `std::atomic<CUDAAllocator*>` (8 bytes; on
    // x86-64 an atomic load is a plain load).
    let object = unsafe { std::ptr::read_volatile(global as *const usize) };
    if object == 0 {
        return Attempt::Later;
    }
    // SAFETY: a live C++ object starts with its vtable pointer.
    let vptr = unsafe { std::ptr::read(object as *const usize) } as u64;
    if let Some(backend) = async_backend(vptr, &at, &found) {
        return Attempt::Async(backend);
    }
    // Itanium ABI: the vtable pointer skips offset-to-top and RTTI.
    if vptr != vtable + 16 {
        return Attempt::No(
            "the allocator in use is not the native caching allocator (the cudaMallocAsync \
             backend, where every tensor is a CUDA allocation the trace sees directly, or a \
             custom allocator)"
                .into(),
        );
    }
    // The vtable's entries follow the two words the vtable pointer skips;
    // its symbol's size bounds them.
    let entries = (found[SYM_VTABLE].map_or(0, |s| s.size) / 8).saturating_sub(2) as usize;
    let in_vtable = |f: u64| {
        (0..entries.min(512)).any(|i| {
            // SAFETY: inside the vtable, which lies in the library's mapped
            // data.
            unsafe { std::ptr::read((vptr as *const u64).add(i)) == f }
        })
    };
    if !in_vtable(tracker) {
        return Attempt::No(format!(
            "{library}'s allocator vtable does not hold the trace-tracker method found; \
             tensors are not seen, only segments"
        ));
    }
    if let Some(initialized) = at(SYM_INITIALIZED).filter(|f| in_vtable(*f)) {
        // SAFETY: `bool NativeCachingAllocator::initialized()`, a method of
        // this object's class (checked above), taking only `this`.
        let ready = unsafe {
            let f: unsafe extern "C" fn(usize) -> bool = std::mem::transmute(initialized as usize);
            f(object)
        };
        if !ready {
            return Attempt::Later;
        }
    }
    let tracker_fn = StdFunction {
        storage: [0; 2],
        manager: Some(manager),
        invoker: on_trace_entry as *const () as usize,
    };
    // SAFETY: `void attachAllocatorTraceTracker(std::function<void(const
    // TraceEntry&)>)` of this object's class (mangled name and vtable
    // checked); a by-value std::function is passed by reference to a
    // temporary the caller owns (Itanium ABI), and ours needs no
    // destruction.
    unsafe {
        let f: unsafe extern "C" fn(usize, *const StdFunction) =
            std::mem::transmute(tracker as usize);
        f(object, &tracker_fn);
    }
    let mut detail = String::from("trace tracker");
    if let Some(oom) = at(SYM_OOM).filter(|f| in_vtable(*f)) {
        let oom_fn = StdFunction {
            storage: [0; 2],
            manager: Some(manager),
            invoker: on_oom as *const () as usize,
        };
        // SAFETY: as above, for `attachOutOfMemoryObserver(std::function<
        // void(long, size_t, size_t, size_t)>)`.
        unsafe {
            let f: unsafe extern "C" fn(usize, *const StdFunction) =
                std::mem::transmute(oom as usize);
            f(object, &oom_fn);
        }
        detail.push_str(" and OOM observer");
    }
    let pool_ids = version
        .as_ref()
        .is_some_and(|(major, minor, _)| trace_entry_has_pool_ids(*major, *minor));
    if let Some((_, _, v)) = version {
        detail.push_str(&format!(" attached to PyTorch {v}"));
    }
    Attempt::Attached { detail, pool_ids }
}

/// The cudaMallocAsync backend, if the allocator in use (`vptr`) is its
/// and the library names what `torch_async.rs` reads.
fn async_backend(
    vptr: u64,
    at: &impl Fn(usize) -> Option<u64>,
    found: &[Option<FileSymbol>],
) -> Option<AsyncBackend> {
    // Itanium ABI: the vtable pointer skips offset-to-top and RTTI.
    if at(SYM_ASYNC_VTABLE)? + 16 != vptr {
        return None;
    }
    let range = |slot: usize| {
        let start = at(slot)?;
        Some(start..start + found[slot]?.size)
    };
    let malloc = range(SYM_ASYNC_MALLOC)?;
    // No `.cold` part: an empty range.
    let cold = range(SYM_ASYNC_MALLOC_COLD).unwrap_or(0..0);
    Some(AsyncBackend {
        malloc: [malloc, cold],
        limits: at(SYM_ASYNC_LIMITS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_symbols_of_pytorch_2_11_and_older_builds() {
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator9allocatorE"),
            Some(SYM_ALLOCATOR)
        );
        assert_eq!(
            pick(b"_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"),
            Some(SYM_VTABLE)
        );
        // torch 2.11 (nm of its libc10_cuda.so).
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocatorTraceTrackerESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE"),
            Some(SYM_TRACKER)
        );
        // Before TraceEntry moved to c10::CachingDeviceAllocator.
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocatorTraceTrackerESt8functionIFvRKNS0_10TraceEntryEEE"),
            Some(SYM_TRACKER)
        );
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator25attachOutOfMemoryObserverESt8functionIFvlmmmEE"),
            Some(SYM_OOM)
        );
        assert_eq!(
            pick(
                b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator11initializedEv"
            ),
            Some(SYM_INITIALIZED)
        );
        // The cudaMallocAsync backend's (nm of torch 2.11's libc10_cuda.so).
        let ns = "_ZN3c104cuda20CUDACachingAllocator15CudaMallocAsync12_GLOBAL__N_1";
        for (name, slot) in [
            ("11mallocAsyncEPPvamP11CUstream_st", SYM_ASYNC_MALLOC),
            (
                "11mallocAsyncEPPvamP11CUstream_st.cold",
                SYM_ASYNC_MALLOC_COLD,
            ),
            ("21pytorch_memory_limitsE", SYM_ASYNC_LIMITS),
        ] {
            assert_eq!(pick(format!("{ns}{name}").as_bytes()), Some(slot), "{name}");
        }
        assert_eq!(pick(format!("{ns}18pytorch_used_bytesE").as_bytes()), None);
        assert_eq!(
            pick(
                b"_ZTVN3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE"
            ),
            Some(SYM_ASYNC_VTABLE)
        );
        // The cudaMallocAsync backend's methods, and other signatures, are
        // not taken.
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocator27attachAllocatorTraceTrackerESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE"),
            None
        );
        assert_eq!(
            pick(b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator25attachOutOfMemoryObserverESt8functionIFvlmmEE"),
            None
        );
    }

    #[test]
    fn reads_the_version_beside_the_library() {
        let dir = std::env::temp_dir().join(format!("gmem-torch-version-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("torch/lib")).unwrap();
        std::fs::write(
            dir.join("torch/version.py"),
            "from typing import Optional\n__version__ = '2.11.0+cu130'\ndebug = False\n",
        )
        .unwrap();
        let lib = dir.join("torch/lib/libc10_cuda.so");
        assert_eq!(
            torch_version(lib.to_str().unwrap()),
            Some((2, 11, "2.11.0+cu130".to_string()))
        );
        assert_eq!(torch_version("/nowhere/lib/libc10_cuda.so"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The hook against every PyTorch release from 2.4 to 2.15, offline: the
/// names of each release's libc10_cuda.so symbol table and the layout of
/// its `TraceEntry` from its own headers (collector/layouts/torch.py).
#[cfg(test)]
mod releases {
    use super::*;

    #[test]
    fn every_release_has_the_symbols_and_the_layout_the_hook_reads() {
        let json: serde_json::Value =
            serde_json::from_str(include_str!("../../layouts/torch.json")).unwrap();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("layouts/torch");
        let releases = json.as_array().unwrap();
        assert!(releases.len() >= 12);
        for r in releases {
            let version = r["torch"].as_str().unwrap();
            let names = std::fs::read_to_string(dir.join(format!("{version}.symbols"))).unwrap();
            let mut found = [false; SYMBOLS];
            for name in names.split_whitespace() {
                if let Some(slot) = pick(name.as_bytes()) {
                    found[slot] = true;
                }
            }
            // What attaching needs (the allocator object, its class's
            // vtable, the tracker), the OOM observer, and the cudaMallocAsync
            // backend's vtable (to tell it apart).
            for (slot, what) in [
                (SYM_ALLOCATOR, "allocator"),
                (SYM_VTABLE, "vtable"),
                (SYM_TRACKER, "attachAllocatorTraceTracker"),
                (SYM_OOM, "attachOutOfMemoryObserver"),
                (SYM_ASYNC_VTABLE, "CudaMallocAsyncAllocator's vtable"),
            ] {
                assert!(found[slot], "torch {version}: no {what}");
            }
            let o = &r["trace_entry"]["offsets"];
            let at = |k: &str| o[k].as_u64().map(|v| v as usize);
            assert_eq!(at("action"), Some(ENTRY_ACTION), "torch {version}");
            assert_eq!(at("device"), Some(ENTRY_DEVICE), "torch {version}");
            assert_eq!(
                at("device_bytes"),
                Some(1),
                "torch {version}: device is an i8"
            );
            assert_eq!(at("address"), Some(ENTRY_ADDRESS), "torch {version}");
            assert_eq!(at("stream"), Some(ENTRY_STREAM), "torch {version}");
            assert_eq!(at("size"), Some(ENTRY_SIZE), "torch {version}");
            let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap());
            let (major, minor) = (parts.next().unwrap(), parts.next().unwrap());
            if trace_entry_has_pool_ids(major, minor) {
                assert_eq!(at("mempool"), Some(ENTRY_POOL), "torch {version}");
                assert_eq!(at("mempool_bytes"), Some(16), "torch {version}");
            } else {
                assert_eq!(at("mempool"), None, "torch {version}: no pool ids");
            }
            // The actions, in the order the tracker maps them.
            let actions = &r["trace_entry"]["actions"];
            for (i, a) in [
                "ALLOC",
                "FREE_REQUESTED",
                "FREE_COMPLETED",
                "SEGMENT_ALLOC",
                "SEGMENT_FREE",
                "SEGMENT_MAP",
                "SEGMENT_UNMAP",
                "SNAPSHOT",
                "OOM",
            ]
            .iter()
            .enumerate()
            {
                assert_eq!(actions[a], i as u64, "torch {version}: {a}");
            }
        }
    }
}
