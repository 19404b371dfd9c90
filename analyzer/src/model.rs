//! The analysis model: plain structs, what `reports` renders and what the
//! JSON output serializes. No polars types, no wire records.
//!
//! Times are nanoseconds since the first event of the trace (`Timeline.start_ns`
//! is that event's absolute time on CUPTI's clock). Everything is ordered
//! deterministically (by value, then by id), never by hash-map order.

use serde::Serialize;

/// Version of this model's JSON form; bumped when a field changes meaning or
/// disappears (adding fields does not bump it).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub schema_version: u32,
    pub input: InputSummary,
    pub timeline: Timeline,
    pub devices: Vec<DeviceReport>,
    pub processes: Vec<ProcessReport>,
    /// Allocation sites, merged across processes and devices by their
    /// symbolized stack, sorted by bytes live at the peak, then total bytes.
    pub sites: Vec<Site>,
    /// Sites whose live bytes keep rising after the warm-up, largest first.
    pub growth: Vec<Growth>,
    /// Every failed allocation, in time order.
    pub ooms: Vec<Oom>,
}

impl Analysis {
    /// A site's label by id ("site N" for an id not in the list).
    pub fn site_label(&self, id: u32) -> String {
        self.sites
            .get(id as usize)
            .map_or_else(|| format!("site {id}"), |s| s.label.clone())
    }

    /// Sites that leaked, most leaked bytes first.
    pub fn leaking_sites(&self) -> Vec<&Site> {
        let mut v: Vec<&Site> = self.sites.iter().filter(|s| s.leaked_bytes > 0).collect();
        v.sort_by(|x, y| y.leaked_bytes.cmp(&x.leaked_bytes).then(x.id.cmp(&y.id)));
        v
    }

    /// Bytes never freed, over every process.
    pub fn leaked_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.leaked_bytes).sum()
    }

    /// Bytes a caching allocator still held at exit, over every process.
    pub fn cached_bytes(&self) -> u64 {
        self.processes.iter().map(|p| p.at_exit.cached_bytes).sum()
    }

    /// Failed allocations that reached the program (not recovered by a
    /// retry).
    pub fn ooms_reached_program(&self) -> u64 {
        self.ooms.iter().filter(|o| o.reached_program()).count() as u64
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct InputSummary {
    /// File names as given (no directories), in order.
    pub files: Vec<String>,
    pub bytes: u64,
    pub chunks: u64,
    pub records: u64,
    /// Allocation and free events (device-side records).
    pub memory_events: u64,
    pub api_calls: u64,
    pub kernels: u64,
    /// What was damaged, cut short or lost, in words.
    pub warnings: Vec<String>,
    /// Records CUPTI or the collector reported as lost while recording.
    pub dropped_records: u64,
    /// Events that arrived later than the reordering window allowed; they
    /// were applied at the time already reached.
    pub late_events: u64,
}

/// The time axis shared by every curve: `buckets` buckets of `bucket_ns`
/// starting at `start_ns`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    pub start_ns: u64,
    pub end_ns: u64,
    pub bucket_ns: u64,
    pub buckets: usize,
}

/// One point of a curve: the highest value during the bucket and the value
/// at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Point {
    pub max: u64,
    pub last: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct KindCurve {
    /// "device", "pinned host", "managed", "array", "static (modules)", …
    pub kind: String,
    pub points: Vec<Point>,
    pub peak: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub name: String,
    pub total_memory: u64,
    /// Highest live total (all kinds, all processes) and when (first time).
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Live bytes per kind at the peak.
    pub peak_by_kind: Vec<KindBytes>,
    /// What was live at the peak, by site (site ids index `Analysis.sites`).
    pub peak_sites: Vec<SiteBytes>,
    /// Kernels running on this device at the peak instant.
    pub kernels_at_peak: Vec<KernelRef>,
    /// The first kernel to start on this device after the peak.
    pub next_kernel_after_peak: Option<KernelRef>,
    /// Whether kernels were traced in every process on this device.
    pub kernels_traced: bool,
    /// Live bytes, all kinds together.
    pub live: Vec<Point>,
    pub live_by_kind: Vec<KindCurve>,
    /// Memory allocators hold from the driver: stream-ordered pools' reserved
    /// size plus everything allocated outside pools.
    pub reserved: Vec<Point>,
    pub reserved_peak: u64,
    pub fragmentation: Fragmentation,
}

