//! The trace's memory events one by one, in the order the sweep applies them,
//! for exporters (Perfetto, Parquet). `analyze_with_events` hands them out in
//! batches while it analyzes, so memory stays bounded.
//!
//! Sites in rows are the sweep's raw site ids; `SiteIds` (returned with the
//! analysis) maps them to the ids of `Analysis.sites`, which are known only
//! once the whole trace is read.

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A device-side allocation record.
    Alloc,
    /// A device-side free record.
    Free,
    /// An allocation call that failed (out of memory); `bytes` is the
    /// request, `name` the function.
    Failed,
    /// An allocation still live when its process ended: released by the
    /// driver with no free record (compute-sanitizer's leaks, allocator
    /// caches, module globals).
    Exit,
    /// A kernel; `end_ns` is its end, `name` its name.
    Kernel,
    /// A tensor (block) a framework allocator seen from the inside handed
    /// out (`tensor_site`, `allocated`, `reserved` set).
    TensorAlloc,
    /// A tensor the program freed.
    TensorFree,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::Free => "free",
            EventKind::Failed => "failed",
            EventKind::Exit => "exit",
            EventKind::Kernel => "kernel",
            EventKind::TensorAlloc => "tensor alloc",
            EventKind::TensorFree => "tensor free",
        }
    }
}

/// One event. Times are nanoseconds since the first event of the trace, as
/// in the model.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    pub time_ns: u64,
    /// Kernels: their end; other events: `time_ns`.
    pub end_ns: u64,
    pub what: EventKind,
    pub pid: u32,
    pub device: u32,
    /// CUPTI's memory kind code (`gmem_prof_traces::record::memory_kind`);
    /// 0 for kernels and failures.
    pub kind: u8,
    pub address: u64,
    pub bytes: u64,
    /// Raw site id (map it with `SiteIds`); `None` for kernels and for frees
    /// of memory the trace never saw allocated.
    pub site: Option<u32>,
    /// CUPTI's correlation id (0 when none).
    pub correlation: u32,
    /// CUDA stream of a kernel (0 otherwise).
    pub cuda_stream: u32,
    /// Kernel name, or the failed function.
    pub name: Option<String>,
    /// The device's live and reserved bytes just after the event.
    pub device_live: u64,
    pub device_reserved: u64,
    /// Tensor events: the raw tensor site (the process, its site;
    /// map it with `SiteIds::tensor`), and the framework view's allocated
    /// and reserved bytes (its process on its device) just after.
    pub tensor_site: Option<(u32, u32)>,
    /// Tensor events: the size the allocator reported (what the program
    /// asked for); `bytes` is the block's, as `allocated` counts it.
    pub requested: Option<u64>,
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
}

impl EventRow {
    /// A row with every optional field empty; the sweep fills in the pid,
    /// the relative time and the device totals.
    pub(crate) fn new(what: EventKind, time: u64, device: u32) -> EventRow {
        EventRow {
            time_ns: time,
            end_ns: time,
            what,
            pid: 0,
            device,
            kind: 0,
            address: 0,
            bytes: 0,
            site: None,
            correlation: 0,
            cuda_stream: 0,
            name: None,
            device_live: 0,
            device_reserved: 0,
            tensor_site: None,
            requested: None,
            allocated: None,
            reserved: None,
        }
    }
}

/// Maps the raw site ids of `EventRow` to `Analysis.sites` ids, and its
/// raw tensor sites to `Analysis.tensor_sites` ids.
#[derive(Clone, Debug, Default)]
pub struct SiteIds {
    pub(crate) sites: Vec<u32>,
    /// Per process, per raw tensor site.
    pub(crate) tensors: Vec<Vec<u32>>,
}

impl SiteIds {
    pub fn get(&self, raw: u32) -> Option<u32> {
        self.sites.get(raw as usize).copied()
    }

    /// A tensor site's id from `EventRow::tensor_site`.
    pub fn tensor(&self, (proc, raw): (u32, u32)) -> Option<u32> {
        self.tensors.get(proc as usize)?.get(raw as usize).copied()
    }
}

/// A memory kind code's name, as the report and exports write it.
pub fn kind_name(kind: u8) -> &'static str {
    use gmem_prof_traces::record::memory_kind;
    match kind {
        memory_kind::DEVICE => "device",
        memory_kind::PINNED => "pinned host",
        memory_kind::PAGEABLE => "pageable host",
        memory_kind::MANAGED => "managed",
        memory_kind::ARRAY => "array",
        memory_kind::DEVICE_STATIC => "static (module globals)",
        memory_kind::MANAGED_STATIC => "static managed (module globals)",
        _ => "unknown",
    }
}
