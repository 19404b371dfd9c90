//! What the collector keeps of PyTorch in `Collector::torch`: whether its
//! caching allocator is attached, the costs of its events, and what was
//! found in its libraries (autograd's current node, the cudaMallocAsync
//! backend, the workspace functions). The hooks that fill and read it are
//! `allocator.rs`, `async_backend.rs`, `autograd.rs` and `workspaces.rs`.

use std::ops::Range;
use std::sync::atomic::AtomicU8;
use std::sync::{Mutex, OnceLock};

use crate::clock::EventTimer;
use crate::torch::autograd::Autograd;
use crate::torch::workspaces::Workspaces;

pub(crate) const WAITING: u8 = 0;
pub(crate) const ATTACHED: u8 = 1;
pub(crate) const DONE: u8 = 2;

/// Attaching, tried at CUDA events until it succeeds or cannot.
pub struct TorchHook {
    pub(crate) state: AtomicU8,
    /// Where libc10_cuda was mapped (None: not loaded) at a loader change
    /// count: the loader's list is walked again only when it changes, not
    /// at every allocation call before the allocator's first segment (a
    /// program that imports torch but allocates through something else
    /// would otherwise walk it on every call).
    pub(crate) looked_at: Mutex<Option<(u64, Option<Range<u64>>)>>,
    /// Events recorded, and the time spent recording them (stacks
    /// included, sampled), for the trace's notes: those that take a stack
    /// (allocations, segments) and those that do not (frees) apart, as
    /// their costs differ several times over.
    pub with_stack: EventTimer,
    pub without_stack: EventTimer,
    /// The autograd engine's current node, looked up once attached: what
    /// the backward pass's tensors are named by (`autograd.rs`, beside this file).
    pub autograd: OnceLock<Option<Autograd>>,
    /// Set when the process runs the cudaMallocAsync backend.
    pub async_backend: OnceLock<AsyncBackend>,
    /// The functions that allocate CUDA libraries' workspaces, looked up
    /// once attached (`workspaces.rs`, beside this file); Err: why not.
    pub workspaces: OnceLock<Result<Workspaces, String>>,
}

impl Default for TorchHook {
    fn default() -> Self {
        TorchHook {
            state: AtomicU8::new(WAITING),
            looked_at: Mutex::new(None),
            with_stack: EventTimer::default(),
            without_stack: EventTimer::default(),
            autograd: OnceLock::new(),
            async_backend: OnceLock::new(),
            workspaces: OnceLock::new(),
        }
    }
}

/// Where the backend is in this process.
pub struct AsyncBackend {
    /// `mallocAsync` and its `.cold` part.
    pub malloc: [Range<u64>; 2],
    /// `pytorch_memory_limits`: the vector's address.
    pub limits: u64,
}

impl AsyncBackend {
    pub(crate) fn refusing(&self, pc: u64) -> bool {
        // A return address points just past its call.
        self.malloc.iter().any(|r| r.start < pc && pc <= r.end)
    }

    /// The memory fraction's bytes on `device` (`u64::MAX`: none set).
    pub(crate) fn limit(&self, device: u32) -> Option<u64> {
        let read = |addr: u64| -> u64 {
            // SAFETY: the vector's three pointers (begin, end, capacity) in
            // the library's data, and then one of its elements, checked to
            // lie between begin and end.
            unsafe { std::ptr::read_unaligned(addr as *const u64) }
        };
        let (begin, end) = (read(self.limits), read(self.limits + 8));
        let at = begin.checked_add(u64::from(device) * 8)?;
        (begin != 0 && begin.is_multiple_of(8) && at.checked_add(8)? <= end).then(|| read(at))
    }
}