#[derive(Clone, Debug, Serialize)]
pub struct KindBytes {
    pub kind: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SiteBytes {
    pub site: u32,
    pub bytes: u64,
    pub count: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelRef {
    pub name: String,
    pub pid: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub stream: u32,
}

/// External fragmentation inside the reserved regions whose sub-allocations
/// the trace sees: F = 1 − largest free extent / total free.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Fragmentation {
    /// Regions that were seen: stream-ordered pools and VMM reservations.
    pub regions: Vec<RegionSummary>,
    /// F at the end of each bucket (per mille, 0..=1000) while any region
    /// held free space; `None` where no region existed.
    pub curve: Vec<Option<u16>>,
    /// Largest free extent at the end of each bucket, bytes.
    pub largest_free: Vec<u64>,
    pub worst: Option<FragmentationAt>,
    /// What the trace cannot see, said plainly (e.g. PyTorch's caching
    /// allocator sub-allocates inside segments the trace only sees whole).
    pub blind_spots: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FragmentationAt {
    pub time_ns: u64,
    pub fragmentation: f64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RegionSummary {
    /// "pool" or "vmm reservation".
    pub kind: String,
    pub pid: u32,
    pub address: u64,
    pub max_size: u64,
    /// True when the layout is inferred (pools: CUPTI reports their size,
    /// not which address ranges back them).
    pub estimated: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub hostname: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The collector shut down cleanly (false: killed, crashed, cut short).
    pub clean_exit: bool,
    pub kernels_traced: bool,
    pub stacks_captured: bool,
    pub allocations: u64,
    pub frees: u64,
    pub failed_allocations: u64,
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    pub live: Vec<Point>,
    /// What was still allocated when the process ended, split by what it is.
    pub at_exit: AtExit,
    /// "segments" when the process used PyTorch's default caching allocator
    /// (the trace sees its segments, not tensors), "tensors" for allocators
    /// that call CUDA per tensor, "direct" otherwise.
    pub allocator_view: String,
    pub dropped_records: u64,
    pub messages: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AtExit {
    /// Allocated by the program and never freed (compute-sanitizer's leaks).
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    /// Held by a caching allocator (PyTorch, CuPy, XLA) at exit: not a leak.
    pub cached_bytes: u64,
    pub cached_count: u64,
    /// Module globals (`__device__` variables) and CUDA graph pools, owned by
    /// the CUDA runtime for the process's lifetime.
    pub runtime_bytes: u64,
    pub runtime_count: u64,
    /// Allocations by CUPTI or the collector.
    pub profiler_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Site {
    pub id: u32,
    /// The first frame outside the CUDA driver and runtime, as text.
    pub label: String,
    /// "program", "allocator cache" (PyTorch/CuPy/XLA pools), "runtime"
    /// (module globals, graph pools), "profiler", "unknown".
    pub category: String,
    pub frames: Vec<FrameText>,
    pub truncated: bool,
    pub pids: Vec<u32>,
    pub kinds: Vec<String>,
    pub count: u64,
    pub total_bytes: u64,
    /// Sum over devices of what this site held at that device's peak.
    pub live_at_peak: u64,
    /// Highest live bytes of this site alone.
    pub max_live: u64,
    pub leaked_bytes: u64,
    pub leaked_count: u64,
    pub cached_at_exit_bytes: u64,
    /// Allocations freed before any other allocation of the process.
    pub temporaries: u64,
    pub failed: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrameText {
    /// Demangled function name, or "??" when unresolved.
    pub function: String,
    /// file:line, empty when unknown.
    pub location: String,
    /// Module file name; with `offset` when the frame is unresolved.
    pub module: String,
    pub offset: u64,
    pub resolved: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Growth {
    pub site: u32,
    pub pid: u32,
    /// Live bytes of the site at the end of the warm-up and near the end.
    pub from_bytes: u64,
    pub to_bytes: u64,
    pub growth_bytes: u64,
    /// The site's live bytes at the end of each bucket.
    pub curve: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Oom {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub device: u32,
    pub function: String,
    pub requested_bytes: u64,
    /// The CUDA error code (2 = out of memory).
    pub result: u32,
    pub site: u32,
    /// "recovered" (the same request succeeded on a retry: the allocator
    /// freed its cache), "retried" (failed again on a retry), "reached
    /// program" (the last attempt failed).
    pub outcome: String,
    pub device_live_bytes: u64,
    pub device_total_bytes: u64,
    /// Largest free extent in the pools/VMM reservations of the device, when
    /// any region is visible.
    pub largest_free_extent: Option<u64>,
    /// What was live on the device at that instant, by site, largest first.
    pub live_by_site: Vec<SiteBytes>,
}

impl Oom {
    /// The last attempt failed: the program saw the error.
    pub fn reached_program(&self) -> bool {
        self.outcome == "reached program"
    }
}
